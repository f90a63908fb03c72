"""The ray executor end to end on CPU: GRPO with data-parallel trainer ranks, weight transports,
the same metrics as the local executor, one-step-off asynchronous rollouts.

Select with ``-m ray``. One local Ray instance serves the module (``ray_session``).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from slime_hookspecs import hookimpl

from tests.conftest import read_metrics
from tests.ray_support import RAY_PLUGINS, ray_config, ray_session, run  # noqa: F401

pytestmark = pytest.mark.ray

TRANSPORT_PLUGIN = "tests.ray_transport_plugin"

COMPARED = ("rollout/reward_mean", "rollout/reward_std", "rollout/response_length_mean",
            "train/loss", "train/grad_norm", "train/pg_loss", "train/entropy")


class Observer:
    """Driver-side hooks: the train batch of each step and every sample's weight versions."""

    def __init__(self) -> None:
        self.batches: dict[int, Any] = {}
        self.versions: dict[int, list[int]] = {}

    @hookimpl
    def slime_rollout_data_postprocess(self, config, rollout_id, batch):
        self.batches[rollout_id] = copy.deepcopy(batch)

    @hookimpl
    def slime_log_rollout(self, config, rollout_id, samples, metrics):
        self.versions[rollout_id] = [v for s in samples for v in s.weight_versions]


def _checkpoint(run_dir: Path, step: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    from safetensors.torch import load_file

    d = run_dir / "checkpoints" / f"step_{step:06d}" / "trainer"
    return load_file(str(d / "model.safetensors")), torch.load(d / "trainer_state.pt",
                                                               weights_only=False)


def test_grpo_two_trainer_ranks_one_engine(ray_session, base_config) -> None:  # noqa: F811
    cfg = ray_config(
        base_config,
        run={"num_rollouts": 3, "save_interval": 1, "keep_checkpoints": 5},
        train={"num_ranks": 2},
        rollout={"reward": "digit_fraction"},
        weights={"transport": "broadcast", "verify": True},
    )
    obs = Observer()
    run_dir = run(cfg, [obs])
    m = read_metrics(run_dir)
    assert [x["step"] for x in m] == [1, 2, 3]

    # learning signal: rewards differ within groups, so gradients and weights move
    assert all("rollout/reward_mean" in x and x["train/grad_norm"] > 0 for x in m)
    from slime_core.models.loading import load_causal_lm
    from slime_core.pluginmgr import PluginSelection
    from slime_core.session import resolve

    manager, config = resolve(PluginSelection(plugins=["slime_grpo"]), None, (), cfg)
    init = load_causal_lm(config.model, torch.device("cpu"), torch.float32, role="actor",
                          seed=config.run.seed).state_dict()
    w1, state1 = _checkpoint(run_dir, 1)
    w3, _ = _checkpoint(run_dir, 3)
    moved = max(float((w1[k] - init[k]).abs().max()) for k in w1)
    assert moved > 1e-5 and any(not torch.equal(w1[k], w3[k]) for k in w1)

    # weight versions: every sample of step k came from version k (synced right before it),
    # and after each broadcast the engine's weights were byte-identical to rank 0's
    assert obs.versions == {0: [0] * 8, 1: [1] * 8, 2: [2] * 8}
    assert all(x["perf/weight_sync_verified"] == 1.0 and x["rollout/staleness_max"] == 0
               for x in m)
    assert all(x["perf/weight_sync_bytes"] > 0 and x["perf/weight_sync_seconds"] > 0 for x in m)
    assert m[0]["train/dp_token_imbalance"] >= 1.0

    # data-parallel gradient == single-process gradient on the same batch. The first AdamW
    # step stores exp_avg = (1 - beta1) * grad, so the 2-rank gradient (all-reduced and
    # clipped) is in the step-1 checkpoint; one local rank trains on the captured batch.
    from slime_core.context import set_manager
    from slime_std.trainer.torch_trainer import TorchTrainer

    set_manager(manager)
    torch.set_num_threads(1)
    local = TorchTrainer(config, 0, 1, None)
    local_metrics = local.train_step(copy.deepcopy(obs.batches[0]), 0)
    assert local_metrics["train/grad_norm"] == pytest.approx(m[0]["train/grad_norm"], rel=1e-5)
    assert local_metrics["train/loss"] == pytest.approx(m[0]["train/loss"], rel=1e-5, abs=1e-7)
    dp_state = state1["optimizer"]["state"]
    local_state = local.optimizer.state_dict()["state"]
    assert dp_state.keys() == local_state.keys()
    scale = max(float(s["exp_avg"].abs().max()) for s in local_state.values())
    for i in local_state:
        # tolerance: fp32 sums in another order (2 shards, other micro-batches)
        torch.testing.assert_close(dp_state[i]["exp_avg"], local_state[i]["exp_avg"],
                                   rtol=1e-4, atol=1e-6 * scale)


def test_ppo_with_two_trainer_ranks(ray_session, base_config) -> None:  # noqa: F811
    """slime_ppo's critic under data parallelism: both ranks run the critic each step (the
    whitening and critic collectives meet), rank 0 checkpoints it."""
    cfg = ray_config(
        base_config,
        run={"num_rollouts": 2, "save_interval": 2},
        train={"num_ranks": 2},
        rollout={"reward": "digit_fraction"},
        algorithm={"advantage_estimator": "gae"},
        ppo={"critic_lr": 1e-3},
    )
    run_dir = run(cfg, selected=("slime_grpo", "slime_ppo"))
    m = read_metrics(run_dir)
    assert [x["step"] for x in m] == [1, 2]
    for x in m:
        assert x["train/critic_grad_norm"] > 0 and x["train/grad_norm"] > 0
        assert -10 < x["train/explained_variance"] <= 1
    critic = run_dir / "checkpoints" / "step_000002" / "trainer" / "critic"
    assert (critic / "critic.safetensors").is_file()


def test_local_and_ray_executors_give_the_same_metrics(ray_session, base_config,  # noqa: F811
                                                       tmp_path: Path) -> None:
    """1 trainer rank, colocated engine, ``ray`` transport vs everything in-process.

    Same seed, same code, one torch thread each. Tolerance: 1e-5 relative, 1e-7 absolute.
    Seen: rewards, lengths and grad norms identical; entropy within 1e-7 relative (fp32
    reductions over differently placed tensors); train/loss is ~1e-8 because GRPO advantages
    sum to zero per group, so only its absolute error (~6e-9 seen) means anything. With 2
    ranks (first test) the gradient is the same up to fp32 summation order: over 3 steps the
    metrics matched these same bounds (grad_norm within 1.1e-7 relative), but a sampled token
    may flip on a later step and then the runs diverge.
    """
    common = {"num_rollouts": 2, "num_threads": 1, "plugin_modules": [RAY_PLUGINS]}
    local_cfg = copy.deepcopy(base_config)
    local_cfg["run"].update(common, run_dir=str(tmp_path / "local"))
    local_cfg["rollout"]["reward"] = "digit_fraction"
    local_cfg["debug"] = {"save_rollouts": str(tmp_path / "dumps")}
    ray_cfg = ray_config(local_cfg, run={"run_dir": str(tmp_path / "ray")}, ray={"colocate": True},
                         weights={"transport": "ray", "verify": True},
                         debug={"save_rollouts": ""})
    a, b = read_metrics(run(local_cfg)), read_metrics(run(ray_cfg))
    assert [x["step"] for x in a] == [x["step"] for x in b] == [1, 2]
    for ma, mb in zip(a, b, strict=True):
        for key in COMPARED:
            assert mb[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-7), (ma["step"], key)
        assert mb["perf/weight_sync_verified"] == 1.0 and mb["perf/weight_sync_buckets"] >= 1

    # the local run's dumps replayed under the ray executor (the rollout manager actor serves
    # them, no engine generates): the same training metrics
    replay_cfg = ray_config(local_cfg, run={"run_dir": str(tmp_path / "replay")},
                            debug={"save_rollouts": "", "replay_rollouts": str(tmp_path / "dumps")})
    replay_dir = run(replay_cfg)
    assert 'engine = "replay"' in (replay_dir / "config.toml").read_text()
    c = read_metrics(replay_dir)
    assert [x["step"] for x in c] == [1, 2]
    for ma, mc in zip(a, c, strict=True):
        for key in COMPARED:
            assert mc[key] == pytest.approx(ma[key], rel=1e-5, abs=1e-7), (ma["step"], key)


def test_a_third_party_transport_has_its_engine_side(ray_session, base_config) -> None:  # noqa: F811
    """A transport defined outside slime_std (``tests.ray_transport_plugin``) gets its engine
    side in the engine actor through the record (the actor's one generic entry): the weights
    it delivers are byte-identical to rank 0's (``weights.verify``)."""
    cfg = ray_config(base_config,
                     run={"num_rollouts": 1, "plugin_modules": [RAY_PLUGINS, TRANSPORT_PLUGIN]},
                     weights={"transport": "via_files", "verify": True})
    run_dir = run(cfg)
    m = read_metrics(run_dir)
    assert [x["step"] for x in m] == [1] and m[0]["perf/weight_sync_verified"] == 1.0
    marks = [p.name.split("-") for p in (run_dir / "via_files").iterdir() if "-" in p.name]
    trainer = {pid for kind, pid, _ in marks if kind == "trainer"}
    engine = {pid for kind, pid, _ in marks if kind == "engine"}
    built = [pid for kind, pid, _ in marks if kind == "built"]
    # versions 0 (before the first rollout) and 1, sent by rank 0, loaded in the one engine
    # actor's process (not the trainer's, not the driver's), whose engine side was built once
    assert sorted(v for kind, _, v in marks if kind == "engine") == ["v0", "v1"]
    assert len(trainer) == 1 and len(engine) == 1 and built == list(engine)
    assert not engine & trainer and str(os.getpid()) not in engine | trainer


def test_async_one_step_off_records_staleness(ray_session, base_config) -> None:  # noqa: F811
    cfg = ray_config(base_config, run={"num_rollouts": 3, "async_rollout": True,
                                       "max_staleness": 1},
                     rollout={"reward": "digit_fraction"}, weights={"transport": "ray"})
    obs = Observer()
    m = read_metrics(run(cfg, [obs]))
    assert [x["step"] for x in m] == [1, 2, 3]
    # rollout k+1 is generated with version k while step k trains: staleness 1 after step 1;
    # every sample of a step has one version (no weight change in the middle of a generation)
    assert obs.versions == {0: [0] * 8, 1: [0] * 8, 2: [1] * 8}
    assert [x["rollout/staleness_max"] for x in m] == [0.0, 1.0, 1.0]
    assert all(x["rollout/stale_dropped"] == 0.0 and "perf/rollout_wait_time" in x for x in m)


def test_fully_async_generates_in_the_rollout_manager_actor(ray_session, base_config) -> None:  # noqa: F811
    cfg = ray_config(base_config, run={"num_rollouts": 3, "rollout_mode": "fully_async",
                                       "max_staleness": 2, "save_interval": 2},
                     rollout={"reward": "digit_fraction"}, weights={"transport": "ray"},
                     algorithm={"is_correction": "tis"})
    obs = Observer()
    run_dir = run(cfg, [obs])
    m = read_metrics(run_dir)
    assert [x["step"] for x in m] == [1, 2, 3]
    for step, versions in obs.versions.items():  # recorded by the engines, never ahead
        assert versions and all(0 <= v <= step for v in versions)
    assert all(x["rollout/held_groups_max"] <= 4 and x["rollout/staleness_max"] <= 2 for x in m)
    # the checkpoint holds the generator's buffer and partials, read from the actor
    assert (run_dir / "checkpoints" / "step_000002" / "fully_async.json").is_file()


def test_fully_async_rollout_buffer_in_the_rollout_manager_actor(ray_session,  # noqa: F811
                                                                 base_config) -> None:
    """The buffer service and the agent API live in the rollout manager's actor, where the
    generator polls and pauses them; the workers (threads here) reach them by address."""
    from tests.agent_support import free_port, start_workers

    port = free_port()
    cfg = ray_config(base_config, run={"num_rollouts": 3, "rollout_mode": "fully_async",
                                       "max_staleness": 2},
                     algorithm={"is_correction": "tis"},
                     data={"source": "rollout_buffer", "eval_path": ""},
                     rollout_buffer={"port": port, "token": "buffer-token", "timeout_s": 60})
    workers, threads, stop = start_workers(f"http://127.0.0.1:{port}", "buffer-token", 2)
    try:
        run_dir = run(cfg, selected=("slime_grpo", "core_tools"))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
    m = [x for x in read_metrics(run_dir) if "train/loss" in x]
    assert [x["step"] for x in m] == [1, 2, 3]
    for x in m:
        assert x["rollout/samples"] == 8 and x["rollout/staleness_max"] <= 2
        assert x["rollout/buffer_groups"] + x["rollout/inflight_groups"] <= 4
        assert "rollout_buffer/open_groups" in x
    assert sum(w.done for w in workers) >= 3 * 2 * 4


def test_fully_async_agent_episodes_are_held_in_the_rollout_manager_actor(  # noqa: F811
        ray_session, base_config) -> None:
    """``agent.entrypoint`` episodes run in the rollout manager actor, where the agent API
    lives: the generator's pause fires ``slime_hold_rollouts`` there, so a weight update
    suspends the episodes it catches and they go on with the new weights (two versions in a
    sample; unheld, the pause would wait for them: this engine sleeps before it generates,
    so the aborts miss its calls and each sample has one version), none restarts.
    Episodes of the later groups wait after their first answer for the resume that follows
    an update (``agent_waits_for_update``), so one spans it however slow the machine is."""
    cfg = ray_config(base_config, run={"num_rollouts": 3, "rollout_mode": "fully_async",
                                       "max_staleness": 3, "async_buffer_groups": 2,
                                       "save_interval": 2},
                     rollout={"engine": "slow_local", "batch_size": 1,
                              "n_samples_per_prompt": 2},
                     ray_test={"delay_s": 0.25, "agent_waits_for_update": True},
                     data={"eval_path": ""}, algorithm={"is_correction": "tis"},
                     agent={"entrypoint": "tests.held_agent:rollout", "timeout_s": 120})
    trained: list[Any] = []

    class Trained:
        @hookimpl
        def slime_log_rollout(self, config, rollout_id, samples, metrics):
            trained.extend(samples)

    run_dir = run(cfg, [Trained()], selected=("slime_grpo", "slime_agent"))
    samples = trained
    assert [x["step"] for x in read_metrics(run_dir)] == [1, 2, 3]
    assert len(samples) == 3 * 2 and len({s.group_index for s in samples}) == 3
    for s in samples:  # each episode ran once, to its end, no answer aborted
        assert s.metadata["attempts"] == 1 and s.metadata["aborted_answers"] == 0, s.metadata
        assert len(s.metadata["finish_reasons"]) == 3
    assert any(len(s.weight_versions) > 1 for s in samples), [s.weight_versions for s in samples]
