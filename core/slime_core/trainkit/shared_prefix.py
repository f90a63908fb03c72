"""Decoder hidden states for response log-probs with each shared prompt computed once.

The samples of a GRPO group are one prompt and several responses. Run as separate rows, every
row recomputes the prompt: with the CPU benchmark's 32-token prompts and 64-token responses
that is a third of a training step's tokens. Here a micro-batch's forward is two passes of the
model's own decoder:

1. the distinct prompts, one row each (right-padded), with a key/value cache;
2. every response (without its last token, which predicts nothing), one row each, attending
   to its prompt's cached keys and values (indexed per row, so autograd sums the responses'
   gradients into the one prompt computation) and to its own earlier tokens. Position ids
   continue from the prompt's real length; the prompt's padding columns are masked.

The logits of a response token come from the hidden state before it: the first from the
prompt pass's last real position, the rest from the response pass. The function computed is
the same as one row per sample, up to float rounding (checked in
``core/tests/trainkit/test_shared_prefix.py``); the matrix products and elementwise work on
prompt tokens shrink by the group size, attention costs the same.

Only samples in the same micro-batch share: the trainer's plan
(``batching.shared_micro_batches``) keeps a group's samples together when that computes fewer
token rows than sorting samples by length.

A sample's prompt is everything before its response (``tokens[:n - r]``); a multi-turn
sample's tool outputs are part of its response, so only identical first prompts are shared.
Used with the fused head's models (``logprob_head.CAUSAL_LMS``), whose decoders take
``past_key_values`` (transformers' ``DynamicCache``) and build the padded causal mask for a
call that continues a cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import numpy as np
import torch

from slime_core.trainkit.flat import flat_cat


def host_tokens(tokens: list[torch.Tensor]) -> list[np.ndarray]:
    """Each sample's token ids as a host array (a view where the tensor is on the host
    already). The padded batches are assembled from these: slicing and copying numpy arrays
    costs no operator dispatch, which per sample was most of a small model's GPU step
    (issue 43)."""
    if not tokens:
        return []
    lengths = [int(t.numel()) for t in tokens]
    # one concatenation and one conversion for the batch (a tensor's .numpy() is itself
    # several operators), then views of it
    flat = flat_cat(tokens).detach().cpu().numpy()
    return np.split(flat, np.cumsum(lengths[:-1]))


def prompt_groups(tokens: list[torch.Tensor], response_lengths: list[int]) -> list[int] | None:
    """Group index per sample (samples with identical prompts share one), or None when no
    two samples share a prompt or a sample has no prompt token (nothing to gain, or no
    position to predict its first response token from)."""
    index: dict[bytes, int] = {}
    groups: list[int] = []
    for t, r in zip(host_tokens(tokens), response_lengths, strict=True):
        n = int(t.size)
        if n - int(r) < 1:
            return None
        key = t[: n - int(r)].tobytes()
        groups.append(index.setdefault(key, len(index)))
    return groups if len(index) < len(groups) else None


class PrefixLayout(NamedTuple):
    """A micro-batch laid out for the two passes (host arrays): the distinct prompts
    ``ids1``/``mask1`` [G, W1], every response without its last token ``ids2``/``mask2`` and
    their positions ``pos2`` [R, T], each response row's prompt row ``rows`` [R]; ``where``:
    the flat position (over the G * W1 prompt-pass states, then the R * T response-pass
    ones) of the state that predicts each response token, sample after sample; ``target``:
    those tokens."""

    ids1: np.ndarray
    mask1: np.ndarray
    ids2: np.ndarray
    mask2: np.ndarray
    pos2: np.ndarray
    rows: np.ndarray
    where: np.ndarray
    target: np.ndarray


Shape = tuple[int, int, int, int]  # (G, W1, R, T) of a PrefixLayout


def prefix_layout(tokens: list[torch.Tensor], response_lengths: list[int], groups: list[int],
                  pad_id: int, bucket: Callable[[Shape], Shape] | None = None) -> PrefixLayout:
    """The micro-batch's :class:`PrefixLayout` at its own shape, or at ``bucket(shape)`` (each
    size at least the micro-batch's). The rows and columns a bucket adds are padding no real
    position attends to: added prompt rows hold one unmasked token (an all-masked row's
    attention is undefined, and would poison the backward), added response rows continue
    prompt 0 with masked tokens."""
    resp = [int(r) for r in response_lengths]
    plen = [int(t.numel()) - r for t, r in zip(tokens, resp, strict=True)]
    n_groups = max(groups) + 1
    first = [groups.index(g) for g in range(n_groups)]  # a sample holding each prompt
    shape = (n_groups, max(plen[i] for i in first), len(tokens), max(resp) - 1)
    n1, width, n2, rest = bucket(shape) if bucket is not None else shape
    if n1 < shape[0] or width < shape[1] or n2 < shape[2] or rest < shape[3]:
        raise ValueError(f"shared prefix: bucket {(n1, width, n2, rest)} is smaller than the "
                         f"micro-batch's {shape}")
    arrays = host_tokens(tokens)
    ids1 = np.full((n1, width), pad_id, dtype=np.int64)
    mask1 = np.zeros((n1, width), dtype=np.int64)
    mask1[n_groups:, 0] = 1
    for g, i in enumerate(first):
        ids1[g, : plen[i]] = arrays[i][: plen[i]]
        mask1[g, : plen[i]] = 1
    ids2 = np.full((n2, rest), pad_id, dtype=np.int64)
    mask2 = np.zeros((n2, rest), dtype=np.int64)
    rows = np.zeros(n2, dtype=np.int64)
    rows[: len(groups)] = groups
    starts = np.zeros(n2, dtype=np.int64)
    starts[: len(plen)] = plen
    starts[len(plen):] = plen[first[0]]
    pos2 = starts[:, None] + np.arange(rest, dtype=np.int64)
    where: list[int] = []
    for i, (t, g) in enumerate(zip(arrays, groups, strict=True)):
        if not resp[i]:
            continue
        k = resp[i] - 1  # the last response token predicts nothing
        where.append(g * width + plen[i] - 1)
        if k > 0:
            ids2[i, :k] = t[plen[i]: plen[i] + k]
            mask2[i, :k] = 1
            base = n1 * width + i * rest
            where.extend(range(base, base + k))
    target = (np.concatenate([t[plen[i]: plen[i] + resp[i]] for i, t in enumerate(arrays)])
              .astype(np.int64))
    return PrefixLayout(ids1, mask1, ids2, mask2, pos2, rows,
                        np.asarray(where, dtype=np.int64), target)


def row_saving(lengths: list[int], response_lengths: list[int], groups: list[int]) -> float:
    """The share of the one-pass forward's token rows (every sample whole) that the two
    passes do not compute (each group's prompt once): 0 when no prompt is shared."""
    total = sum(int(n) for n in lengths)
    prompts: dict[int, int] = {}
    for n, r, g in zip(lengths, response_lengths, groups, strict=True):
        prompts[g] = int(n) - int(r)
    two = sum(prompts.values()) + sum(max(int(r) - 1, 0) for r in response_lengths)
    return max(0.0, 1.0 - two / total) if total else 0.0


def shared_prefix_hidden(
    decoder: torch.nn.Module,
    tokens: list[torch.Tensor],
    response_lengths: list[int],
    groups: list[int],
    pad_id: int,
    graphed: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states ``[R, d]`` that predict every response token, sample after sample, and
    those tokens ``[R]`` (R = total response tokens). ``decoder`` is the causal LM's
    ``.model``; ``groups`` comes from :func:`prompt_groups`. ``graphed`` (a
    :class:`~slime_core.trainkit.graphed_decoder.GraphedDecoder` of ``decoder``): the two
    passes replayed from its CUDA graphs, at its bucketed shapes."""
    device = next(decoder.parameters()).device
    layout = prefix_layout(tokens, response_lengths, groups, pad_id,
                           graphed.prefix_bucket if graphed is not None else None)
    ids1, mask1, ids2, mask2, pos2, rows, where, target = (
        torch.from_numpy(a).to(device) for a in layout)
    if graphed is not None:
        flat = graphed.two_pass(ids1, mask1, ids2, mask2, pos2, rows)
    else:
        flat = two_pass(decoder, ids1, mask1, ids2, mask2, pos2, rows)
    return flat.index_select(0, where), target


def two_pass(decoder: torch.nn.Module, ids1: torch.Tensor, mask1: torch.Tensor,
             ids2: torch.Tensor, mask2: torch.Tensor, pos2: torch.Tensor, rows: torch.Tensor,
             full_masks: bool = False) -> torch.Tensor:
    """The decoder's hidden states of a :class:`PrefixLayout`'s two passes, flat: the prompt
    pass's G * W1 states, then the response pass's R * T. ``full_masks``: the attention masks
    built here as [rows, 1, queries, keys] tensors, which transformers takes as they are (it
    builds them from the 2-D masks otherwise, with host reads a CUDA graph cannot capture);
    for the decoders whose attention is SDPA (boolean masks) or eager (additive ones)."""
    m1: torch.Tensor = mask1
    if full_masks:
        m1 = _full_mask(decoder, _causal(mask1.shape[1], mask1.device)
                        & mask1.bool()[:, None, None, :])
    out1 = decoder(input_ids=ids1, attention_mask=m1, use_cache=True)
    d = out1.last_hidden_state.shape[-1]
    flat = out1.last_hidden_state.reshape(-1, d)
    rest = int(ids2.shape[1])
    if rest == 0:
        return flat
    prompt_keys = mask1.index_select(0, rows)
    if full_masks:
        n2 = int(ids2.shape[0])
        m2 = _full_mask(decoder, torch.cat(
            (prompt_keys.bool()[:, None, None, :].expand(n2, 1, rest, -1),
             _causal(rest, ids2.device) & mask2.bool()[:, None, None, :]), dim=-1))
    else:
        m2 = torch.cat((prompt_keys, mask2), 1)
    cache = _expanded_cache(out1.past_key_values, rows, decoder)
    out2 = decoder(input_ids=ids2, attention_mask=m2, position_ids=pos2, past_key_values=cache,
                   use_cache=True)
    return torch.cat((flat, out2.last_hidden_state.reshape(-1, d)))


def full_masks_supported(decoder: torch.nn.Module) -> str | None:
    """Why :func:`two_pass` cannot build full masks for ``decoder`` (None when it can)."""
    impl = getattr(getattr(decoder, "config", None), "_attn_implementation", None)
    if impl in ("sdpa", "eager"):
        return None
    return f"its attention implementation is {impl!r}, not 'sdpa' or 'eager'"


def _causal(n: int, device: torch.device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def _full_mask(decoder: torch.nn.Module, allowed: torch.Tensor) -> torch.Tensor:
    impl = getattr(decoder.config, "_attn_implementation", None)
    if impl == "sdpa":
        return allowed
    if impl == "eager":
        dtype = next(decoder.parameters()).dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)
    raise ValueError(f"shared prefix: {full_masks_supported(decoder)}")


def _expanded_cache(cache: object, rows: torch.Tensor, decoder: torch.nn.Module) -> object:
    """A new cache holding, for each response row, its prompt's keys and values."""
    from transformers import DynamicCache

    layers = getattr(cache, "layers", None)
    if layers is None:
        raise RuntimeError(
            f"shared prefix: the decoder returned {type(cache).__name__} without per-layer "
            "keys and values (transformers >= 5 caches have .layers); set "
            "train.shared_prefix = false")
    out = DynamicCache(config=cast(Any, decoder.config))
    for i, layer in enumerate(layers):
        out.update(layer.keys.index_select(0, rows), layer.values.index_select(0, rows), i)
    return out
