"""Several eval datasets through the real ``core run`` on the tiny arithmetic model (issue 21
item 1): the held-out file and a reasoning-gym task side by side, each with its own reward,
sampling and samples per prompt; per-dataset accuracy and pass@k in metrics.jsonl and the
report; the plain ``data.eval_path`` keeps its metric names."""

from __future__ import annotations

import json

from tests.cli_support import ARITH, core, write_toml


def test_two_eval_datasets_with_their_own_settings(tmp_path) -> None:
    cfg = write_toml(tmp_path / "run.toml", {
        "run": {"num_rollouts": 1, "run_dir": str(tmp_path / "run"), "progress": False,
                "loggers": ["jsonl"], "num_threads": 2},
        "model": {"path": str(ARITH / "model")},
        "data": {"path": str(ARITH / "train.jsonl"), "eval_path": str(ARITH / "eval.jsonl")},
        "rollout": {"batch_size": 2, "n_samples_per_prompt": 2, "max_new_tokens": 8},
        "eval": {"interval": 1, "max_prompts": 10, "pass_at": [1, 4], "datasets": [
            {"name": "heldout", "path": str(ARITH / "eval.jsonl"), "n_samples": 4,
             "temperature": 1.0, "max_prompts": 12},
            {"name": "chain_sum", "source": "reasoning_gym", "task": "chain_sum",
             "task_kwargs": {"min_terms": 2, "max_terms": 2}, "size": 6,
             "reward": "reasoning_gym", "n_samples": 1, "max_new_tokens": 2},
        ]},
        "train": {"lr": 1e-4},
    })
    res = core("run", "--config", str(cfg), "--plugins", "slime_grpo")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        # the held-out file: 12 prompts x 4 sampled answers, pass@1 and pass@4
        assert r["eval/heldout/samples"] == 48.0
        assert 0.0 <= r["eval/heldout/pass@1"] <= r["eval/heldout/pass@4"] <= 1.0
        assert abs(r["eval/heldout/pass@1"] - r["eval/heldout/accuracy"]) < 1e-9
        # the reasoning-gym task: its own reward, 1 sample (no pass@4), 2 new tokens at most
        assert r["eval/chain_sum/samples"] == 6.0 and "eval/chain_sum/pass@4" not in r
        assert r["eval/chain_sum/response_length_max"] <= 2.0
        assert r["eval/chain_sum/truncated_ratio"] > 0.0
        assert r["eval/chain_sum/failed"] == 0.0
        # the plain eval_path: greedy, 10 prompts, names unchanged
        assert r["eval/samples"] == 10.0 and "eval/accuracy" in r
    # the warm-started model answers label+1 greedily but samples the sum a quarter of the
    # time: sampled pass@4 on held-out prompts is well above greedy accuracy
    assert rows[0]["eval/heldout/pass@4"] > rows[0]["eval/accuracy"]
    rep = core("report", str(tmp_path / "run"))
    assert rep.returncode == 0, rep.stderr[-2000:]
    out = tmp_path / "run" / "report"
    assert (out / "eval_heldout.png").stat().st_size > 1000
    assert (out / "eval_chain_sum.png").is_file()
    assert "eval/heldout/pass@4: first" in (out / "report.html").read_text()
