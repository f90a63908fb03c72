"""A CPU run records what its ``auto`` keys became and how long it took to its first step:
``config.toml`` holds the resolved values, ``metrics.jsonl`` ``perf/startup_time``, and both are
printed once at start-up."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from slime_core.config.loader import read_toml

from tests.conftest import read_metrics


def test_cpu_run_writes_resolved_auto_keys_and_startup_time(
        base_config: dict[str, Any], run_slime: Callable[..., Path], capsys: Any) -> None:
    before = time.time()
    run_dir = run_slime(base_config)
    err = capsys.readouterr().err
    saved = read_toml(run_dir / "config.toml")
    assert saved["rollout"]["cuda_graphs"] is False
    assert saved["rollout"]["compile_decode"] is False
    assert saved["train"]["compile"] is False
    assert saved["rollout"]["decode_attention"] == "sdpa"
    # each choice once, with its reason
    assert err.count("auto: rollout.cuda_graphs = false (cpu does not capture graphs)") == 1
    assert err.count("auto: train.compile = false") == 1
    assert err.count("time to first step: ") == 1

    from slime_core.runner.startup import process_start

    all_rows = read_metrics(run_dir)
    # the step-0 evaluation (where there is one), left out of start-up
    eval0 = sum(r.get("perf/eval_time", 0.0) for r in all_rows if r["step"] == 0)
    rows = [r for r in all_rows if r["step"] >= 1]
    first = rows[0]
    # counted from the process's start, which came before this test's
    started = process_start()
    assert started < before
    assert first["perf/startup_time"] + eval0 >= before - started
    assert 0 < first["perf/setup_time"] < first["perf/startup_time"]
    assert all("perf/startup_time" not in r for r in rows[1:])
    # the set-up's break-down: where the process's time went before its first step
    parts = {k: v for k, v in first.items() if k.startswith("perf/setup_") and k != "perf/setup_time"}
    assert set(parts) == {f"perf/setup_{p}_time" for p in
                          ("start", "rewards", "data", "trainer", "engines", "first_sync")}, parts
    assert all(v >= 0 for v in parts.values())
    # the parts are disjoint pieces of the set-up (the rest: run files, loggers, hooks)
    assert sum(parts.values()) <= first["perf/setup_time"] + 1e-6
    assert all(not k.startswith("perf/setup_") for r in rows[1:] for k in r)
