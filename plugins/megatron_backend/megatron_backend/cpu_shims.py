"""The CUDA assumptions of megatron-core replaced for CPU runs (gloo, no GPU).

megatron-core's layers allocate on ``torch.cuda.current_device()`` and its tensor-parallel RNG
(``megatron.core.tensor_parallel.random``: the RNG-state tracker that dropout forks, and the
state save/restore of activation recomputation) reads and writes CUDA generators. On a CPU-only
torch both raise. :func:`apply` replaces exactly these, process-wide, and only the trainer
calls it, only when its accelerator is the CPU:

* ``torch.cuda.current_device`` returns ``torch.device("cpu")``, so every ``device=`` megatron
  passes names the CPU;
* the RNG tracker keeps CPU generator states (same names and seeds as Megatron's:
  ``model-parallel-rng`` = seed + 2718 + tp_rank, ``data-parallel-rng`` = seed), and the
  module's CUDA-state getter/setter read and write the CPU generator;
* the ``alltoall`` token dispatcher (expert parallelism): ``MoEAlltoAllTokenDispatcher``
  creates a ``torch.cuda.Stream()`` in its constructor (a class attribute, made once) and its
  ``_maybe_dtoh_and_synchronize`` copies the all-to-all split sizes device-to-host on that side
  stream (``torch.cuda.current_stream``, ``wait_stream``, ``torch.cuda.stream``,
  ``record_event``, ``Event.synchronize``). The stream is preset to a placeholder, so the
  constructor makes none, and the method is replaced by its synchronous equivalent on the
  host: at the same point, the same tensors become host tensors (the split sizes NumPy arrays,
  as megatron's ``maybe_move_tensor_to_cpu(as_numpy=True)`` makes them for
  ``all_to_all_single``); there is nothing to wait for.

Everything else (layers, attention, the dispatchers' all-gather, reduce-scatter and
all-to-all over gloo) is megatron-core unchanged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

MODEL_PARALLEL_RNG = "model-parallel-rng"
DATA_PARALLEL_RNG = "data-parallel-rng"
EXPERT_PARALLEL_RNG = "expert-parallel-rng"

_APPLIED = False


class CpuRNGStatesTracker:
    """Megatron's ``CudaRNGStatesTracker`` interface over CPU generator states."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.states_: dict[str, torch.Tensor] = {}
        self.seeds_: set[int] = set()

    def is_initialized(self) -> bool:
        return bool(self.states_)

    def get_states(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.states_.items()}

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self.states_ = {k: v.clone() for k, v in states.items()}

    def add(self, name: str, seed: int) -> None:
        if seed in self.seeds_:
            raise ValueError(f"rng seed {seed} already exists")
        if name in self.states_:
            raise ValueError(f"rng state {name} already exists")
        self.seeds_.add(seed)
        gen = torch.Generator()
        gen.manual_seed(seed)
        self.states_[name] = gen.get_state()

    @contextlib.contextmanager
    def fork(self, name: str = MODEL_PARALLEL_RNG) -> Iterator[None]:
        """Run the block on the tracked CPU stream ``name``, then restore the default stream."""
        if name not in self.states_:
            raise KeyError(f"rng state {name} is not added")
        outer = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)


def _get_state(*_: Any, **__: Any) -> torch.Tensor:
    return torch.get_rng_state()


def _set_state(state: Any, *_: Any, **__: Any) -> None:
    torch.set_rng_state(state)


def _host(t: Any, as_numpy: bool = False) -> Any:
    if not torch.is_tensor(t):
        return t
    t = t.cpu()
    return t.numpy() if as_numpy else t


def _host_metadata(self: Any, point: str, tokens_per_expert: Any = None) -> Any:
    """``MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize`` without CUDA streams: at
    ``cuda_dtoh_point`` the dispatcher's counts become host values, as megatron's copies make
    them (split sizes as NumPy arrays); the sync point has nothing left to wait for."""
    if not self.drop_and_pad and point == self.cuda_dtoh_point:
        tokens_per_expert = _host(tokens_per_expert)
        self.input_splits = _host(self.input_splits, as_numpy=True)
        self.output_splits = _host(self.output_splits, as_numpy=True)
        self.output_splits_tp = _host(self.output_splits_tp, as_numpy=True)
        self.num_out_tokens = _host(self.num_out_tokens)
        if self.num_local_experts > 1 and not self.config.moe_permute_fusion:
            self.num_global_tokens_per_local_expert = _host(
                self.num_global_tokens_per_local_expert)
    return tokens_per_expert


def applied() -> bool:
    return _APPLIED


def apply() -> None:
    """Install the replacements (idempotent). Call only in a process whose accelerator is the CPU."""
    global _APPLIED
    if _APPLIED:
        return
    from megatron.core.tensor_parallel import random as mrandom

    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment, return-value]  # a CPU stand-in: megatron only passes it back to torch
    mrandom._CUDA_RNG_STATE_TRACKER = CpuRNGStatesTracker()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    mrandom._get_cuda_rng_state = _get_state
    mrandom._set_cuda_rng_state = _set_state
    from megatron.core.transformer.moe import token_dispatcher

    alltoall = token_dispatcher.MoEAlltoAllTokenDispatcher
    alltoall.cuda_dtoh_stream = "no CUDA stream on the CPU"  # type: ignore[assignment]  # preset: the constructor makes none
    alltoall._maybe_dtoh_and_synchronize = _host_metadata  # type: ignore[method-assign]
    _APPLIED = True


def seed(seed_: int, tp_rank: int, ep_rank: int = 0) -> None:
    """Megatron's ``model_parallel_cuda_manual_seed`` on the CPU tracker (same seed offsets)."""
    from megatron.core.tensor_parallel import random as mrandom

    tracker = mrandom._CUDA_RNG_STATE_TRACKER
    tracker.reset()
    tracker.add(DATA_PARALLEL_RNG, seed_)
    tracker.add(MODEL_PARALLEL_RNG, seed_ + 2718 + tp_rank)
    tracker.add(EXPERT_PARALLEL_RNG, seed_ + 1024 + 100 * ep_rank)
