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

from typing import Any, cast

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


def shared_prefix_hidden(
    decoder: torch.nn.Module,
    tokens: list[torch.Tensor],
    response_lengths: list[int],
    groups: list[int],
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states ``[R, d]`` that predict every response token, sample after sample, and
    those tokens ``[R]`` (R = total response tokens). ``decoder`` is the causal LM's
    ``.model``; ``groups`` comes from :func:`prompt_groups`."""
    device = next(decoder.parameters()).device
    resp = [int(r) for r in response_lengths]
    plen = [int(t.numel()) - r for t, r in zip(tokens, resp, strict=True)]
    n_groups = max(groups) + 1
    first = [groups.index(g) for g in range(n_groups)]  # a sample holding each prompt
    width = max(plen[i] for i in first)
    arrays = host_tokens(tokens)
    host_ids1 = np.full((n_groups, width), pad_id, dtype=np.int64)
    host_mask1 = np.zeros((n_groups, width), dtype=np.int64)
    for g, i in enumerate(first):
        host_ids1[g, : plen[i]] = arrays[i][: plen[i]]
        host_mask1[g, : plen[i]] = 1
    ids1 = torch.from_numpy(host_ids1).to(device)
    mask1 = torch.from_numpy(host_mask1).to(device)
    out1 = decoder(input_ids=ids1, attention_mask=mask1, use_cache=True)
    h1 = out1.last_hidden_state
    d = h1.shape[-1]
    # flat position of the hidden state that predicts each response token
    index = [[g * width + plen[i] - 1] if resp[i] else [] for i, g in enumerate(groups)]
    rest = max(resp) - 1  # the last response token predicts nothing
    flat = h1.reshape(-1, d)
    if rest > 0:
        host_ids2 = np.full((len(tokens), rest), pad_id, dtype=np.int64)
        host_mask2 = np.zeros((len(tokens), rest), dtype=np.int64)
        for i, t in enumerate(arrays):
            k = resp[i] - 1
            if k > 0:
                host_ids2[i, :k] = t[plen[i]: plen[i] + k]
                host_mask2[i, :k] = 1
            index[i] += range(n_groups * width + i * rest, n_groups * width + i * rest + k)
        ids2, mask2 = torch.from_numpy(host_ids2), torch.from_numpy(host_mask2)
        pos2 = torch.tensor(plen, dtype=torch.long).unsqueeze(1) + torch.arange(rest)
        rows = torch.tensor(groups, dtype=torch.long, device=device)
        cache = _expanded_cache(out1.past_key_values, rows, decoder)
        out2 = decoder(input_ids=ids2.to(device),
                       attention_mask=torch.cat((mask1.index_select(0, rows), mask2.to(device)), 1),
                       position_ids=pos2.to(device), past_key_values=cache, use_cache=True)
        flat = torch.cat((flat, out2.last_hidden_state.reshape(-1, d)))
    where = torch.tensor([p for row in index for p in row], dtype=torch.long, device=device)
    target = torch.from_numpy(np.concatenate(
        [t[plen[i]: plen[i] + resp[i]] for i, t in enumerate(arrays)]).astype(np.int64)).to(device)
    return flat.index_select(0, where), target


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
