"""What the benchmarks add to a slime run, through slime's public hooks only.

* forced completion length: ``slime_generate`` wraps the built-in single-turn generate with
  ``SamplingParams.ignore_eos`` (EOS may be sampled but never ends a row), so every sample
  has exactly ``rollout.max_new_tokens`` tokens;
* the reward: the share of digit characters in the completion (cheap, the same in TRL), the
  record ``bench_digit_share`` that the plugin names in ``rollout.reward``;
* timing: a timestamp (wall and process CPU time) at the end of every weight sync (the initial one and the one that ends
  each step) and the wall time of each phase; with ``cuda=True`` the training's and the
  weight sync's timestamps are taken after their thread's stream synchronizes, so queued GPU
  work is counted in the phase that queued it, and the caching allocator's device
  allocations, frees and retries per phase are counted. The rollout's are not: its outputs
  reach the host before it ends, and under one-step-off it runs on a worker thread beside
  the training, where a device-wide synchronize (what every timestamp took until 2026-12-07)
  held each decode's start behind the training queued so far;
* the trained tokens per step (prompt + response of every sample), for FLOP counts.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from slime_hookspecs import hookimpl

REWARD = "bench_digit_share"


def drop_checkpoints(run_dir: Path) -> None:
    """Remove a finished bench run's checkpoints (its final save: SmolLM2's weights and AdamW
    state are 1.7 GB, the 1.5B anchor's with fp32 master weights ~21 GB). No bench reads them;
    kept, repeated runs filled this machine's disk and would fill a device's 64 GB in a call."""
    shutil.rmtree(Path(run_dir) / "checkpoints", ignore_errors=True)


def plugin_selection(extra: tuple[str, ...] = ()) -> Any:
    """``slime_grpo`` (and the ``extra`` plugins) by entry point when installed, else by module
    path ``<name>.plugin`` (a machine where the repository is only on ``PYTHONPATH``, e.g. the
    GPU host, which cannot pip-install). There, slime-std's default plugins (the local engine,
    the torch trainer, ...) are loaded by module path too, as its pyproject lists them."""
    from importlib.metadata import entry_points
    from pathlib import Path

    import tomllib
    from slime_core.pluginmgr import PluginSelection

    names = ("slime_grpo", *extra)
    installed = {ep.name for ep in entry_points(group="slime")}
    modules = [f"{n}.plugin" for n in names if n not in installed]
    if not list(entry_points(group="slime.defaults")):
        std = Path(__file__).resolve().parents[1] / "plugins" / "slime_std" / "pyproject.toml"
        meta = tomllib.loads(std.read_text(encoding="utf-8"))
        modules += list(meta["project"]["entry-points"]["slime.defaults"].values())
    return PluginSelection(plugins=[n for n in names if n in installed], modules=modules)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@functools.cache
def _mallinfo2() -> Any:
    """glibc's ``mallinfo2``, bound once, or None (not Linux, or not glibc >= 2.33)."""
    fn = getattr(ctypes.CDLL(None), "mallinfo2", None) if sys.platform.startswith("linux") else None
    if fn is not None:
        fn.restype = _MallInfo2
    return fn


def heap_mib() -> float | None:
    """glibc malloc's memory taken from the system (its heaps plus its own mappings), MiB, or
    None where the C library has no ``mallinfo2`` (not glibc >= 2.33): how far the host heap
    has grown, each new page of it a page fault."""
    fn = _mallinfo2()
    if fn is None:
        return None
    info = fn()
    return (info.arena + info.hblkhd) / 2**20


def digit_share(text: str) -> float:
    """The reward of every framework benchmarked: share of digit characters in the text."""
    return sum(c.isdigit() for c in text) / max(1, len(text))


def report(row: dict[str, Any], out: Path | None) -> None:
    """Print ``row`` as one JSON line, and append it to ``out`` when given."""
    import json

    line = json.dumps(row)
    print(line)
    if out is not None:
        with out.open("a") as f:
            f.write(line + "\n")


def prompt_texts(n: int = 512) -> list[str]:
    return [f"Question {i}: what is {i % 97} plus {(i * 7) % 13}? Answer:" for i in range(n)]


class BenchPlugin:
    def __init__(self, cuda: bool = False) -> None:
        self.cuda = cuda
        self.sync_ends: list[float] = []
        self.cpu_ends: list[float] = []  # process CPU time (all threads) at the same moments
        self.phases: dict[str, list[float]] = {"rollout": [], "train": [], "weight_sync": []}
        self.train_tokens: list[int] = []
        self.response_tokens: list[int] = []
        self.phase_cpu: dict[str, list[float]] = {k: [] for k in self.phases}
        self._t0: dict[str, float] = {}
        self._c0: dict[str, float] = {}
        # seconds the cyclic garbage collector ran inside each phase (and its full
        # collections): a pause there looks like a slow step
        self.phase_gc: dict[str, list[float]] = {k: [] for k in self.phases}
        self.phase_gc2: dict[str, list[int]] = {k: [] for k in self.phases}
        self._gc_total = 0.0
        self._gc_full = 0
        self._gc_start = 0.0
        self._g0: dict[str, tuple[float, int]] = {}
        gc.callbacks.append(self._on_gc)
        # with cuda: the caching allocator's device allocations, frees and retries (a free
        # synchronizes the device) inside each phase, and the reserved bytes at its end
        self.phase_cuda_alloc: dict[str, list[dict[str, int]]] = {k: [] for k in self.phases}
        self._a0: dict[str, dict[str, int]] = {}
        # the kernel's side of each phase (the whole process): system CPU seconds and minor
        # page faults, i.e. memory the allocator handed back to the OS and touched again
        self.phase_sys: dict[str, list[float]] = {k: [] for k in self.phases}
        self.phase_faults: dict[str, list[int]] = {k: [] for k in self.phases}
        self.phase_heap: dict[str, list[float]] = {k: [] for k in self.phases}
        self._r0: dict[str, tuple[float, int]] = {}

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        self._gc_total += time.perf_counter() - self._gc_start
        self._gc_full += info["generation"] == 2

    def _now(self, phase: str) -> float:
        if self.cuda and phase != "rollout":
            import torch

            torch.cuda.current_stream().synchronize()
        return time.perf_counter()

    def _alloc_counts(self) -> dict[str, int]:
        import torch

        stats = torch.cuda.memory_stats()
        return {k: int(stats.get(k, 0)) for k in
                ("num_device_alloc", "num_device_free", "num_alloc_retries",
                 "reserved_bytes.all.current")}

    def _start(self, phase: str) -> None:
        self._t0[phase] = self._now(phase)
        self._c0[phase] = time.process_time()
        self._g0[phase] = (self._gc_total, self._gc_full)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._r0[phase] = (usage.ru_stime, usage.ru_minflt)
        if self.cuda:
            self._a0[phase] = self._alloc_counts()

    def _stop(self, phase: str) -> float:
        t = self._now(phase)
        self.phases[phase].append(t - self._t0.pop(phase))
        self.phase_cpu[phase].append(time.process_time() - self._c0.pop(phase))
        gc_s, full = self._g0.pop(phase)
        self.phase_gc[phase].append(self._gc_total - gc_s)
        self.phase_gc2[phase].append(self._gc_full - full)
        usage, (sys0, faults0) = resource.getrusage(resource.RUSAGE_SELF), self._r0.pop(phase)
        self.phase_sys[phase].append(usage.ru_stime - sys0)
        self.phase_faults[phase].append(usage.ru_minflt - faults0)
        heap = heap_mib()
        if heap is not None:
            self.phase_heap[phase].append(heap)
        if self.cuda:
            now, before = self._alloc_counts(), self._a0.pop(phase)
            delta = {k: now[k] - before[k] for k in now}
            delta["reserved_bytes.all.current"] = now["reserved_bytes.all.current"]
            self.phase_cuda_alloc[phase].append(delta)
        return t

    @hookimpl(tryfirst=True)
    async def slime_generate(self, config: Any, sample: Any, sampling_params: Any,
                             engine: Any) -> Any:
        from slime_core.rollout.manager import default_generate

        return await default_generate(config, sample, sampling_params.replace(ignore_eos=True),
                                      engine)

    @hookimpl
    def slime_run_end(self, config: Any, run_dir: str, status: str) -> None:
        # a multi-variant script runs several trainings in one process: stop counting here
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    @hookimpl
    def slime_register_reward_functions(self) -> list[Any]:
        from slime_hookspecs import RewardFunctionRecord

        return [RewardFunctionRecord(
            name=REWARD, summary="share of digit characters in the completion (benchmarks)",
            factory=lambda config: lambda sample: digit_share(sample.response))]

    @hookimpl
    def slime_configure(self, config: Any) -> None:
        # historic: also called when the plugin is registered after the config was resolved
        from slime_core.api import replace_choice

        replace_choice(config, "rollout.reward", REWARD)

    @hookimpl
    def slime_before_rollout(self, config: Any, rollout_id: int) -> None:
        self._start("rollout")

    @hookimpl
    def slime_after_rollout(self, config: Any, rollout_id: int, result: Any) -> None:
        self._stop("rollout")

    @hookimpl
    def slime_rollout_data_postprocess(self, config: Any, rollout_id: int, batch: Any) -> None:
        self.train_tokens.append(sum(len(t) for t in batch.tokens))
        self.response_tokens.append(sum(int(n) for n in batch.response_lengths))

    @hookimpl
    def slime_before_train(self, config: Any, rollout_id: int) -> None:
        self._start("train")

    @hookimpl
    def slime_after_train(self, config: Any, rollout_id: int, metrics: Any) -> None:
        self._stop("train")

    @hookimpl
    def slime_before_weight_sync(self, config: Any, version: int) -> None:
        self._start("weight_sync")

    @hookimpl
    def slime_after_weight_sync(self, config: Any, version: int, stats: Any) -> None:
        self.sync_ends.append(self._stop("weight_sync"))
        self.cpu_ends.append(time.process_time())

    def step_walls(self) -> list[float]:
        """Wall time of each step: from the end of one weight sync to the end of the next."""
        return [b - a for a, b in zip(self.sync_ends, self.sync_ends[1:], strict=False)]

    def step_cpu(self) -> list[float]:
        """CPU seconds (every thread of the process) of each step, same boundaries."""
        return [b - a for a, b in zip(self.cpu_ends, self.cpu_ends[1:], strict=False)]
