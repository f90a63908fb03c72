"""The data buffer shared by every built-in source: epochs, seeded shuffle, return buffer, resume.

A source holds ``N`` prompts (rows). ``get_samples(k)`` hands out ``k`` groups:

1. first, groups returned with ``add_samples`` (the return buffer); which ones is decided by
   the buffer filter: the callable given to :meth:`PromptDataSource.set_buffer_filter` (the
   executors wire ``slime_buffer_filter`` and the record named by ``rollout.buffer_filter``
   there), else first-in first-out; a filter that answers ``None`` means first-in first-out. Buffered groups are handed out as they were
   returned (the rollout resets or keeps partial responses before returning them);
2. then fresh groups, one per row, in the order of the current epoch: rows ``0..N-1``
   permuted by ``random.Random(seed + epoch).shuffle`` (train split with ``data.shuffle``),
   in file order otherwise (the eval split never shuffles). After row ``N-1`` the next epoch
   starts with its own permutation.

``get_samples(-1)`` (any negative count, or ``None``) returns everything buffered plus every
row left in the current epoch, and moves to the next epoch: called on a fresh eval source it
returns every prompt exactly once, in file order.

A fresh group holds ``n`` samples (``rollout.n_samples_per_prompt``; for the eval split
``eval.n_samples_per_prompt``) sharing a new ``group_index``, each with a new ``index``; the
counters never repeat within a run, resume included.

With ``data.max_prompt_len`` set, the train split's rows are first cut to the prompts that
fit (:mod:`slime_core.data.length_filter`; on first use, which the built-in sources make at
construction); ``N`` and every row index above count the remaining rows only.

``state_dict()`` is JSON-ready (see :meth:`PromptDataSource.state_dict`); loading it into a
source built from the same data continues at exactly the next prompt.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from slime_core.data.prompts import PromptEncoder
from slime_hookspecs import Sample, Status

STATE_FORMAT = "slime.data_source/1"

BufferFilter = Callable[[Any, int, "list[list[Sample]]", int], "list[list[Sample]] | None"]


@dataclass
class PromptRow:
    """One prompt as read from the data, before templating and tokenization."""

    prompt: Any  # str or list of chat messages
    label: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tools: list[Any] | None = None


class PromptDataSource:
    """Base of the built-in data sources (see the module docstring).

    Subclasses implement :meth:`_num_rows` and :meth:`_row`; rows must be deterministic
    (row ``i`` is the same prompt in every process and after a restart).
    """

    kind = "prompts"

    def __init__(self, config: Any, split: str, *, tokenizer: Any = None) -> None:
        if split not in ("train", "eval"):
            raise ValueError(f"data source split must be 'train' or 'eval', got {split!r}")
        self.config = config
        self.split = split
        self.encoder = PromptEncoder(config, tokenizer)
        if split == "eval":
            self.n_samples_per_prompt = int(config.eval.n_samples_per_prompt)
        else:
            self.n_samples_per_prompt = int(config.rollout.n_samples_per_prompt)
        if self.n_samples_per_prompt < 1:
            key = "eval" if split == "eval" else "rollout"
            raise ValueError(f"{key}.n_samples_per_prompt must be >= 1")
        self.shuffle = bool(config.data.shuffle) and split == "train"
        self.seed = int(config.run.seed)
        self.epoch = 0
        self.position = 0  # rows of the current epoch already handed out
        self.next_group_index = 0
        self.next_sample_index = 0
        self.num_calls = 0  # get_samples calls (the rollout id given to buffer filters)
        self.buffer: list[list[Sample]] = []
        self._buffer_filter: BufferFilter | None = None
        self._order: tuple[int, list[int]] | None = None
        # data.max_prompt_len: the rows kept (None: every row, or not filtered yet)
        self._kept: list[int] | None = None
        self._length_checked = False
        self.dropped_long_prompts = 0

    # -- subclass interface ------------------------------------------------------------------
    def _num_rows(self) -> int:
        raise NotImplementedError

    def _row(self, i: int) -> PromptRow:
        raise NotImplementedError

    # -- prompt length filter (data.max_prompt_len) ----------------------------------------
    def apply_max_prompt_len(self) -> None:
        """Drop the prompts longer than ``data.max_prompt_len`` (train split) or
        ``eval.max_prompt_len`` (eval split) tokens after templating (once; see
        :mod:`slime_core.data.length_filter`), then refuse the prompts that fill the context
        (:meth:`check_context`). The built-in sources call it at the end of their constructor
        so both fail at start-up, before a model loads; a subclass that does not is filtered on
        first use."""
        if self._length_checked:
            return
        self._length_checked = True
        key, max_len = (("data.max_prompt_len", self.config.data.max_prompt_len)
                        if self.split == "train"
                        else ("eval.max_prompt_len", self.config.eval.max_prompt_len))
        lengths: dict[int, int] = {}  # each prompt is templated and tokenized once for both

        def length(i: int) -> int:
            if i not in lengths:
                lengths[i] = len(self._encode_row(self._row(i))[1])
            return lengths[i]

        if max_len > 0:
            from slime_core.data.length_filter import describe, rows_within

            n = self._num_rows()
            kept = rows_within(n, length, max_len, describe(self), key)
            self.dropped_long_prompts = n - len(kept)
            self._kept = kept if self.dropped_long_prompts else None
        self.check_context(max_len, length)

    def check_context(self, max_len: int = 0,
                      length: Callable[[int], int] | None = None) -> None:
        """Rows whose prompt has at least as many tokens (after templating) as the context
        (:func:`~slime_core.data.length_filter.context_limit`) are bad rows: one error naming
        them (``file:line``), or, with ``data.skip_bad_rows``, dropped with a warning. Skipped
        when the rows were already cut below the context (``max_len``), and for SFT (no
        response is generated). ``length(i)``: row ``i``'s prompt tokens (default: templated
        and tokenized here)."""
        from slime_core.data.length_filter import context_limit, describe
        from slime_core.data.rowcheck import BadRows

        limit = context_limit(self.config)
        if limit is None or self.config.train.loss == "sft":
            return
        tokens, what = limit
        if 0 < max_len < tokens:  # every kept prompt is already shorter than the context
            return
        rows = self._kept if self._kept is not None else list(range(self._num_rows()))
        key = "data.eval_path" if self.split == "eval" else "data.path"
        bad = BadRows(key, str(getattr(self, "path", None) or describe(self)))
        kept: list[int] = []
        for i in rows:
            n = length(i) if length is not None else len(self._encode_row(self._row(i))[1])
            if n >= tokens:
                bad.add(self._row_ref(i), f"prompt of {n} tokens after templating leaves no "
                                          f"room for a response within {what}")
            else:
                kept.append(i)
        if not bad:
            return
        if not self.config.data.skip_bad_rows:
            raise bad.error(len(rows))
        bad.warn(len(rows))
        if not kept:
            raise ValueError(f"{describe(self)}: every prompt fills the context ({what})")
        self._kept = kept

    def _row_ref(self, i: int) -> str:
        """How messages name row ``i`` (a file source: ``x.jsonl:3``)."""
        return f"row {i + 1}"

    def _size(self) -> int:
        """Rows after the length filter."""
        self.apply_max_prompt_len()
        return self._num_rows() if self._kept is None else len(self._kept)

    def _kept_row(self, i: int) -> PromptRow:
        """Row ``i`` of the rows after the length filter."""
        self.apply_max_prompt_len()
        return self._row(i if self._kept is None else self._kept[i])

    def _encode_row(self, row: PromptRow) -> tuple[Any, list[int]]:
        return self.encoder.encode(row.prompt, row.tools)

    # -- DataSource protocol -----------------------------------------------------------------
    def __len__(self) -> int:
        """Number of prompts per epoch."""
        return self._size()

    def get_samples(self, num_groups: int | None, rollout_id: int | None = None) -> list[list[Sample]]:
        """``num_groups`` groups, buffered ones first; negative or ``None``: all remaining.

        ``rollout_id`` is passed to the buffer filter (default: the number of earlier calls).
        """
        rid = self.num_calls if rollout_id is None else int(rollout_id)
        self.num_calls += 1
        wanted = -1 if num_groups is None else num_groups
        everything = wanted < 0
        out: list[list[Sample]] = []
        if self.buffer and (everything or wanted > 0):
            out.extend(self._take_buffered(len(self.buffer) if everything else wanted, rid))
        if everything:
            for _ in range(self._size() - self.position):
                out.append(self._fresh_group())
            return out
        while len(out) < wanted:
            out.append(self._fresh_group())
        return out

    def add_samples(self, groups: list[list[Sample]]) -> None:
        """Return groups (aborted or partial); they are handed out before fresh prompts."""
        for g in groups:
            group = list(g)
            if not group:
                continue
            for s in group:
                if not isinstance(s, Sample):
                    raise TypeError(
                        f"add_samples expects lists of Sample, got {type(s).__name__} in a group"
                    )
            self.buffer.append(group)

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state::

            {"format": "slime.data_source/1", "kind": ..., "split": ..., "num_prompts": N,
             "seed": ..., "shuffle": ..., "epoch": e, "position": p,
             "next_group_index": ..., "next_sample_index": ..., "num_calls": ...,
             "buffer": [[Sample.to_dict(), ...], ...]}

        ``position`` counts the rows of epoch ``e`` already handed out: the next fresh prompt
        is row ``permutation(seed + e)[p]``.
        """
        return {
            "format": STATE_FORMAT,
            "kind": self.kind,
            "split": self.split,
            "num_prompts": self._size(),
            "seed": self.seed,
            "shuffle": self.shuffle,
            "epoch": self.epoch,
            "position": self.position,
            "next_group_index": self.next_group_index,
            "next_sample_index": self.next_sample_index,
            "num_calls": self.num_calls,
            "buffer": [[s.to_dict() for s in g] for g in self.buffer],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` left off; the seed and shuffle flag come from ``state`` so
        the stored position means the same permutation. Different data fails."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"data source state has format {state.get('format')!r}, expected {STATE_FORMAT!r}"
            )
        if state.get("kind") != self.kind:
            raise ValueError(
                f"data source state was saved by a {state.get('kind')!r} source, this is "
                f"{self.kind!r} (data.source changed?)"
            )
        n = self._size()
        if int(state["num_prompts"]) != n:
            raise ValueError(
                f"data source state was saved with {state['num_prompts']} prompts, the data now "
                f"has {n}: the data (or data.max_prompt_len) changed since the checkpoint, so the "
                "position is meaningless"
            )
        self.seed = int(state["seed"])
        self.shuffle = bool(state["shuffle"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        if not 0 <= self.position <= n:
            raise ValueError(f"data source state position {self.position} outside 0..{n}")
        self.next_group_index = int(state["next_group_index"])
        self.next_sample_index = int(state["next_sample_index"])
        self.num_calls = int(state.get("num_calls", 0))
        self.buffer = [[Sample.from_dict(d) for d in g] for g in state.get("buffer", [])]
        self._order = None

    # -- buffer filter -----------------------------------------------------------------------
    def set_buffer_filter(self, fn: BufferFilter | None) -> None:
        """Use ``fn(config, rollout_id, buffer, num_groups)`` to pick buffered groups.

        ``fn`` removes the groups it returns from ``buffer`` (a list it may mutate) and returns
        at most ``num_groups`` of them, or ``None`` for first-in first-out; ``None`` as ``fn``
        restores first-in first-out.
        """
        self._buffer_filter = fn

    def _take_buffered(self, num_groups: int, rollout_id: int) -> list[list[Sample]]:
        want = min(num_groups, len(self.buffer))
        taken = None
        if self._buffer_filter is not None:
            taken = self._buffer_filter(self.config, rollout_id, self.buffer, want)
        if taken is None:  # first in, first out (the executors wire rollout.buffer_filter)
            taken = self.buffer[:want]
            del self.buffer[:want]
        taken = list(taken)
        if len(taken) > want:
            raise ValueError(
                f"buffer filter {getattr(self._buffer_filter, '__name__', self._buffer_filter)!r} returned {len(taken)} groups, "
                f"asked for at most {want}"
            )
        ids = {id(g) for g in taken}
        self.buffer[:] = [g for g in self.buffer if id(g) not in ids]
        return taken

    # -- fresh groups ------------------------------------------------------------------------
    def order(self, epoch: int) -> list[int]:
        """Row order of ``epoch``: ``random.Random(seed + epoch)`` permutation, or file order."""
        if self._order is not None and self._order[0] == epoch:
            return self._order[1]
        rows = list(range(self._size()))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(rows)
        self._order = (epoch, rows)
        return rows

    def _fresh_group(self) -> list[Sample]:
        n = self._size()
        if n == 0:
            raise ValueError(f"{self.kind} data source ({self.split}) has no prompts")
        if self.position >= n:
            self.epoch, self.position = self.epoch + 1, 0
        row_index = self.order(self.epoch)[self.position]
        self.position += 1
        if self.position >= n:
            self.epoch, self.position = self.epoch + 1, 0
        return self.make_group(self._kept_row(row_index))

    def make_group(self, row: PromptRow) -> list[Sample]:
        """``n_samples_per_prompt`` PENDING samples of ``row`` with a new group index."""
        prompt, ids = self._encode_row(row)
        group_index = self.next_group_index
        self.next_group_index += 1
        group = []
        for _ in range(self.n_samples_per_prompt):
            group.append(Sample(
                group_index=group_index,
                index=self.next_sample_index,
                prompt=copy.deepcopy(prompt),
                tokens=list(ids),
                response="",
                response_length=0,
                label=copy.deepcopy(row.label),
                loss_mask=[],
                rollout_log_probs=[],
                status=Status.PENDING,
                metadata=copy.deepcopy(row.metadata),
            ))
            self.next_sample_index += 1
        return group

    def set_tokenizer(self, tokenizer: Any) -> None:
        """Use an already loaded tokenizer instead of loading ``model.tokenizer``."""
        self.encoder.set_tokenizer(tokenizer)
