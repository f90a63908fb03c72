"""``core run`` of the tiny arithmetic example over the disk transport with delta versions:
it completes and learns exactly as with full versions (the delta sync is bit-exact, so the
engines sample the same rollouts step by step), and writes fewer bytes."""

from __future__ import annotations

from pathlib import Path

from tests.cli_support import ARITH, core
from tests.conftest import read_metrics


def _run(run_dir: Path, delta: str) -> list[dict]:
    res = core(
        "run", "--plugins", "slime_grpo", "--config", str(ARITH / "grpo.toml"),
        "-o", f'run.run_dir="{run_dir}"', "-o", "run.num_rollouts=6",
        "-o", "run.save_interval=0", "-o", "run.progress=false", "-o", "run.num_threads=1",
        "-o", 'run.loggers=["jsonl"]', "-o", "rollout.batch_size=8",
        "-o", "rollout.n_samples_per_prompt=4", "-o", "eval.interval=0",
        "-o", 'weights.transport="disk"', "-o", f'weights.delta="{delta}"',
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return read_metrics(run_dir)


def test_delta_run_learns_as_with_full_versions(tmp_path: Path) -> None:
    full, delta = _run(tmp_path / "full", "off"), _run(tmp_path / "xor", "xor")
    assert [r["step"] for r in delta] == [1, 2, 3, 4, 5, 6]
    assert [r["rollout/reward_mean"] for r in delta] == [r["rollout/reward_mean"] for r in full]
    assert all(abs(a["train/loss"] - b["train/loss"]) < 1e-6 for a, b in zip(full, delta, strict=True))
    assert all(r["perf/weight_sync_delta"] == 1.0 and r["perf/weight_sync_resyncs"] == 0.0
               and r["perf/weight_sync_written_bytes"] < r["perf/weight_sync_full_bytes"]
               for r in delta)
    assert all(r["perf/weight_sync_delta"] == 0.0 for r in full)
    assert sorted(p.name for p in (tmp_path / "xor" / "weights").iterdir()) == [
        "delta-v000005", "delta-v000006", "v000000"]
