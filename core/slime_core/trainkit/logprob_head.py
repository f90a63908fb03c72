"""Response log-probs from the decoder's last hidden states: the LM head, the log-softmax, the
target gather and the entropy as one autograd step.

Through the model's own forward a micro-batch's logits are computed at every position
(``[B, W, V]``: prompt and padding too), then gathered, cast to fp32, log-softmaxed and reduced
by separate operations, each a full pass over ``[R, V]`` values forward and again backward. For
a 152k vocabulary that traffic was most of a GPU training step that is not matrix products.
Here only the ``R`` response positions' hidden states go through the head, and the fp32 work
runs over bounded chunks of rows:

* forward: ``logits = h @ W^T`` in the model's dtype (the one full-size tensor, kept for the
  backward), then per chunk ``z = logits / T``, ``lse = logsumexp(z)``, ``logp[target] =
  z[target] - lse`` and ``H = lse - sum(softmax(z) * z)``;
* backward: per chunk ``dz = g_lp (onehot - p) - g_H p (log p + H)`` overwrites that chunk of
  the kept logits (in the model's dtype, as autograd would hand the head's backward), then two
  matrix products give the hidden states' and the head weight's gradients.

Values are those of ``log_softmax(lm_head(h).float() / T)``, the trainer's convention, up to
float rounding. ``compile=True`` runs the per-chunk functions through ``torch.compile`` so each
chunk is one or two fused kernels; eagerly, each chunk takes about four fused ATen passes each
way.

Used for ``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``,
``MistralForCausalLM`` and the mixture-of-experts ``Qwen3MoeForCausalLM``,
``Qwen2MoeForCausalLM``, ``OlmoeForCausalLM`` and ``MixtralForCausalLM`` (their ``forward``
is ``lm_head(model(...))`` and, with ``output_router_logits`` off, nothing else);
:func:`unsupported` says why another model keeps its own forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from slime_core import kernels

CAUSAL_LMS = {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM",
              "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "OlmoeForCausalLM",
              "MixtralForCausalLM"}
CHUNK_BYTES = 1 << 28  # fp32 bytes of one chunk's [rows, V] temporaries (eager)
# On the CPU, chunks of ~16 MiB: each temporary is a block the heap already holds, not a fresh
# [rows, V] region (192 MiB at SmolLM2's 1,024 response rows, page-faulted while the heap
# grows), and a chunk's passes find it in cache: SmolLM2's statistics with entropy 110 ->
# 42 ms (with the row dot products below), its gradient 66 -> 58 ms (2 cores)
CPU_CHUNK_BYTES = 1 << 24


def unsupported(model: Any) -> str | None:
    """Why ``model``'s response log-probs cannot come from :func:`head_log_probs` (None when
    they can)."""
    name = type(model).__name__
    if name not in CAUSAL_LMS:
        return f"{name} is not one of {sorted(CAUSAL_LMS)}"
    if not isinstance(getattr(model, "model", None), torch.nn.Module):
        return f"{name} has no .model decoder"
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        return "the output head is not a torch.nn.Linear"
    if getattr(model.config, "final_logit_softcapping", None):
        return "final logit soft-capping is not implemented"
    if getattr(model.config, "output_router_logits", False):
        return "output_router_logits: the forward adds a router loss the head would drop"
    return None


def _chunk_rows(vocab: int, device: torch.device) -> int:
    limit = CPU_CHUNK_BYTES if device.type == "cpu" else CHUNK_BYTES
    return max(1, limit // (4 * vocab))


# Two forms of the same per-chunk math. The first is written for inductor, which fuses it
# into one or two kernels; run eagerly it makes about ten passes over the [rows, V] chunk. The
# second is written for eager execution: fused ATen kernels (log_softmax, softmax), in-place
# updates and batched dot products, about four passes forward and four backward.


def _stats(logits: torch.Tensor, target: torch.Tensor, inv_temp: float,
           entropy: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    z = logits.float() * inv_temp
    lse = torch.logsumexp(z, dim=-1)
    lp = z.gather(-1, target.unsqueeze(-1)).squeeze(-1) - lse
    if entropy:
        ent = lse - (torch.softmax(z, dim=-1) * z).sum(-1)
    else:
        ent = torch.zeros_like(lse)
    return lp, lse, ent


def _grad(logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, ent: torch.Tensor,
          g_lp: torch.Tensor, g_ent: torch.Tensor | None, inv_temp: float) -> torch.Tensor:
    """d loss / d logits of one chunk, in the logits' dtype (``g_ent`` None: no entropy
    gradient)."""
    z = logits.float() * inv_temp
    logp = z - lse.unsqueeze(-1)
    p = torch.exp(logp)
    cols = torch.arange(z.shape[-1], device=z.device)
    onehot = (cols == target.unsqueeze(-1)).to(z.dtype)
    dz = g_lp.unsqueeze(-1) * (onehot - p)
    if g_ent is not None:
        dz = dz - g_ent.unsqueeze(-1) * p * (logp + ent.unsqueeze(-1))
    return (dz * inv_temp).to(logits.dtype)


def _stats_eager(logits: torch.Tensor, target: torch.Tensor, inv_temp: float,
                 entropy: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    z = logits.float()
    if inv_temp != 1.0:  # in place only on a copy: fp32 logits are kept for the backward
        z = z.mul_(inv_temp) if z.data_ptr() != logits.data_ptr() else z * inv_temp
    logp = torch.log_softmax(z, dim=-1)
    lse = z[:, 0] - logp[:, 0]
    lp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    del z
    if entropy:
        # the product into exp's own buffer: one pass, no second [rows, V] tensor (a batched
        # [1, V] x [V, 1] product per row took 2.5x as long on the CPU)
        ent = -logp.exp().mul_(logp).sum(-1)
    else:
        ent = torch.zeros_like(lse)
    return lp, lse, ent


def _grad_eager(logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                ent: torch.Tensor, g_lp: torch.Tensor, g_ent: torch.Tensor | None,
                inv_temp: float) -> torch.Tensor:
    """:func:`_grad` in fp32 (the caller's copy into the logits casts it). ``logits`` is the
    backward's own buffer: fp32 logits are updated in place."""
    z = logits.float()
    if inv_temp != 1.0:
        z.mul_(inv_temp)
    p = torch.softmax(z, dim=-1)
    if g_ent is None:
        p.mul_(-g_lp.unsqueeze(-1))
        dz = p
    else:  # -p (g_lp + g_ent (log p + H)), with log p = z - lse
        z.sub_(lse.unsqueeze(-1)).add_(ent.unsqueeze(-1)).mul_(g_ent.unsqueeze(-1))
        z.add_(g_lp.unsqueeze(-1)).mul_(p).neg_()
        dz = z
    dz.scatter_add_(-1, target.unsqueeze(-1), g_lp.unsqueeze(-1))
    if inv_temp != 1.0:
        dz.mul_(inv_temp)
    return dz


_COMPILED: dict[str, Callable[..., Any]] = {}


def _kernels(compile: bool) -> tuple[Callable[..., Any], Callable[..., Any]]:
    if not compile:
        return _stats_eager, _grad_eager
    if not _COMPILED:
        _COMPILED["stats"] = torch.compile(_stats, dynamic=True)
        _COMPILED["grad"] = torch.compile(_grad, dynamic=True)
    return _COMPILED["stats"], _COMPILED["grad"]


def _forward_stats(logits: torch.Tensor, target: torch.Tensor, inv_temp: float, entropy: bool,
                   compile: bool, triton: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if triton:  # one pass over the whole [R, V] logits, no fp32 temporaries to bound
        from slime_core.kernels import logprob_stats

        return logprob_stats.stats(logits, target, inv_temp, entropy)
    stats, _ = _kernels(compile)
    step = _chunk_rows(logits.shape[-1], logits.device)
    parts = [stats(logits[s:s + step], target[s:s + step], inv_temp, entropy)
             for s in range(0, logits.shape[0], step)]
    if not parts:
        empty = logits.new_zeros(0, dtype=torch.float32)
        return empty, empty, empty
    lp, lse, ent = (torch.cat(x) for x in zip(*parts, strict=True))
    return lp, lse, ent


class _HeadLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor | None, target: torch.Tensor, inv_temp: float,
                entropy: bool, compile: bool, triton: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)  # an unused entropy output gets None, not zeros
        logits = F.linear(hidden, weight, bias)
        lp, lse, ent = _forward_stats(logits, target, inv_temp, entropy, compile, triton)
        ctx.save_for_backward(hidden, weight, target, lse, ent)
        ctx.logits = logits  # overwritten by its own gradient in backward: not a saved input
        ctx.inv_temp, ctx.compile, ctx.has_bias = inv_temp, compile, bias is not None
        ctx.triton = triton
        return lp, ent

    @staticmethod
    def backward(ctx: Any, g_lp: torch.Tensor | None,  # type: ignore[override]
                 g_ent: torch.Tensor | None) -> tuple[Any, ...]:
        hidden, weight, target, lse, ent = ctx.saved_tensors
        grad = ctx.logits
        if grad is None:
            raise RuntimeError(
                "logprob_head: a second backward through the same log-probs (retain_graph): "
                "the kept logits became the first backward's gradient; set "
                "train.fused_head = false to back-propagate twice")
        ctx.logits = None
        g_lp = torch.zeros_like(lse) if g_lp is None else g_lp.float()
        g_ent = None if g_ent is None else g_ent.float()
        if ctx.triton:
            from slime_core.kernels import logprob_stats

            logprob_stats.grad_(grad, target, lse, ent, g_lp, g_ent, ctx.inv_temp)
        else:
            _, grad_fn = _kernels(ctx.compile)
            step = _chunk_rows(grad.shape[-1], grad.device)
            for s in range(0, grad.shape[0], step):
                e = s + step
                grad[s:e] = grad_fn(grad[s:e], target[s:e], lse[s:e], ent[s:e], g_lp[s:e],
                                    None if g_ent is None else g_ent[s:e], ctx.inv_temp)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        d_hidden = grad @ weight if need_h else None
        d_weight = grad.t() @ hidden if need_w else None
        d_bias = grad.sum(0) if need_b and ctx.has_bias else None
        return d_hidden, d_weight, d_bias, None, None, None, None, None


def head_log_probs(hidden: torch.Tensor, head: torch.nn.Linear, target: torch.Tensor,
                   temperature: float, entropy: bool = False, entropy_grad: bool = True,
                   compile: bool = False,
                   kernel: str = "torch") -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``target`` [R] (and the entropy, when ``entropy``) under
    ``log_softmax(head(hidden).float() / T)`` for hidden states [R, d]; ``T`` is
    ``temperature`` when > 0, else 1. Both results are fp32 [R]; the entropy carries a
    gradient only when ``entropy_grad``. Without autograd (``torch.no_grad`` or nothing that
    requires a gradient) no logits are kept. ``kernel`` (``train.head_kernel``): ``"triton"``
    runs the statistics and the gradient as :mod:`slime_core.kernels.logprob_stats`,
    ``"torch"`` as the chunked functions here, ``"auto"`` the first where it can run."""
    inv_temp = 1.0 / temperature if temperature > 0 else 1.0
    triton = kernels.choose(kernel, hidden.device, "train.head_kernel")
    args = (hidden, head.weight, head.bias)
    if not (torch.is_grad_enabled() and any(a is not None and a.requires_grad for a in args)):
        logits = F.linear(*args)
        lp, _, ent = _forward_stats(logits, target, inv_temp, entropy, compile, triton)
        return lp, ent if entropy else None
    lp, ent = _HeadLogProbs.apply(hidden, head.weight, head.bias, target, inv_temp, entropy,
                                  compile, triton)
    if not entropy:
        return lp, None
    return lp, ent if entropy_grad else ent.detach()
