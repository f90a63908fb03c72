"""The batched decoding loop of the ``local`` engine.

One prefill of the left-padded prompts (attention mask and position ids follow the padding;
only the last position's logits are computed), then one forward pass per new token through a
``DynamicCache`` whose layers write into one preallocated buffer each
(:mod:`slime_std.engine.kv_cache`). Everything per step stays in tensors; the host learns
only whether any row is still running (one boolean a step; every 8 steps for a fixed batch).
Rows that are done are dropped from the batch (cache included) once they are at least half of
it, so a batch whose answers are short stops paying for its longest member.

Decode steps of a padded batch pass a ready 4-D boolean mask (a view that grows by one column
a step) where the model uses SDPA over full attention only, instead of having transformers
rebuild the mask from the 2-D one every step.

With ``static`` decoders (``rollout.cuda_graphs`` on a CUDA device, same SDPA-only condition)
the prefill and steps go through :mod:`slime_std.engine.static_decode` instead: a static KV
cache and one replayed CUDA graph per step; rows are then never dropped. Otherwise, with a
``fused`` decoder (Llama-family models, ``rollout.fused_decoder``), the prefill and steps run
through :mod:`slime_std.engine.fused_decoder` and its own KV buffers instead of the model's
forward; rows are dropped the same way.

With a ``clock`` (``profile.rollout``, :mod:`slime_std.engine.profile`) the call is cut into
phases: ``kv_alloc``, ``prefill``, and per new token a ``decode_step`` of ``sample``, ``host``
(and ``drop_rows``) and ``decode``; every cut synchronises the device.

With ``routing`` (a :class:`~slime_core.api.RoutingControl` recording, for a
mixture-of-experts model under ``train.routing_replay = "rollout"``), every forward's expert
ids are kept and each :class:`Result` carries those of its prompt and generated tokens but the
last (``[len(prompt) + len(token_ids) - 1, layers, top_k]``, :mod:`slime_hookspecs.routing`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from slime_core.api import RoutingControl, causal_sdpa_applies

from slime_std.engine.fused_decoder import FusedDecoder
from slime_std.engine.kv_cache import buffer_layers
from slime_std.engine.profile import PhaseClock
from slime_std.engine.sampler import GroupSampler
from slime_std.engine.static_decode import StaticDecoders
from slime_std.engine.stopping import StopStrings

RUNNING, STOP, LENGTH, ABORT = 0, 1, 2, 3
SYNC_EVERY = 8  # decode steps between "is any row still running?" checks of a fixed batch
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
    routes: torch.Tensor | None = None  # with routing: [positions, MoE layers, top_k]


def _forward(model: Any, ids: torch.Tensor, mask: torch.Tensor | None, pos: torch.Tensor,
             cache: Any) -> torch.Tensor:
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    return out.logits[:, -1, :]


class _Batch:
    """Per-row state of the rows still in the batch (``rows``: their request indices)."""

    def __init__(self, requests: list[Request], device: torch.device, max_new: int) -> None:
        self.rows = list(range(len(requests)))
        self.device = device

        def col(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=device)

        self.limit = col([r.max_new_tokens for r in requests])
        n_stop = max((len(r.stop_token_ids) for r in requests), default=0)
        self.stop_ids = torch.tensor(
            [r.stop_token_ids + [-1] * (n_stop - len(r.stop_token_ids)) for r in requests],
            dtype=torch.long, device=device,
        ) if n_stop else None
        self.status = torch.zeros(len(requests), dtype=torch.long, device=device)
        self.count = torch.zeros(len(requests), dtype=torch.long, device=device)
        self.tokens = torch.zeros((len(requests), max_new), dtype=torch.long, device=device)
        self.log_probs = torch.zeros((len(requests), max_new), dtype=torch.float32, device=device)
        self.samplers: list[GroupSampler] = []
        group_of = []
        for r in requests:
            if not any(s is r.sampler for s in self.samplers):
                self.samplers.append(r.sampler)
            group_of.append(next(i for i, s in enumerate(self.samplers) if s is r.sampler))
        self.group_of = col(group_of)
        self.groups = self._groups()

    def _groups(self) -> list[tuple[torch.Tensor | None, GroupSampler]]:
        if len(self.samplers) == 1:
            return [(None, self.samplers[0])]
        out: list[tuple[torch.Tensor | None, GroupSampler]] = []
        for g, sampler in enumerate(self.samplers):
            idx = (self.group_of == g).nonzero().squeeze(1)
            if idx.numel():
                out.append((idx, sampler))
        return out

    def sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if len(self.groups) == 1:
            return self.groups[0][1](logits)
        tokens = torch.empty(logits.shape[0], dtype=torch.long, device=self.device)
        lp = torch.empty(logits.shape[0], dtype=torch.float32, device=self.device)
        for idx, sampler in self.groups:
            tok_g, lp_g = sampler(logits.index_select(0, cast(torch.Tensor, idx)))
            tokens[idx], lp[idx] = tok_g, lp_g
        return tokens, lp

    def keep(self, idx: torch.Tensor, results: dict[int, Result]) -> None:
        """Finalise the rows not in ``idx`` and drop them."""
        kept = set(idx.tolist())
        self._finalise([i for i in range(len(self.rows)) if i not in kept], results)
        self.rows = [self.rows[i] for i in sorted(kept)]
        for name in ("limit", "stop_ids", "status", "count", "tokens", "log_probs", "group_of"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.index_select(0, idx))
        self.groups = self._groups()

    def _finalise(self, positions: list[int], results: dict[int, Result]) -> None:
        if not positions:
            return
        sel = torch.tensor(positions, dtype=torch.long, device=self.device)
        counts = self.count.index_select(0, sel).tolist()
        codes = self.status.index_select(0, sel).tolist()
        toks = self.tokens.index_select(0, sel).tolist()
        lps = self.log_probs.index_select(0, sel).tolist()
        for j, pos in enumerate(positions):
            n = counts[j]
            results[self.rows[pos]] = Result(toks[j][:n], lps[j][:n], REASONS.get(codes[j], "abort"))

    def finalise_all(self, results: dict[int, Result]) -> None:
        self._finalise(list(range(len(self.rows))), results)


def decode(
    model: Any,
    requests: list[Request],
    pad_id: int,
    aborted: Callable[[], bool],
    make_cache: Callable[[], Any],
    static: StaticDecoders | None = None,
    fused: FusedDecoder | None = None,
    routing: RoutingControl | None = None,
    clock: PhaseClock | None = None,
    common_prefix: bool = False,
) -> list[Result]:
    """Generate for every request; one :class:`Result` each, in order. ``routing`` (recording,
    transformers forward only: no ``static`` or ``fused`` path) fills ``Result.routes``;
    ``clock`` (profiling) records the phases; ``common_prefix`` (with ``fused``): the
    prompts' common first tokens computed once, where that saves enough
    (:func:`common_prefix_length`)."""
    param = next(model.parameters())
    device = param.device
    n = len(requests)
    lens = [len(r.prompt) for r in requests]
    width = max(lens)
    max_new = max(r.max_new_tokens for r in requests)
    padded = any(length != width for length in lens)
    # with a common prefix of P tokens, each row is its prefix, its padding, then the rest of
    # its prompt, so that the prefix fills the same columns [0, P) of every row
    prefix = common_prefix_length(requests) if common_prefix and fused is not None else 0

    ids = torch.tensor([r.prompt[:prefix] + [pad_id] * (width - len(r.prompt)) + r.prompt[prefix:]
                        for r in requests], dtype=torch.long, device=device)
    lens_t = torch.tensor(lens, dtype=torch.long, device=device)
    # Mask over prompt + every new token; decode steps use growing column views of it.
    full_mask = torch.ones((n, width + max_new), dtype=torch.long, device=device)
    column = torch.arange(width, device=device)
    full_mask[:, :width] = (column < prefix) | (column >= prefix + (width - lens_t).unsqueeze(1))
    pos = (full_mask[:, :width].cumsum(-1) - 1).clamp_(min=0)
    # a purely causal SDPA model: a prebuilt boolean mask may replace its own
    causal = causal_sdpa_applies(model.config)
    prebuilt = padded and causal
    step_mask = full_mask.bool()[:, None, None, :] if prebuilt else full_mask

    batch = _Batch(requests, device, max_new)
    string_rows = any(r.stop_strings is not None for r in requests)
    results: dict[int, Result] = {}
    routes = _RouteLog(routing, lens, width) if routing is not None else None
    if routes is not None and (static is not None or fused is not None):
        raise ValueError("decode: routing is recorded through the transformers forward only")
    fixed = None
    # each distinct prompt computed once (a group's samples share it), fused or static
    distinct, rows = ((shared_prompts(requests, device) or (None, None))
                      if static is not None or fused is not None else (None, None))
    if clock is not None:
        clock.cut("host")
    if static is not None and causal:
        fixed = static.get(model, n, width, max_new, fused)
        cache = None
        if clock is not None:
            clock.cut("kv_alloc")
        logits = fixed.prefill(ids, full_mask[:, :width], pos, distinct, rows, prefix)
    elif fused is not None:
        cache = None
        fused.start(n, width + max_new, device, param.dtype, full_mask.bool() if padded else None)
        if clock is not None:
            clock.cut("kv_alloc")
        logits = fused.prefill(ids, pos, distinct, rows, prefix)
    else:
        cache = make_cache()
        buffer_layers(cache, width + max_new)  # no per-step torch.cat of the whole cache
        if clock is not None:
            clock.cut("kv_alloc")
        logits = _forward(model, ids, full_mask[:, :width] if padded else None, pos, cache)
    if routes is not None:
        routes.prefill()
    if clock is not None:
        clock.prefill([r.prompt for r in requests], width, prefix)
    pos = lens_t.unsqueeze(1)  # next position of each row (padding does not count)

    for step in range(max_new):
        if clock is not None:
            clock.begin_step(step, len(batch.rows))
        tokens, lp = batch.sample(logits)
        if clock is not None:
            clock.sample(len(batch.rows))
        running = batch.status == RUNNING
        batch.tokens[:, step] = tokens
        batch.log_probs[:, step] = lp
        batch.count += running
        done = step + 1 >= batch.limit
        if batch.stop_ids is not None:
            hit = (tokens.unsqueeze(1) == batch.stop_ids).any(1)
        else:
            hit = torch.zeros_like(running)
        if string_rows:
            hit |= _string_hits(requests, batch.rows, tokens, running, device)
        finished = running & (hit | done)
        batch.status = torch.where(finished, torch.where(hit, STOP, LENGTH), batch.status)
        still = running & ~finished
        # The step's only host sync. A fixed batch keeps computing finished rows anyway, so it
        # asks only every SYNC_EVERY steps and lets the device run ahead in between (a sync
        # per step left the GPU idle while the host queued the next step).
        if step == max_new - 1:
            break  # every row is at its limit: no forward for a token nobody samples
        if fixed is None or string_rows or step % SYNC_EVERY == SYNC_EVERY - 1:
            remaining = int(still.sum())
            if remaining == 0:
                break
        if aborted():
            batch.status = torch.where(still, ABORT, batch.status)
            break
        next_ids = tokens.unsqueeze(1)
        if fixed is not None:  # a fixed batch: finished rows go on, their extra tokens unused
            if clock is not None:
                clock.cut("host")
            logits = fixed.step(next_ids, pos, width + step)
            if clock is not None:
                clock.decode(len(batch.rows), width + step + 1)
            pos = pos + 1
            continue
        if clock is not None:
            clock.cut("host")
        if remaining * 2 <= len(batch.rows) and len(batch.rows) > 1:  # drop finished rows
            keep = still.nonzero().squeeze(1)
            batch.keep(keep, results)
            if fused is not None:
                fused.select(keep)
            else:
                cast(Any, cache).batch_select_indices(keep)
            next_ids, pos, step_mask = next_ids[keep], pos[keep], step_mask[keep]
            if clock is not None:
                clock.cut("drop_rows")
        if fused is not None:
            logits = fused.step(next_ids, pos)
        else:
            mask = step_mask[..., : width + step + 1] if padded else None
            logits = _forward(model, next_ids, mask, pos, cache)
            if routes is not None:
                routes.step(batch.rows)
        if clock is not None:
            clock.decode(len(batch.rows), width + step + 1)
        pos = pos + 1

    if clock is not None:
        clock.cut("host")  # the last step's checks (a step that breaks has no forward)
        clock.end_step()
    del cache
    if fused is not None:
        fused.release()
    batch.finalise_all(results)
    if routes is not None:
        for i, res in results.items():
            res.routes = routes.of(i, len(res.token_ids))
    return [results[i] for i in range(n)]


class _RouteLog:
    """The expert ids of a decode call's forwards, kept on the device until a row's are read."""

    def __init__(self, control: RoutingControl, lens: list[int], width: int) -> None:
        self.control, self.lens, self.width = control, lens, width
        self.dtype = control.shape.dtype
        self.prompt: torch.Tensor | None = None  # [n, width, layers, top_k]
        self.steps: list[tuple[dict[int, int], torch.Tensor]] = []  # (row -> slot, ids)

    def prefill(self) -> None:
        ids = self.control.take().to(self.dtype)
        self.prompt = ids.view(len(self.lens), self.width, *ids.shape[1:])

    def step(self, rows: list[int]) -> None:
        """After a decode step's forward over the batch rows ``rows`` (request indices)."""
        self.steps.append(({r: j for j, r in enumerate(rows)}, self.control.take().to(self.dtype)))

    def of(self, row: int, generated: int) -> torch.Tensor:
        """Request ``row``'s ids: its prompt's, then the first ``generated - 1`` steps' (the
        tokens it fed; a finished row still in the batch feeds unused tokens after them)."""
        assert self.prompt is not None
        parts = [self.prompt[row, self.width - self.lens[row]:]]
        for slots, ids in self.steps[:max(generated - 1, 0)]:
            parts.append(ids[slots[row]:slots[row] + 1])
        return torch.cat(parts).cpu()


MIN_PREFIX_SAVING = 256  # prompt tokens a common prefix must save before it is computed apart


def common_prefix_length(requests: list[Request]) -> int:
    """The number of first tokens every request's prompt shares, where computing them once
    saves at least ``MIN_PREFIX_SAVING`` tokens of the prefill (the distinct prompts less
    one, times the prefix); else 0. Each prompt keeps at least one token after it (the last
    position's logits come from the rest). The pass of its own costs a read of the weights,
    which a few distinct prompts would not repay: the SmolLM2 example's chat template makes 27
    of its ~39-token prompts common, so 256 held-out prompts save ~6,900 tokens, a group of 4
    prompts 81."""
    if not requests:
        return 0
    first = requests[0].prompt
    length = min(len(r.prompt) for r in requests) - 1
    for r in requests[1:]:
        p = r.prompt
        i = 0
        while i < length and p[i] == first[i]:
            i += 1
        length = i
        if length == 0:
            return 0
    distinct = len({tuple(r.prompt) for r in requests})
    return length if (distinct - 1) * length >= MIN_PREFIX_SAVING else 0


def shared_prompts(requests: list[Request],
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(distinct, rows)`` when some requests share a prompt (a group's samples do):
    ``distinct`` [U] holds one batch row per distinct prompt and batch row i holds the prompt
    of ``distinct[rows[i]]``; None when every prompt is distinct."""
    first: dict[tuple[int, ...], int] = {}
    of_row = [first.setdefault(tuple(r.prompt), i) for i, r in enumerate(requests)]
    if len(first) == len(requests):
        return None
    distinct = sorted(first.values())
    slot = {row: j for j, row in enumerate(distinct)}
    return (torch.tensor(distinct, dtype=torch.long, device=device),
            torch.tensor([slot[r] for r in of_row], dtype=torch.long, device=device))


def _string_hits(requests: list[Request], rows: list[int], tokens: torch.Tensor,
                 running: torch.Tensor, device: torch.device) -> torch.Tensor:
    toks = tokens.tolist()
    run = running.tolist()
    hits = [False] * len(rows)
    for pos, row in enumerate(rows):
        checker = requests[row].stop_strings
        if checker is not None and run[pos]:
            hits[pos] = checker.push(toks[pos])
    return torch.tensor(hits, dtype=torch.bool, device=device)
