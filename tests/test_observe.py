"""``core_observe`` in real runs: dump + replay equality without an engine, trace spans for every
phase and sample, ``core trace`` / ``core report`` on a real run, profiling, a failing run's trace.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from slime_core.observe.dumps import list_dumps, read_dump
from slime_core.observe.trace import DRIVER_PID, PHASE_TID, ROLLOUT_TID, SAMPLES_PID, span
from slime_hookspecs import Status, hookimpl
from slime_std.observe.commands import report_command, trace_command
from slime_std.observe.trace_analysis import validate

from tests.conftest import read_metrics, reward_record


def _trace(run_dir: Path) -> list[dict[str, Any]]:
    doc = json.loads((run_dir / "trace.json").read_text())
    assert validate(doc) == []
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _assert_properly_nested(events: list[dict[str, Any]]) -> None:
    """Complete events of one track must nest (Perfetto draws them as a stack)."""
    stack: list[float] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        end = e["ts"] + e["dur"]
        while stack and stack[-1] <= e["ts"] + 5e-3:
            stack.pop()
        assert not stack or end <= stack[-1] + 5e-3, f"{e['name']} at {e['ts']} overlaps its parent"
        stack.append(end)


class TokenReward:
    """Rewards that vary within a group (the tiny model never answers right), so advantages,
    losses and gradients are not zero and replay equality means something."""

    @hookimpl
    def slime_register_reward_functions(self):
        return reward_record("token_sum", lambda s: float(sum(s.response_tokens) % 7) / 7)


def test_replay_reproduces_training_metrics_without_an_engine(
    run_slime, base_config: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dumps = tmp_path / "dumps"
    first = copy.deepcopy(base_config)
    first["eval"] = {"interval": 1, "max_prompts": 2}
    first["debug"] = {"save_rollouts": str(dumps)}
    first["profile"] = {"steps": [1, 1], "row_limit": 15}
    first["rollout"]["reward"] = "token_sum"
    run1 = run_slime(first, plugins=[TokenReward()])
    assert list_dumps(dumps) == {"train": [0, 1], "eval": [0, 1, 2]}
    header, result = read_dump(dumps / "rollout_000001.jsonl")
    assert header["group_sizes"] == [4, 4] and all(s.rollout_log_probs for s in result.samples())

    # profiling of rollout 1's training, written into the run directory
    prof_json, prof_txt = run1 / "profile" / "step_1-1.json", run1 / "profile" / "step_1-1.txt"
    events = json.loads(prof_json.read_text())["traceEvents"]
    assert any(e.get("name") == "slime/train_1" for e in events)
    assert "slime/train_1" in prof_txt.read_text() and "Self CPU" in prof_txt.read_text()
    assert not any(e.get("name") == "slime/train_0" for e in events)

    from slime_std.engine import local_engine

    def no_engine(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("replay built the local engine")

    monkeypatch.setattr(local_engine.LocalEngine, "__init__", no_engine)
    second = copy.deepcopy(base_config)
    second["run"]["run_dir"] = str(tmp_path / "replay")
    second["eval"] = {"interval": 1, "max_prompts": 2}
    second["debug"] = {"replay_rollouts": str(dumps)}
    run2 = run_slime(second)
    assert 'engine = "replay"' in (run2 / "config.toml").read_text()
    assert not [e for e in _trace(run2) if e["name"] == "generate"]  # nothing was generated

    m1, m2 = read_metrics(run1), read_metrics(run2)
    assert [m["step"] for m in m1] == [m["step"] for m in m2] == [0, 1, 2]
    compared = 0
    for a, b in zip(m1, m2, strict=True):
        for key, value in a.items():
            if key.startswith(("train/", "rollout/", "eval/")):
                assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (a["step"], key)
                compared += key.startswith("train/")
    assert compared >= 10 and m1[1]["train/loss"] != m1[2]["train/loss"]
    assert m1[1]["train/grad_norm"] > 0 and m1[1]["rollout/reward_std"] > 0

    # a replay that runs past the dumps fails naming what exists
    third = copy.deepcopy(second)
    third["run"].update(run_dir=str(tmp_path / "too_long"), num_rollouts=3)
    with pytest.raises(ValueError, match=r"no dump of rollout 2 .* ids 0..1 \(2 files\)"):
        run_slime(third)


class TwoTurns:
    """A two-turn generate with a masked observation between turns, traced with ``span``."""

    @hookimpl
    async def slime_generate(self, config, sample, sampling_params, engine):
        params = sampling_params.replace(max_new_tokens=3)
        for turn in range(2):
            with span("turn", turn=turn) as info:
                out = await engine.generate(sample.tokens, params)
                sample.append_response_tokens(out.token_ids, out.log_probs, text=out.text,
                                              weight_version=out.weight_version)
                info["new_tokens"] = len(out.token_ids)
            if turn == 0:
                sample.append_response_tokens([5, 6], trainable=False, text="  ")
        sample.status = Status.COMPLETED
        return sample


def test_trace_has_every_phase_and_sample(run_slime, base_config: dict) -> None:
    cfg = copy.deepcopy(base_config)
    cfg["eval"] = {"interval": 2, "max_prompts": 2}
    cfg["run"]["save_interval"] = 1
    cfg["algorithm"] = {"use_kl_loss": True, "kl_loss_coef": 0.01}
    cfg["train"]["num_steps_per_rollout"] = 2
    run = run_slime(cfg, plugins=[TwoTurns()])
    events = _trace(run)
    driver = [e for e in events if (e["pid"], e["tid"]) == (DRIVER_PID, PHASE_TID)]
    _assert_properly_nested(driver)
    rollouts = [e for e in events if (e["pid"], e["tid"]) == (DRIVER_PID, ROLLOUT_TID)]
    assert [(e["name"], e["args"]["rollout_id"]) for e in rollouts] == [("rollout", 0), ("rollout", 1)]
    driver += rollouts
    count: dict[str, int] = {}
    for e in driver:
        count[e["name"]] = count.get(e["name"], 0) + 1
    assert count["setup"] == count["run"] == 1
    assert count["step"] == count["rollout"] == count["train"] == count["advantages"] == 2
    assert count["train_step"] == 4 and count["weight_sync"] == 3  # initial sync + one per step
    assert count["save"] == 2 and count["eval"] == 2  # before step 0 and after step 2
    roles = sorted(e["args"]["role"] for e in driver if e["name"] == "log_probs")
    assert roles == ["actor", "actor", "ref", "ref"]
    train = [e for e in driver if e["name"] == "train"]
    for e in driver:
        if e["name"] in ("log_probs", "advantages", "train_step"):  # inside a train span
            assert any(t["ts"] <= e["ts"] and e["ts"] + e["dur"] <= t["ts"] + t["dur"] + 5e-3
                       for t in train)

    samples = [e for e in events if e["pid"] == SAMPLES_PID]
    by_sample: dict[tuple, dict[str, list[dict]]] = {}
    for e in samples:
        a = e["args"]
        key = (a["rollout_id"], a["eval"], a["group"], a["index"])
        by_sample.setdefault(key, {}).setdefault(e["name"], []).append(e)
    train_keys = [k for k in by_sample if not k[1]]
    eval_keys = [k for k in by_sample if k[1]]
    assert len(train_keys) == 2 * 2 * 4 and len(eval_keys) == 2 * 2  # rollouts x groups x n
    for key, spans in by_sample.items():
        (gen,) = spans["generate"]
        (reward,) = spans["reward"]
        turns = spans["turn"]
        assert gen["args"]["status"] == "completed" and gen["args"]["response_length"] >= 2
        assert [t["args"]["turn"] for t in turns] == [0, 1]
        for child in [*turns]:
            assert child["tid"] == gen["tid"] and gen["ts"] <= child["ts"]
            assert child["ts"] + child["dur"] <= gen["ts"] + gen["dur"] + 5e-3, key
        assert reward["tid"] == gen["tid"] and reward["ts"] >= gen["ts"] + gen["dur"] - 5e-3
    for lane in {e["tid"] for e in samples}:
        _assert_properly_nested([e for e in samples if e["tid"] == lane])

    res = CliRunner().invoke(trace_command, [str(run), "--top", "3"])
    assert res.exit_code == 0, res.output
    out = res.output
    for phase in ("setup", "rollout", "train", "log_probs[ref]", "log_probs[actor]", "advantages",
                  "train_step", "weight_sync", "save", "eval", "(other)"):
        assert f" {phase} " in out, phase
    assert f"samples: {len(by_sample)} traced" in out
    slow = out.split("slowest samples")[1].splitlines()[2:]
    assert len(slow) == 3 and all(row.split()[6] == "2" for row in slow)  # two turns each

    res = CliRunner().invoke(report_command, [str(run)])
    assert res.exit_code == 0, res.output
    pngs = {p.stem for p in (run / "report").glob("*.png")}
    assert {"reward", "accuracy", "kl", "clip_fraction", "entropy", "response_length",
            "throughput", "phase_time"} <= pngs
    page = (run / "report" / "report.html").read_text()
    assert "slime_grpo" in page and "use_kl_loss = true" in page and "log_probs[ref]" in page


def test_async_rollouts_get_their_own_track(run_slime, base_config: dict) -> None:
    cfg = copy.deepcopy(base_config)
    cfg["run"]["async_rollout"] = True
    run = run_slime(cfg)
    events = _trace(run)
    phases = [e for e in events if (e["pid"], e["tid"]) == (DRIVER_PID, PHASE_TID)]
    rollouts = [e for e in events if (e["pid"], e["tid"]) == (DRIVER_PID, ROLLOUT_TID)]
    _assert_properly_nested(phases)
    _assert_properly_nested(rollouts)
    assert not [e for e in phases if e["name"] == "step"]  # not drawn for one-step-off runs
    (train0,) = [e for e in phases if e["name"] == "train" and e["args"]["rollout_id"] == 0]
    (roll1,) = [e for e in rollouts if e["args"]["rollout_id"] == 1]
    assert roll1["ts"] < train0["ts"] + train0["dur"]  # rollout 1 overlapped training of step 0
    assert len([e for e in events if e["name"] == "generate"]) == 2 * 2 * 4


class FailInTraining:
    """Fails the second step's training: a run that fails before its first step completes
    leaves no run directory at all (docs/run_directory.md), so the trace is checked on a run
    that trained once."""

    @hookimpl
    def slime_before_train_step(self, config, rollout_id, step_id, model, optimizer, scheduler):
        if rollout_id >= 1:
            raise RuntimeError("injected failure")


def test_a_failing_run_still_writes_its_trace(run_slime, base_config: dict) -> None:
    cfg = copy.deepcopy(base_config)
    cfg["run"]["num_rollouts"] = 2
    with pytest.raises(RuntimeError, match="injected failure"):
        run_slime(cfg, plugins=[FailInTraining()])
    run = Path(cfg["run"]["run_dir"])
    doc = json.loads((run / "trace.json").read_text())
    assert doc["otherData"]["status"] == "failed"
    events = {e["name"]: e for e in doc["traceEvents"] if e["ph"] == "X"}
    assert events["train"]["args"]["error"] == "RuntimeError: injected failure"
    assert events["train_step"]["args"]["error"] == "RuntimeError: injected failure"
    assert events["run"]["args"] == {"run_dir": str(run), "status": "failed"}
