"""Response log-probs (and entropies) of a GPTModel, in the torch backend's convention.

Same convention as ``slime_core.api.response_log_probs``: right-padded rows, position p
predicts token p + 1, ``log_softmax(logits / T)`` of the full vocabulary in fp32 with
``T = temperature`` (1 when greedy). By default the model is built with
``parallel_output=True``: each TP rank holds its slice of the vocabulary's logits and the
softmax's statistics are reduced over the TP group (:mod:`megatron_backend.vocab_parallel`);
with ``megatron.vocab_parallel_logprobs = false`` every rank holds the gathered logits and
takes the plain log-softmax. Either way the rows Megatron pads the vocabulary with take no
probability. With pipeline parallelism only the last stage has logits
(:mod:`megatron_backend.pipeline` moves activations between stages).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from slime_core.api import response_index, right_pad


def causal_mask(width: int, device: torch.device) -> torch.Tensor:
    """Megatron's mask convention: True where attention is *not* allowed, ``[1, 1, s, s]``.

    Passed explicitly: megatron's default causal mask is allocated on ``"cuda"``. Right padding
    needs nothing more (a real token never attends to a later pad).
    """
    return torch.triu(torch.ones(width, width, dtype=torch.bool, device=device), 1)[None, None]


@dataclass
class Packed:
    """One micro-batch as model inputs, and where its response tokens are."""

    ids: torch.Tensor  # [b, s] right-padded
    positions: torch.Tensor  # [b, s]
    mask: torch.Tensor  # [1, 1, s, s]
    rows: torch.Tensor  # response token -> its row
    cols: torch.Tensor  # response token -> the position that predicts it
    target: torch.Tensor  # response token ids
    resp: list[int]


def pack(tokens: list[torch.Tensor], response_lengths: list[int], pad_id: int,
         device: torch.device) -> Packed:
    lengths = [int(t.numel()) for t in tokens]
    resp = [int(r) for r in response_lengths]
    ids = right_pad(tokens, pad_id)[0].to(device)
    width = int(ids.shape[1])
    positions = torch.arange(width, device=device).unsqueeze(0).expand(len(tokens), -1)
    rows, cols = (x.to(device) for x in response_index(lengths, resp))
    return Packed(ids, positions, causal_mask(width, device), rows, cols, ids[rows, cols + 1],
                  resp)


def from_logits(logits: torch.Tensor, p: Packed, temperature: float, vocab: int,
                with_entropy: bool = False, entropy_grad: bool = True,
                padded_vocab: int | None = None,
                ) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """Per-sample response log-probs (and entropies) from ``[b, s, padded vocab]`` logits, or
    from this TP rank's ``[b, s, padded vocab / tp]`` slice of them (``parallel_output=True``;
    a collective over the TP group)."""
    temp = temperature if temperature > 0 else 1.0
    width = int(logits.shape[-1])
    if padded_vocab is not None and width != padded_vocab:
        from megatron_backend import parallel
        from megatron_backend.vocab_parallel import log_probs_and_entropy

        start = parallel.tp_rank() * width
        z = logits[p.rows, p.cols].float()  # fp32 on the slice only
        if temp != 1.0:
            z = z / temp
        want_grad = entropy_grad and torch.is_grad_enabled()
        lp, ent = log_probs_and_entropy(z, p.target, start, vocab - start, with_entropy,
                                        parallel.tp_group())
        ents: list[torch.Tensor] | None = None
        if with_entropy and ent is not None:
            ents = list((ent if want_grad else ent.detach()).split(p.resp))
        return list(lp.split(p.resp)), ents
    lg = logits[p.rows, p.cols, :vocab].float()
    if temp != 1.0:
        lg = lg / temp
    logp = torch.log_softmax(lg, dim=-1)
    lp = logp.gather(-1, p.target.unsqueeze(-1)).squeeze(-1)
    out = list(lp.split(p.resp))
    ents = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = -(logp.exp() * logp).sum(-1)
        ents = list(ent.split(p.resp))
    return out, ents
