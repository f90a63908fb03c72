"""``profile.scope = "all"`` records the operators of threads started before the profiler (the
local engine decodes on one): without the all-threads option torch leaves them out."""

from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from slime_std.observe.profiler import StepProfiler


def _section(scope: str) -> SimpleNamespace:
    return SimpleNamespace(steps=[1, 1], scope=scope, record_shapes=False, profile_memory=False,
                           with_stack=False, sort_by="self_cpu_time_total", row_limit=5)


@pytest.mark.parametrize("scope", ["all", "train"])
def test_a_worker_threads_operators_are_recorded_with_scope_all(tmp_path: Path, scope: str):
    jobs: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()

    def worker() -> None:  # an engine-like thread, started before the profiler
        while (job := jobs.get()) is not None:
            done.put(job())

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    prof = StepProfiler(_section(scope), str(tmp_path))
    prof.before_train(1)
    jobs.put(lambda: torch.ones(64).cumsum(0))  # an operator only the worker issues
    done.get(timeout=30)
    torch.ones(8).add(1)
    prof.after_train(1)
    jobs.put(None)
    thread.join(timeout=30)
    events = json.loads((tmp_path / "profile" / "step_1-1.json").read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert "aten::add" in names and "slime/train_1" in names
    assert ("aten::cumsum" in names) is (scope == "all")
