"""Config sections of ``core_observe``: ``[trace]`` and ``[profile]``.

(``[debug]`` with ``save_rollouts`` / ``replay_rollouts`` is one of the core's own sections.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

SORT_KEYS = ("self_cpu_time_total", "cpu_time_total", "self_cuda_time_total", "cuda_time_total",
             "self_device_time_total", "device_time_total", "cpu_memory_usage",
             "self_cpu_memory_usage", "count")


@dataclass
class TraceSection:
    enabled: bool = True  # write RUN_DIR/trace.json (Chrome trace events, opens in Perfetto)
    samples: bool = True  # per-sample spans (generate, turns, reward); phases are always traced
    max_events: int = 1_000_000  # sample spans beyond this are counted, not kept

    def __post_init__(self) -> None:
        if self.max_events < 1:
            raise ValueError(f"trace.max_events: must be >= 1, got {self.max_events}")


@dataclass
class ProfileSection:
    steps: list[int] = field(default_factory=list)  # [a, b]: profile training of rollouts a..b
    scope: str = "train"  # train: training phases only | all: a's to b's training, all threads
    record_shapes: bool = False  # torch.profiler option of the same name
    profile_memory: bool = False  # torch.profiler option of the same name
    with_stack: bool = False  # torch.profiler option of the same name
    sort_by: str = "self_cpu_time_total"  # column of the key_averages table
    row_limit: int = 40  # rows of the key_averages table
    # the local engine's phases per generate call (prefill, decode steps, sampling, host gaps,
    # KV allocation, weight updates) on trace.json's engine track and as perf/rollout_*
    # metrics; synchronises the device at each phase boundary (local executor only)
    rollout: bool = False
    peak_tflops: float = 0.0  # the floors' peak FLOP rate (0: measured once at engine start)
    memory_gbps: float = 0.0  # the floors' memory bandwidth in GB/s (0: measured likewise)

    def __post_init__(self) -> None:
        if self.steps:
            if len(self.steps) != 2:
                raise ValueError(f"profile.steps: expected [first, last], got {self.steps!r}")
            a, b = self.steps
            if a < 0 or b < a:
                raise ValueError(f"profile.steps: need 0 <= first <= last, got [{a}, {b}]")
        if self.scope not in ("train", "all"):
            raise ValueError(f"profile.scope: must be 'train' or 'all', got {self.scope!r}")
        if self.sort_by not in SORT_KEYS:
            raise ValueError(f"profile.sort_by: {self.sort_by!r} is not one of {', '.join(SORT_KEYS)}")
        if self.row_limit < 1:
            raise ValueError(f"profile.row_limit: must be >= 1, got {self.row_limit}")
        for key in ("peak_tflops", "memory_gbps"):
            if getattr(self, key) < 0:
                raise ValueError(f"profile.{key}: must be >= 0 (0: measured), got "
                                 f"{getattr(self, key)}")
