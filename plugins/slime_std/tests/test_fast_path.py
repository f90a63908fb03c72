"""The fast path's ``auto`` keys resolve as documented: on for CUDA, off on the CPU; compilation
only where the run is long enough to repay it; a key the user set is never changed; the
default plugins that own the keys resolve them when a run's config is resolved."""

from __future__ import annotations

from slime_core.context import print_config_notices
from slime_core.pluginmgr import PluginSelection
from slime_core.session import resolve
from slime_core.testing import build_test_config
from slime_hookspecs import AcceleratorRecord
from slime_std import fast_path as fast_defaults
from slime_std.fast_path import COMPILE_DECODE_MIN_TOKENS, TRAIN_COMPILE_MIN_STEPS

# What the resolution reads of a record: its device type and whether it captures graphs.
RECORDS = {
    "cpu": AcceleratorRecord(name="cpu", factory=object, device_type="cpu"),
    "cuda": AcceleratorRecord(name="cuda", factory=object, device_type="cuda",
                              graph_capture=True),
}


def _resolved(device: str, **sections: dict) -> tuple[object, dict[str, object]]:
    config = build_test_config(**sections)
    choices = fast_defaults.resolve(config, RECORDS[device])
    return config, {c.key: c.value for c in choices}


def test_the_defaults_are_auto():
    config = build_test_config()
    assert (config.rollout.cuda_graphs, config.rollout.compile_decode,
            config.train.compile) == ("auto", "auto", "auto")


def test_cpu_keeps_every_fast_path_key_off():
    config, chosen = _resolved("cpu")
    assert chosen["rollout.cuda_graphs"] is False
    assert chosen["rollout.compile_decode"] is False
    assert chosen["train.compile"] is False
    assert chosen["train.cuda_graphs"] is False
    assert config.rollout.cuda_graphs is False and config.train.compile is False
    assert chosen["rollout.decode_attention"] == "sdpa"
    assert chosen["rollout.sample_kernel"] == chosen["train.head_kernel"] == "torch"


def test_cuda_takes_graphs_and_skips_compiling_a_short_run():
    _, chosen = _resolved("cuda", run={"num_rollouts": 10}, rollout={"max_new_tokens": 64})
    assert chosen["rollout.cuda_graphs"] is True
    assert chosen["rollout.compile_decode"] is False
    assert chosen["train.compile"] is False


def test_cuda_compiles_what_a_long_run_repays():
    steps = TRAIN_COMPILE_MIN_STEPS
    new = -(-COMPILE_DECODE_MIN_TOKENS // steps)
    config, chosen = _resolved("cuda", run={"num_rollouts": steps},
                               rollout={"max_new_tokens": new})
    assert chosen["rollout.compile_decode"] is True and chosen["train.compile"] is True
    # one decode step and one optimizer step fewer: below both thresholds
    _, chosen = _resolved("cuda", run={"num_rollouts": steps - 1},
                          rollout={"max_new_tokens": (COMPILE_DECODE_MIN_TOKENS - 1) // steps})
    assert chosen["rollout.compile_decode"] is False and chosen["train.compile"] is False


def test_training_graphs_where_the_products_use_tensor_cores_and_nothing_excludes_them():
    def graphs(**sections: dict) -> object:
        return _resolved("cuda", run={"num_rollouts": 10, **sections.pop("run", {})},
                         **sections)[1]["train.cuda_graphs"]

    assert graphs() is True  # model.dtype auto: bf16 on a GPU
    assert graphs(model={"dtype": "bfloat16"}) is True
    assert graphs(model={"dtype": "float32"}) is False  # FFMA-bound: no gain measured
    assert graphs(model={"dtype": "float32"}, run={"matmul_precision": "high"}) is True
    assert graphs(train={"compile": True}) is False  # beside compile: only when asked
    assert graphs(run={"num_rollouts": TRAIN_COMPILE_MIN_STEPS}) is False  # compile resolved on
    assert graphs(train={"gradient_checkpointing": True}) is False
    assert graphs(train={"fused_head": False}) is False
    assert graphs(train={"moe_aux_loss_coef": 0.01}) is False
    assert graphs(train={"routing_replay": "rollout"}) is False


def test_a_key_the_user_set_is_kept_and_not_reported():
    config, chosen = _resolved("cuda", rollout={"cuda_graphs": False}, train={"compile": True})
    assert config.rollout.cuda_graphs is False and config.train.compile is True
    assert "rollout.cuda_graphs" not in chosen and "train.compile" not in chosen
    assert chosen["rollout.compile_decode"] is False  # no graphs, no compiled step


def test_another_engine_gets_no_local_engine_graphs():
    config, chosen = _resolved("cuda", rollout={"engine": "vllm"})
    assert chosen["rollout.cuda_graphs"] is False
    assert "rollout.decode_attention" not in chosen  # the local engine's key stays auto
    assert config.rollout.decode_attention == "auto"


def test_a_device_without_graph_capture_stays_off_whatever_its_name():
    record = AcceleratorRecord(name="npu", factory=object, device_type="npu")
    config = build_test_config(run={"num_rollouts": 10**6})
    chosen = {c.key: c.value for c in fast_defaults.resolve(config, record)}
    assert chosen["rollout.cuda_graphs"] is False and chosen["train.compile"] is False
    assert chosen["rollout.decode_attention"] == "sdpa"  # triton kernels need a CUDA device


def test_autotune_asks_for_the_compiled_step():
    _, chosen = _resolved("cuda", rollout={"compile_autotune": True})
    assert chosen["rollout.compile_decode"] is True


def test_every_choice_prints_its_value_and_reason():
    config = build_test_config()
    lines = [c.line() for c in fast_defaults.resolve(config, RECORDS["cpu"])]
    assert "auto: rollout.cuda_graphs = false (cpu does not capture graphs)" in lines
    assert any(line.startswith("auto: train.compile = false (") for line in lines)
    assert fast_defaults.resolve(config, RECORDS["cpu"]) == []  # resolved once: nothing auto is left


def test_the_owning_default_plugins_resolve_their_keys_with_the_config(capsys):
    manager, config = resolve(PluginSelection(plugins=[]), data={"run": {"accelerator": "cpu"}})
    assert config.rollout.cuda_graphs is False and config.rollout.decode_attention == "sdpa"
    assert config.train.compile is False and config.train.head_kernel == "torch"
    # the lines wait for the driver (after the config's checks), then print once
    assert "auto:" not in capsys.readouterr().err
    print_config_notices(manager)
    print_config_notices(manager)
    err = capsys.readouterr().err
    assert err.count("auto: rollout.cuda_graphs = false (cpu does not capture graphs)") == 1
    assert err.count("auto: train.compile = false") == 1


def test_a_disabled_owner_leaves_its_keys_auto():
    _, config = resolve(PluginSelection(plugins=[], disabled=["local_engine"]),
                        data={"run": {"accelerator": "cpu"}, "rollout": {"engine": "replay"}},
                        check_names=False)
    assert config.rollout.cuda_graphs == "auto" and config.rollout.decode_attention == "auto"
    assert config.train.compile is False  # torch_trainer's keys still resolve


def test_reward_processes_take_half_the_cores_beside_a_gpu_only(monkeypatch):
    monkeypatch.setattr(fast_defaults.os, "sched_getaffinity", lambda pid: set(range(16)))
    config = build_test_config()
    assert config.rollout.reward_processes == "auto"
    chosen = {c.key: c for c in fast_defaults.resolve_rewards(config, RECORDS["cuda"])}
    assert chosen["rollout.reward_processes"].value == 8 == config.rollout.reward_processes
    assert "16 cores" in chosen["rollout.reward_processes"].reason
    monkeypatch.setattr(fast_defaults.os, "sched_getaffinity", lambda pid: set(range(6)))
    config = build_test_config()
    assert [c.value for c in fast_defaults.resolve_rewards(config, RECORDS["cuda"])] == [3]
    monkeypatch.setattr(fast_defaults.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    config = build_test_config()
    assert [c.value for c in fast_defaults.resolve_rewards(config, RECORDS["cuda"])] == [0]
    # on the CPU the training's threads have the cores, whatever their number
    monkeypatch.setattr(fast_defaults.os, "sched_getaffinity", lambda pid: set(range(64)))
    config = build_test_config()
    assert [c.value for c in fast_defaults.resolve_rewards(config, RECORDS["cpu"])] == [0]
    # a value the user set stays
    config = build_test_config(rollout={"reward_processes": 2})
    assert fast_defaults.resolve_rewards(config, RECORDS["cuda"]) == []
    assert config.rollout.reward_processes == 2


def test_unresolved_reward_processes_score_on_the_rollouts_thread():
    from slime_core.rewards.routing import RewardFunctions

    config = build_test_config()
    assert config.rollout.reward_processes == "auto"  # no rewards plugin resolved it
    assert RewardFunctions(manager=None, config=config).processes is None


def test_host_memory_is_retained_where_the_training_runs_on_the_cpu(monkeypatch):
    """On the CPU the training's tensors live in host memory and each step would page-fault
    fresh pages; beside a GPU (or an NPU) it stays off, and where the C library is not glibc
    there is nothing to tell."""
    import slime_core.api

    monkeypatch.setattr(slime_core.api, "can_retain_host_memory", lambda: True)
    assert _resolved("cpu")[1]["run.retain_host_memory"] is True
    assert _resolved("cuda")[1]["run.retain_host_memory"] is False
    npu = AcceleratorRecord(name="npu", factory=object, device_type="npu")
    assert {c.key: c.value for c in fast_defaults.resolve(build_test_config(), npu)}[
        "run.retain_host_memory"] is False
    config, chosen = _resolved("cpu", run={"retain_host_memory": False})  # the user's: kept
    assert "run.retain_host_memory" not in chosen and config.run.retain_host_memory is False
    monkeypatch.setattr(slime_core.api, "can_retain_host_memory", lambda: False)
    choices = fast_defaults.resolve(build_test_config(), RECORDS["cpu"])
    assert ("auto: run.retain_host_memory = false (the C library is not glibc)"
            in [c.line() for c in choices])


def test_packed_weights_are_a_cpus_where_onednn_takes_the_dtype():
    import torch

    config, chosen = _resolved("cpu")
    assert chosen["rollout.packed_weights"] is torch.backends.mkldnn.is_available()
    assert config.rollout.packed_weights is chosen["rollout.packed_weights"]
    assert _resolved("cuda")[1]["rollout.packed_weights"] is False
    assert _resolved("cpu", rollout={"dtype": "float16"})[1]["rollout.packed_weights"] is False
    # a value the user set is kept
    assert "rollout.packed_weights" not in _resolved("cpu", rollout={"packed_weights": False})[1]


def test_a_head_dim_the_decode_attention_cannot_take_resolves_to_sdpa(monkeypatch, tmp_path):
    """``auto`` reads the model's head dim from its ``config.json``: where the Triton kernel
    cannot take it, ``sdpa`` (so ``config.toml`` records what runs); a model directory that
    does not say keeps ``triton`` (the engine checks the loaded model again)."""
    import json

    monkeypatch.setattr(fast_defaults, "_kernels", lambda device_type: (True, "triton runs"))
    small = tmp_path / "small"
    small.mkdir()
    (small / "config.json").write_text(json.dumps({"hidden_size": 32,
                                                   "num_attention_heads": 4}))
    _, chosen = _resolved("cuda", model={"path": str(small)})
    assert chosen["rollout.decode_attention"] == "sdpa"
    assert chosen["rollout.sample_kernel"] == "triton"  # the sampler has no head dim
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4,
                                                  "head_dim": 128}))
    _, chosen = _resolved("cuda", model={"path": str(wide)})
    assert chosen["rollout.decode_attention"] == "triton"
    _, chosen = _resolved("cuda", model={"path": str(tmp_path / "missing")})
    assert chosen["rollout.decode_attention"] == "triton"


def test_the_common_prefix_is_computed_apart_on_a_cpu():
    config, chosen = _resolved("cpu")
    assert chosen["rollout.common_prefix"] is True and config.rollout.common_prefix is True
    assert _resolved("cuda")[1]["rollout.common_prefix"] is False
    assert "rollout.common_prefix" not in _resolved("cpu", rollout={"common_prefix": False})[1]
