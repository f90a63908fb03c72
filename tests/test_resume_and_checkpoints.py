"""Checkpoints are atomic and a resumed run reproduces an uninterrupted one on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import read_metrics

COMPARED = ("rollout/reward_mean", "rollout/response_length_mean", "train/loss",
            "train/grad_norm", "train/pg_loss", "train/entropy")


def test_n_steps_equal_k_steps_plus_resume(base_config, run_slime, tmp_path: Path) -> None:
    base_config["run"].update(num_rollouts=4, save_interval=2)
    base_config["rollout"]["temperature"] = 1.0
    straight = run_slime({**base_config, "run": {**base_config["run"], "run_dir": str(tmp_path / "a")}})

    first = {**base_config, "run": {**base_config["run"], "run_dir": str(tmp_path / "b"), "num_rollouts": 2}}
    part = run_slime(first)
    assert (part / "checkpoints" / "step_000002" / "driver_state.json").is_file()
    # The resumed run reads its resolved config.toml; only num_rollouts may grow.
    run_slime({**base_config, "run": {**base_config["run"], "run_dir": str(tmp_path / "b")}},
              resume=str(part))

    a, b = read_metrics(straight), read_metrics(part)
    assert [m["step"] for m in b] == [1, 2, 3, 4]
    for ma, mb in zip(a, b):
        for key in COMPARED:
            assert ma[key] == pytest.approx(mb[key], rel=1e-5, abs=1e-6), (ma["step"], key)


def test_resume_refuses_a_changed_config(base_config, run_slime, tmp_path: Path) -> None:
    run_dir = run_slime(base_config)
    changed = {**base_config, "rollout": {**base_config["rollout"], "temperature": 0.5}}
    with pytest.raises(ValueError, match="config rollout.temperature was 1.0, now 0.5"):
        run_slime(changed, resume=str(run_dir))


def test_crash_mid_save_keeps_previous_checkpoint(base_config, run_slime, monkeypatch) -> None:
    from slime_std.trainer import torch_trainer

    base_config["run"].update(num_rollouts=3, save_interval=1)
    real_save = torch_trainer.TorchTrainer.save
    calls = {"n": 0}

    def flaky_save(self, path):  # noqa: ANN001
        calls["n"] += 1
        if calls["n"] == 2:
            real_save(self, path)  # half-written checkpoint on disk, then the crash
            raise OSError("disk full")
        return real_save(self, path)

    monkeypatch.setattr(torch_trainer.TorchTrainer, "save", flaky_save)
    with pytest.raises(OSError, match="disk full"):
        run_slime(base_config)
    ckpts = Path(base_config["run"]["run_dir"]) / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_000001"
    assert sorted(p.name for p in ckpts.iterdir() if p.name.startswith("step_")) == ["step_000001"]
    state = json.loads((ckpts / "step_000001" / "driver_state.json").read_text())
    assert state["step"] == 1
    # every step's row is written before its checkpoint: step 2's row is there, its save is not
    assert [m["step"] for m in read_metrics(base_config["run"]["run_dir"])] == [1, 2]
    monkeypatch.setattr(torch_trainer.TorchTrainer, "save", real_save)
    run_slime(base_config, resume=base_config["run"]["run_dir"])
    # the resume drops the row past its checkpoint; step 2 runs again and logs once
    assert [m["step"] for m in read_metrics(base_config["run"]["run_dir"])] == [1, 2, 3]
    assert not [p for p in ckpts.iterdir() if ".tmp-" in p.name]  # the half-written save is gone


def test_resume_may_change_how_the_run_is_shown_kept_and_run(base_config, run_slime,
                                                             tmp_path: Path, capsys) -> None:
    run_dir = run_slime(base_config)
    changed = {**base_config, "run": {**base_config["run"], "progress": True,
                                      "cudnn_attention": True, "keep_checkpoints": 3},
               "profile": {"steps": [1, 1]}}
    try:
        run_slime(changed, resume=str(run_dir))
    finally:
        import torch

        torch.backends.cuda.enable_cudnn_sdp(True)
    err = capsys.readouterr().err
    assert "resume: changed since the run started: " in err
    assert "run.cudnn_attention False -> True" in err and "run.keep_checkpoints" in err
    # what a step computes still may not change, and the error says what may
    with pytest.raises(ValueError, match=r"config rollout.temperature was 1.0, now 0.5 "
                                         r"\(only these may change on resume: .*run.progress"):
        run_slime({**base_config, "rollout": {**base_config["rollout"], "temperature": 0.5}},
                  resume=str(run_dir))
