"""The batched decoding loop of the ``local`` engine.

One prefill of the left-padded prompts (attention mask and position ids follow the padding;
only the last position's logits are computed), then one forward pass per new token through a
``DynamicCache``. Everything per step stays in tensors; the host learns only whether every
row is done (one boolean a step). Rows that are done are dropped from the batch (cache
included) once they are at least half of it, so a batch whose answers are short stops paying
for its longest member.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from slime_core.engine.sampler import GroupSampler
from slime_core.engine.stopping import StopStrings

RUNNING, STOP, LENGTH, ABORT = 0, 1, 2, 3
REASONS = {STOP: "stop", LENGTH: "length", ABORT: "abort"}


@dataclass
class Request:
    """One prompt with everything the loop needs to finish it."""

    prompt: list[int]
    max_new_tokens: int
    stop_token_ids: list[int]
    sampler: GroupSampler
    stop_strings: StopStrings | None = None


@dataclass
class Result:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str


def _forward(model: Any, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor,
             cache: Any) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :]


def decode(
    model: Any,
    requests: list[Request],
    pad_id: int,
    aborted: Callable[[], bool],
    make_cache: Callable[[], Any],
) -> list[Result]:
    """Generate for every request; one :class:`Result` each, in order."""
    device = next(model.parameters()).device
    n = len(requests)
    lens = [len(r.prompt) for r in requests]
    width = max(lens)
    max_new = max(r.max_new_tokens for r in requests)
    padded = any(length != width for length in lens)

    ids = torch.tensor([[pad_id] * (width - len(r.prompt)) + r.prompt for r in requests],
                       dtype=torch.long, device=device)
    lens_t = torch.tensor(lens, dtype=torch.long, device=device)
    # Mask over prompt + every new token; column views of it grow by one per step.
    full_mask = torch.ones((n, width + max_new), dtype=torch.long, device=device)
    full_mask[:, :width] = torch.arange(width, device=device) >= (width - lens_t).unsqueeze(1)
    pos = (full_mask[:, :width].cumsum(-1) - 1).clamp_(min=0)

    limit = torch.tensor([r.max_new_tokens for r in requests], dtype=torch.long, device=device)
    n_stop = max((len(r.stop_token_ids) for r in requests), default=0)
    stop_ids = torch.tensor([r.stop_token_ids + [-1] * (n_stop - len(r.stop_token_ids))
                             for r in requests], dtype=torch.long, device=device)
    # Rows grouped by sampler; a group is a tensor of positions in the live batch.
    samplers: list[GroupSampler] = []
    group_of: list[int] = []
    for r in requests:
        if not any(s is r.sampler for s in samplers):
            samplers.append(r.sampler)
        group_of.append(next(i for i, s in enumerate(samplers) if s is r.sampler))
    group_t = torch.tensor(group_of, dtype=torch.long, device=device)
    string_rows = [i for i, r in enumerate(requests) if r.stop_strings is not None]

    out_tokens = torch.zeros((n, max_new), dtype=torch.long, device=device)
    out_lp = torch.zeros((n, max_new), dtype=torch.float32, device=device)
    status = torch.zeros(n, dtype=torch.long, device=device)  # RUNNING / STOP / LENGTH / ABORT
    count = torch.zeros(n, dtype=torch.long, device=device)  # tokens kept per row

    live = torch.arange(n, device=device)  # original row of each live batch position
    live_rows: list[int] = list(range(n))
    groups = _groups(group_t, samplers)
    cache = make_cache()
    mask = full_mask[:, :width] if padded else None
    logits = _forward(model, ids, mask, pos, cache)
    pos = lens_t.unsqueeze(1)  # next position of each row (padding does not count)
    live_count = n

    for step in range(max_new):
        if len(groups) == 1:
            tokens, lp = groups[0][1](logits)
        else:
            tokens = torch.empty(logits.shape[0], dtype=torch.long, device=device)
            lp = torch.empty(logits.shape[0], dtype=torch.float32, device=device)
            for idx, sampler in groups:
                t, l = sampler(logits.index_select(0, idx))
                tokens[idx], lp[idx] = t, l
        running = status[live] == RUNNING
        out_tokens[live, step] = tokens
        out_lp[live, step] = lp
        count[live] += running.long()
        hit = (tokens.unsqueeze(1) == stop_ids[live]).any(1) if n_stop else torch.zeros_like(running)
        if string_rows:
            hit = hit | _string_hits(requests, live_rows, tokens, running, device)
        new_status = torch.where(hit, STOP, torch.where(step + 1 >= limit[live], LENGTH, RUNNING))
        status[live] = torch.where(running, new_status, status[live])
        still = status[live] == RUNNING
        remaining = int(still.sum())  # the step's only host sync
        if remaining == 0:
            break
        if aborted():
            status[live] = torch.where(still, ABORT, status[live])
            break
        next_ids = tokens.unsqueeze(1)
        if remaining * 2 <= live_count and live_count > 1:  # compact: drop finished rows
            keep = still.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            live, next_ids, pos = live[keep], next_ids[keep], pos[keep]
            full_mask = full_mask[keep]
            live_rows = live.tolist()
            live_count = remaining
            groups = _groups(group_t[live], samplers)
        mask = full_mask[:, : width + step + 1] if padded else None
        logits = _forward(model, next_ids, mask, pos, cache)
        pos = pos + 1

    del cache
    counts = count.tolist()
    codes = status.tolist()
    toks = out_tokens.tolist()
    lps = out_lp.tolist()
    return [Result(toks[i][: counts[i]], lps[i][: counts[i]], REASONS.get(codes[i], "abort"))
            for i in range(n)]


def _groups(group_t: torch.Tensor, samplers: list[GroupSampler]) -> list[tuple[torch.Tensor, GroupSampler]]:
    if len(samplers) == 1:
        return [(torch.arange(group_t.numel(), device=group_t.device), samplers[0])]
    out = []
    for g, sampler in enumerate(samplers):
        idx = (group_t == g).nonzero().squeeze(1)
        if idx.numel():
            out.append((idx, sampler))
    return out


def _string_hits(requests: list[Request], live_rows: list[int], tokens: torch.Tensor,
                 running: torch.Tensor, device: torch.device) -> torch.Tensor:
    toks = tokens.tolist()
    run = running.tolist()
    hits = [False] * len(live_rows)
    for pos, row in enumerate(live_rows):
        checker = requests[row].stop_strings
        if checker is not None and run[pos]:
            hits[pos] = checker.push(toks[pos])
    return torch.tensor(hits, dtype=torch.bool, device=device)
