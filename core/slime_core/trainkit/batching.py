"""Micro-batching by token budget and padded forward passes for response log-probs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from slime_core.moe.routing import RoutingControl
from slime_core.trainkit.causal_attention import causal_attention
from slime_core.trainkit.flat import split_samples
from slime_core.trainkit.logprob_head import head_log_probs
from slime_core.trainkit.shared_prefix import (
    host_tokens,
    prompt_groups,
    row_saving,
    shared_prefix_hidden,
)

# the least share of token rows the shared prefix must skip to replace the one-pass forward in
# CUDA graphs (see response_log_probs)
GRAPHED_PREFIX_SAVING = 0.25


def micro_batches(lengths: list[int], token_budget: int,
                  row_multiple: int = 1) -> list[list[int]]:
    """Split sample indices into micro-batches whose padded size stays within ``token_budget``.

    Samples are sorted by length so padding stays small; a single sample longer than the
    budget forms its own micro-batch. As many micro-batches as a greedy fill needs, then
    balanced: the sorted samples are cut into that many runs of equal row counts (one apart)
    when every run stays within the budget, else the greedy cut is kept. Even shapes keep
    the kernels efficient and give a compiled forward fewer shapes to compile for (128
    samples of 268 tokens in 16k budgets were 61 + 61 + 6 rows, now 43 + 43 + 42). The order
    is deterministic (stable sort).

    ``row_multiple`` (``train.cuda_graphs``: the captured shapes' row bucket): the runs are
    cut at multiples of it instead, as evenly as that allows (the last run takes what is
    left), where every run stays within the budget (:func:`_aligned_sizes`). A graph pads a
    run's rows up to the multiple: the anchor's 43 + 43 + 42 rows computed 48 + 48 + 48, 12%
    of the decoder's work on padding, where 48 + 48 + 32 compute none.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    greedy: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if cur and new_longest * (len(cur) + 1) > token_budget:
            greedy.append(cur)
            cur, longest = [], 0
            new_longest = lengths[i]
        cur.append(i)
        longest = new_longest
    if cur:
        greedy.append(cur)
    k, n = len(greedy), len(order)
    if k <= 1:
        return greedy
    even = [n // k + (1 if j < n % k else 0) for j in range(k)]  # shorter samples: extra row
    for sizes in (*_aligned_sizes(n, k, row_multiple), even):
        runs, start = [], 0
        for size in sizes:
            runs.append(order[start:start + size])
            start += size
        if all(lengths[run[-1]] * len(run) <= token_budget or len(run) == 1 for run in runs):
            return runs
    return greedy


def _aligned_sizes(n: int, k: int, multiple: int) -> list[list[int]]:
    """Cuts of ``n`` rows into ``k`` runs whose padded rows total the least a ``multiple``
    allows: each run a multiple of it but the last, which takes what is left, the extra
    multiples on the first runs (the shorter samples), then on the last ones (a last run
    short by the surplus may fit the budget where a full one does not); none where
    ``multiple`` is 1 or a run would be empty (fewer multiples than runs)."""
    blocks = -(-n // multiple)
    if multiple <= 1 or blocks < k:
        return []
    cuts = []
    for extra_first in (True, False):
        extra = range(blocks % k) if extra_first else range(k - blocks % k, k)
        sizes = [(blocks // k + (1 if j in extra else 0)) * multiple for j in range(k)]
        sizes[-1] -= sum(sizes) - n  # the padding a graph would add: less than one multiple
        if sizes not in cuts:
            cuts.append(sizes)
    return cuts


def shared_micro_batches(lengths: list[int], response_lengths: list[int], groups: list[int],
                         token_budget: int, row_multiple: int = 1) -> list[list[int]]:
    """Micro-batches for the shared-prefix forward (``groups``: prompt group per sample, from
    :func:`shared_prefix.prompt_groups`): whichever of two plans computes fewer token rows.

    :func:`micro_batches` sorts samples by length, which pads least but scatters a group's
    samples over micro-batches when their responses differ in length, so each prompt is
    computed once per micro-batch it lands in. The other plan keeps whole groups together
    (groups ordered by their longest sample, filled greedily within the same budget; a
    group over the budget is split by :func:`micro_batches`), computing each prompt once
    but padding every response to its micro-batch's longest. Long prompts favour the second,
    responses of very different lengths the first; the cost model counts both exactly
    (:func:`_cost`). ``row_multiple``: the first plan's, as :func:`micro_batches` takes it.
    """
    by_length = micro_batches(lengths, token_budget, row_multiple)
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    order = sorted(members.values(), key=lambda m: max(lengths[i] for i in m))
    by_group: list[list[int]] = []
    cur: list[int] = []
    for m in order:
        if max(lengths[i] for i in m) * len(m) > token_budget:  # alone over the budget
            by_group += [[m[i] for i in mb] for mb in micro_batches([lengths[i] for i in m],
                                                                    token_budget)]
            continue
        if cur and max(lengths[i] for i in cur + m) * len(cur + m) > token_budget:
            by_group.append(cur)
            cur = []
        cur = cur + m
    if cur:
        by_group.append(cur)

    def total(plan: list[list[int]]) -> int:
        return sum(_cost(mb, lengths, response_lengths, groups) for mb in plan)

    return by_group if total(by_group) < total(by_length) else by_length


def _cost(mb: list[int], lengths: list[int], resp: list[int], groups: list[int]) -> int:
    """Token rows one micro-batch computes: the two-pass layout (distinct prompts x longest
    prompt + samples x longest response less one) when a prompt is shared, else samples x
    longest sample."""
    distinct = {groups[i] for i in mb}
    if len(distinct) == len(mb):
        return len(mb) * max(lengths[i] for i in mb)
    prompt = max(lengths[i] - resp[i] for i in mb)
    return len(distinct) * prompt + len(mb) * max(max(resp[i] for i in mb) - 1, 0)


def right_pad(tokens: list[torch.Tensor], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch of ``tokens``: ids ``[B, W]`` (``pad_id`` after each row's tokens)
    and the attention mask ``[B, W]`` (1 on tokens), both long, on the host. Built there and
    moved in one copy each by the caller: per-row copies to a GPU each wait for the device
    queue to drain."""
    lengths = [int(t.numel()) for t in tokens]
    ids = np.full((len(tokens), max(lengths)), pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, t in enumerate(host_tokens(tokens)):  # numpy: no operator dispatch per row
        ids[row, : lengths[row]] = t
        mask[row, : lengths[row]] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def response_index(lengths: list[int], response_lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, cols)`` of a right-padded batch's response predictions, on the host: response
    token ``t`` of row ``i`` (``n`` tokens, ``r`` of them the response) is predicted at
    position ``n - r - 1 + t``, so the logits at ``[rows, cols]`` score the tokens at
    ``[rows, cols + 1]``, row after row in sample order."""
    resp = np.asarray(response_lengths, dtype=np.int64)
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), resp)
    # column t of row i's response: (n_i - r_i - 1) + t, laid out by numpy (no operator per row)
    starts = np.asarray(lengths, dtype=np.int64) - resp - 1
    offsets = np.arange(int(resp.sum()), dtype=np.int64) - np.repeat(np.cumsum(resp) - resp, resp)
    return torch.from_numpy(rows), torch.from_numpy(np.repeat(starts, resp) + offsets)


def response_log_probs(
    model: torch.nn.Module,
    tokens: list[torch.Tensor],
    response_lengths: list[int],
    temperature: float,
    pad_id: int,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    fused_head: bool = False,
    compile_head: bool = False,
    shared_prefix: bool = False,
    head_kernel: str = "torch",
    routing: RoutingControl | None = None,
    routes: list[torch.Tensor | None] | None = None,
    decoder: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per-sample log-probs of the response tokens under ``model`` (right-padded batch).

    Convention (matches the engines): ``log_softmax(logits / T)`` of the full distribution,
    with ``T = temperature`` when it is > 0 and 1 for greedy. Entropy is of that distribution
    (no autograd graph is built for it when ``entropy_grad`` is False).

    The logits of every response position of the batch are gathered into one [R, V] tensor
    (R = total response tokens) and reduced together: each row's values are those of a per-row
    computation, but the backward pass scatters once into the logits' gradient instead of
    allocating and adding a full-size zero gradient per sample (which per sample cost as much
    memory traffic as the whole micro-batch's logits).

    ``fused_head`` (for models :func:`logprob_head.unsupported` accepts): the decoder's hidden
    states of the response positions go through :func:`logprob_head.head_log_probs` instead,
    so no logits exist for prompt or padding positions and the fp32 work is chunked;
    ``compile_head`` compiles its per-chunk functions; ``head_kernel`` picks its statistics
    kernels (``train.head_kernel``). ``shared_prefix`` (with ``fused_head``):
    samples with identical prompts compute them once (:mod:`shared_prefix`), when any do.

    ``routing`` with ``routes`` (rollout routing replay, a mixture-of-experts model; without
    the shared-prefix forward): sample i's first ``len(tokens[i]) - 1`` positions are routed to
    ``routes[i]`` ``[len - 1, layers, top_k]`` (None: the router's own choice), its last
    position and the padding to the router's own choice (their outputs predict nothing).

    ``decoder`` (with ``fused_head``, without ``routing``): what computes the right-padded
    batch's hidden states [R, W] -> [R, W, H] in place of ``model.model``
    (:class:`graphed_decoder.GraphedDecoder`: the same function replayed from CUDA graphs);
    with ``shared_prefix``, a ``GraphedDecoder`` replays the two passes too where they skip
    at least :data:`GRAPHED_PREFIX_SAVING` of the token rows (:func:`row_saving`): their
    padded prompts need a masked attention kernel, which in bf16 is slower than the one-pass
    forward's causal flash kernel (the 0.5B anchor's 15-token prompts before 256 tokens save
    5% of the rows; SmolLM2's example, 60 before 32, 58%).
    """
    if decoder is not None and (not fused_head or routing is not None):
        raise ValueError("response_log_probs: a decoder replaces the fused-head forward "
                         "only (fused_head, no routing)")
    if decoder is not None and shared_prefix and not hasattr(decoder, "two_pass"):
        raise ValueError("response_log_probs: with shared_prefix the decoder must replay the "
                         "two passes (a GraphedDecoder)")
    device = next(model.parameters()).device
    lengths = [int(t.numel()) for t in tokens]
    resp = [int(r) for r in response_lengths]
    replay = routing is not None and routes is not None
    # (not with routing replay: the two-pass forward lays tokens out otherwise than the
    # replayed ids of the right-padded batch)
    if fused_head and shared_prefix and not replay and (
            groups := prompt_groups(tokens, resp)) is not None and (
            decoder is None or row_saving(lengths, resp, groups) >= GRAPHED_PREFIX_SAVING):
        hidden, target = shared_prefix_hidden(cast(torch.nn.Module, model.model), tokens, resp,
                                              groups, pad_id, graphed=decoder)
        return _head(model, hidden, target, resp, temperature, with_entropy, entropy_grad,
                     compile_head, head_kernel)
    ids, attn = right_pad(tokens, pad_id)
    width = int(ids.shape[1])
    ids, attn = ids.to(device), attn.to(device)
    rows, cols = (x.to(device) for x in response_index(lengths, resp))
    target = ids[rows, cols + 1]
    routed = (routing.replaying(_replay_ids(routes, lengths, width, routing, device))
              if routing is not None and routes is not None  # `replay`
              else contextlib.nullcontext())
    if fused_head:
        # No padding mask: the batch is right-padded, so under the causal mask no real token
        # sees padding, and the model (a Llama-family decoder, which fused_head requires)
        # gives the real positions the same values without it. With a padding mask SDPA
        # cannot use its flash kernel (H200, 0.5B anchor: the masked kernel's forward and
        # backward were 48 ms of a 0.31 s training step); the padding rows' outputs are
        # never read. causal_attention: no mask under torch.compile either.
        body = cast(torch.nn.Module, model.model)
        with routed, causal_attention(body):
            hidden = (decoder(ids) if decoder is not None
                      else cast(Any, body)(input_ids=ids, use_cache=False)[0])
        return _head(model, hidden[rows, cols], target, resp, temperature, with_entropy,
                     entropy_grad, compile_head, head_kernel)
    with routed:
        logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits
    lg = logits[rows, cols].float()
    temp = temperature if temperature > 0 else 1.0
    if temp != 1.0:
        lg = lg / temp
    logp = torch.log_softmax(lg, dim=-1)
    lp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    out = split_samples(lp, resp)
    ents: list[torch.Tensor] | None = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = -(logp.exp() * logp).sum(-1)
        ents = split_samples(ent, resp)
    return out, ents


def _replay_ids(routes: list[torch.Tensor | None], lengths: list[int], width: int,
                routing: RoutingControl, device: torch.device) -> torch.Tensor:
    """The right-padded batch's replayed ids ``[rows x width, layers, top_k]``, -1 where the
    router keeps its own choice."""
    shape = routing.shape
    out = torch.full((len(lengths), width, shape.layers, shape.top_k), -1, dtype=torch.long)
    for row, (r, n) in enumerate(zip(routes, lengths, strict=True)):
        if r is not None:
            out[row, : n - 1] = r.long()
    return out.view(-1, shape.layers, shape.top_k).to(device)


def _head(model: torch.nn.Module, hidden: torch.Tensor, target: torch.Tensor, resp: list[int],
          temperature: float, with_entropy: bool, entropy_grad: bool,
          compile_head: bool,
          head_kernel: str = "torch") -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    lp, ent = head_log_probs(hidden, cast(Any, model).get_output_embeddings(), target, temperature,
                             entropy=with_entropy, entropy_grad=entropy_grad, compile=compile_head,
                             kernel=head_kernel)
    return split_samples(lp, resp), split_samples(ent, resp) if ent is not None else None


def to_tensor_list(values: list[Any], dtype: torch.dtype) -> list[torch.Tensor]:
    return [v if isinstance(v, torch.Tensor) else torch.as_tensor(v, dtype=dtype) for v in values]
