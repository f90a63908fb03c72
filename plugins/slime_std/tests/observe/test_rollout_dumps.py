"""The rollout dump format: exact round trip, group structure, errors naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slime_core.observe.dumps import DumpError, dump_path, list_dumps, read_dump, write_dump
from slime_hookspecs import RolloutResult, Sample, Status
from slime_std.observe.replay import ReplayEngine, configure_replay, replay_rollout


def _sample(group: int, index: int) -> Sample:
    s = Sample(group_index=group, index=index, rollout_id=3, prompt=[{"role": "user", "content": "1+1="}],
               tokens=[5, 6, 7], label=("2",), metadata={"k": (1, 2), "nested": {"a": 1.5}})
    # log-probs that only survive a text format written with repr-exact floats
    s.append_response_tokens([8, 9], [-0.1 + 1e-17 * index, -2.0 / 3.0],
                             weight_version=4)
    s.append_response_tokens([10], trainable=False)
    s.reward = {"acc": 1.0, "fmt": 0.25} if index == 0 else 1 / 3
    s.status = Status.TRUNCATED if index else Status.COMPLETED
    s.remove_sample = index == 2
    return s


def test_round_trip_is_exact_and_keeps_groups(tmp_path: Path) -> None:
    groups = [[_sample(0, 0), _sample(0, 1)], [_sample(1, 2)]]
    result = RolloutResult(groups=groups, metrics={"rollout/sampling_rounds": 2.0,
                                                   "perf/rollout_time": 9.0})
    path = write_dump(tmp_path / "d", 3, result)
    assert path == dump_path(tmp_path / "d", 3, False) and path.name == "rollout_000003.jsonl"
    header = json.loads(path.read_text().splitlines()[0])
    assert header["format"] == "slime.rollout_dump" and header["group_sizes"] == [2, 1]
    assert header["metrics"] == {"rollout/sampling_rounds": 2.0}  # perf/* timings left out
    head, back = read_dump(path)
    assert head["rollout_id"] == 3 and [len(g) for g in back.groups] == [2, 1]
    for a, b in zip(result.samples(), back.samples(), strict=True):
        assert b.rollout_log_probs == a.rollout_log_probs  # bit for bit
        assert (b.tokens, b.loss_mask, b.response_length) == (a.tokens, a.loss_mask, a.response_length)
        assert (b.reward, b.status, b.remove_sample, b.weight_versions) == (
            a.reward, a.status, a.remove_sample, a.weight_versions)
        assert b.prompt == a.prompt
    first = next(back.samples())
    assert first.label == ["2"] and first.metadata == {"k": [1, 2], "nested": {"a": 1.5}}
    assert first.loss_mask == [1, 1, 0]
    write_dump(tmp_path / "d", 0, RolloutResult(groups=[[_sample(0, 0)]]), evaluation=True)
    assert list_dumps(tmp_path / "d") == {"train": [3], "eval": [0]}


def test_errors_name_the_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(DumpError, match="does not exist"):
        read_dump(tmp_path / "nope.jsonl")
    path = write_dump(tmp_path, 1, RolloutResult(groups=[[_sample(0, 0), _sample(0, 1)]]))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n")
    with pytest.raises(DumpError, match="announces 2 samples in 1 groups, the file has 1"):
        read_dump(path)
    bad = json.loads(lines[2])
    bad["loss_mask"] = [1]
    path.write_text("\n".join([lines[0], lines[1], json.dumps(bad)]) + "\n")
    with pytest.raises(DumpError, match=r"rollout_000001.jsonl:3: bad sample: .*loss_mask has 1"):
        read_dump(path)
    path.write_text(json.dumps({"format": "other"}) + "\n")
    with pytest.raises(DumpError, match=r":1: not a slime rollout dump \(format 'other'"):
        read_dump(path)
    path.write_text(json.dumps({"format": "slime.rollout_dump", "version": 99}) + "\n")
    with pytest.raises(DumpError, match="format version 99"):
        read_dump(path)


def test_replay_names_what_is_missing(tmp_path: Path) -> None:
    write_dump(tmp_path, 0, RolloutResult(groups=[[_sample(0, 0)]]))
    assert len(replay_rollout(str(tmp_path), 0, False).groups) == 1
    with pytest.raises(DumpError, match=r"no dump of rollout 1 .* ids 0..0 \(1 files\).*num_rollouts"):
        replay_rollout(str(tmp_path), 1, False)
    with pytest.raises(DumpError, match=r"no dump of evaluation 0 .* none.*eval.interval = 0"):
        replay_rollout(str(tmp_path), 0, True)


def test_configure_replay_switches_the_engine_and_checks_directories(make_config, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = make_config(debug={"replay_rollouts": str(empty)})
    with pytest.raises(ValueError, match="no rollout_\\*.jsonl dumps there"):
        configure_replay(cfg)
    cfg = make_config(debug={"replay_rollouts": str(tmp_path), "save_rollouts": str(tmp_path)})
    with pytest.raises(ValueError, match="are the same directory"):
        configure_replay(cfg)
    write_dump(tmp_path, 0, RolloutResult(groups=[[_sample(0, 0)]]))
    cfg = make_config(debug={"replay_rollouts": str(tmp_path)}, weights={"verify": True})
    with pytest.raises(ValueError, match="replay engine holds no weights.*weights.verify = false"):
        configure_replay(cfg)
    cfg = make_config(debug={"replay_rollouts": str(tmp_path)})
    assert cfg.rollout.engine == "local"
    configure_replay(cfg)
    assert cfg.rollout.engine == "replay"


def test_replay_engine_reports_versions_and_refuses_to_generate() -> None:
    e = ReplayEngine(None)
    assert e.weight_version() == -1 and e.health()
    e.update_weights({"w": object()}, 2)
    assert e.weight_version() == 2
    e.update_weights_from_disk("/nonexistent", 3)
    assert e.weight_version() == 3
    with pytest.raises(RuntimeError, match="replay engine cannot generate"):
        e.generate([[1]], [None])
