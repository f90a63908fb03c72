"""``core report``: PNG panels from metrics.jsonl (absent metrics skip their panel) and a
self-contained report.html with the config, the plugin set and the phase breakdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from slime_std.observe.commands import report_command
from slime_std.observe.report import ReportError, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 0, "eval/accuracy": 0.1, "eval/reward_mean": 0.1}]
    for step in range(1, 6):
        rows.append({
            "step": step, "rollout/reward_mean": 0.1 * step, "rollout/reward_std": 0.05,
            "rollout/accuracy": 0.1 * step, "rollout/response_length_mean": 10.0 + step,
            "train/loss": 1.0 / step, "train/entropy": 2.0 - 0.1 * step, "train/kl_loss": 0.01 * step,
            "perf/rollout_time": 1.0, "perf/train_time": 0.5, "perf/weight_sync_time": 0.1,
            "perf/total_step_time": 1.7, "perf/rollout_tokens_per_s": 100.0 + step,
            "train/grad_norm": float("nan") if step == 3 else 1.0,
        })
    rows[-1]["eval/accuracy"] = 0.6
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run / "config.toml").write_text('[run]\nname = "<script>x</script>"\nnum_rollouts = 5\n')
    (run / "plugins.json").write_text(json.dumps([
        {"name": "slime_grpo", "distribution": "slime-grpo", "version": "0.1.0", "source": "entry point"}]))
    return run


def test_report_writes_present_panels_and_an_html_page(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    rep = write_report(run)
    names = {p.stem for p in rep.pngs}
    assert names == {"reward", "accuracy", "kl", "entropy", "loss", "response_length", "throughput",
                     "phase_time"}  # no clip fraction metrics in this run: no panel
    for p in rep.pngs:
        assert p.parent == run / "report" and p.read_bytes()[:8] == PNG_MAGIC
    assert not (run / "report" / "clip_fraction.png").exists()
    page = rep.html.read_text()
    assert page.count("data:image/png;base64,") == len(rep.pngs)
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>x" not in page  # escaped config
    assert "slime-grpo" in page and "0.1 → 0.6 (0.6)" in page
    assert "trace.json does not exist" in page  # no trace: said, not crashed


def test_report_includes_the_trace_breakdown(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    ev = [{"name": n, "ph": "X", "ts": ts, "dur": d, "pid": 1, "tid": 1, "args": {}}
          for n, ts, d in (("rollout", 0, 3e6), ("train", 3e6, 1e6))]
    (run / "trace.json").write_text(json.dumps({"traceEvents": ev}))
    page = write_report(run, tmp_path / "out").html.read_text()
    assert "wall time 4.000 s" in page and "75.0%" in page


def test_report_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="does not exist"):
        write_report(tmp_path / "missing")
    with pytest.raises(ReportError, match="has no metrics.jsonl"):
        write_report(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\nnot json\n')
    with pytest.raises(ReportError, match="metrics.jsonl:2: not JSON"):
        write_report(tmp_path)


def test_core_report_command(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    res = CliRunner().invoke(report_command, [str(run), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert f"wrote {tmp_path / 'r' / 'report.html'}" in res.output
    res = CliRunner().invoke(report_command, [str(tmp_path)])
    assert res.exit_code == 1 and "has no metrics.jsonl" in res.output
