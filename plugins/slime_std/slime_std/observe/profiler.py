"""``profile.steps = [a, b]``: the torch profiler over the training of rollouts a..b.

The profiler starts in ``slime_before_train`` of rollout ``a`` and stops in
``slime_after_train`` of rollout ``b`` (inclusive). With ``profile.scope = "train"`` (default)
collection is paused between training phases (rollout, weight sync, save of the steps in
between are not recorded); ``"all"`` records everything from the first training phase to the
last, on every thread of the process (the local engine decodes on a thread of its own, which
the profiler otherwise leaves out; torch builds without the option record the driver's thread
only, said once). Output, in the run directory::

    profile/step_<a>-<b>.json   Chrome trace of the profiler (Perfetto / chrome://tracing)
    profile/step_<a>-<b>.txt    key_averages() table, sorted by profile.sort_by

Each profiled training phase is also a ``slime/train_<id>`` range inside the profile. If the
run ends (or fails) inside the range, what was recorded is written at ``slime_run_end``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


class StepProfiler:
    """Holds one ``torch.profiler.profile`` across hook calls."""

    def __init__(self, section: Any, run_dir: str) -> None:
        self.first, self.last = int(section.steps[0]), int(section.steps[1])
        self.section = section
        self.out_dir = Path(run_dir) / "profile"
        self._prof: Any = None
        self._range: Any = None
        self._paused = False
        self.last_seen = -1
        self.written: list[Path] = []

    @property
    def active(self) -> bool:
        return self._prof is not None

    def before_train(self, rollout_id: int) -> None:
        if not self.first <= rollout_id <= self.last:
            return
        if self._prof is None:
            self._start()
        elif self._paused:
            self._toggle(True)
        import torch

        self._range = torch.profiler.record_function(f"slime/train_{rollout_id}")
        self._range.__enter__()

    def after_train(self, rollout_id: int) -> None:
        if self._prof is None or not self.first <= rollout_id <= self.last:
            return
        self.last_seen = rollout_id
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        if rollout_id >= self.last:
            self.finish()
        elif self.section.scope == "train":
            self._toggle(False)

    def finish(self) -> list[Path]:
        """Stop and write (also called at the end of the run if the range was cut short)."""
        if self._prof is None:
            return []
        if self._range is not None:
            self._range.__exit__(None, None, None)
            self._range = None
        if self._paused:
            self._toggle(True)
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        stem = f"step_{self.first}-{self.last}"
        trace = self.out_dir / f"{stem}.json"
        prof.export_chrome_trace(str(trace))
        table = prof.key_averages().table(sort_by=self.section.sort_by,
                                          row_limit=self.section.row_limit)
        note = ""
        if self.last_seen < self.last:
            note = (f"# note: the run ended after rollout {self.last_seen}, inside the profiled "
                    f"range {self.first}..{self.last}\n")
        text = self.out_dir / f"{stem}.txt"
        text.write_text(f"# torch profiler, training of rollouts {self.first}..{self.last} "
                        f"(profile.scope = {self.section.scope!r})\n{note}{table}\n",
                        encoding="utf-8")
        self.written = [trace, text]
        print(f"profile: wrote {trace} and {text}", file=sys.stderr)
        return self.written

    # -- internals ---------------------------------------------------------------------------
    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        s = self.section
        extra: dict[str, Any] = {}
        if s.scope == "all" and (threads := _all_threads()) is not None:
            extra["experimental_config"] = threads
        self._prof = torch.profiler.profile(
            activities=activities, record_shapes=s.record_shapes,
            profile_memory=s.profile_memory, with_stack=s.with_stack, **extra,
        )
        self._prof.__enter__()
        self._activities = activities

    def _toggle(self, enable: bool) -> None:
        """Pause or resume collection; torch builds without the call record everything."""
        toggle = getattr(self._prof, "toggle_collection_dynamic", None)
        if toggle is None:
            return
        toggle(enable, self._activities)
        self._paused = not enable


def _all_threads() -> Any:
    """The profiler option that records the operators of every thread (threads started before
    the profiler, such as the engine's, are otherwise not recorded); None where this torch
    has no such option."""
    try:
        from torch.profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):
        print("profile: this torch records the driver's thread only (no profile_all_threads); "
              "the engine's thread is missing from the profile", file=sys.stderr)
        return None
