"""``core slime-import``: a slime-style launch script -> TOML that ``core run`` runs."""

from pathlib import Path

import pytest
from run_support import ARITH, calls, core, metrics

from slime_compat.importer import parse_script, read_script, to_config

# the shape of slime's scripts/models/*.sh: one array of Megatron architecture flags
MODEL = r"""MODEL_ARGS=(
   --swiglu
   --num-layers 36
   --rotary-base "${MODEL_ARGS_ROTARY_BASE:-1000000}"
   --qk-layernorm
)
"""

# the shape of slime's scripts/run-*.sh: flag arrays, a sourced model file, ray job submit
SCRIPT = r"""#!/bin/bash
set -ex
NUM_GPUS=${NUM_GPUS:-8}
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${SCRIPT_DIR}/models/qwen3-4B.sh"
source ~/.no-such-rc-file
CKPT_ARGS=(
   --hf-checkpoint /root/Qwen3-4B
   --ref-load /root/Qwen3-4B_torch_dist
   --save-interval 20
)
ROLLOUT_ARGS=(
   --prompt-data /root/dapo-math-17k/dapo-math-17k.jsonl
   --input-key prompt
   --label-key label
   --apply-chat-template
   --apply-chat-template-kwargs '{"enable_thinking": false}'
   --rollout-max-prompt-len 2048
   --rollout-max-context-len 10240
   --eval-max-prompt-len 1024
   --rollout-shuffle
   --rm-type deepscaler
   --num-rollout ${NUM_ROLLOUT}
   --rollout-batch-size ${RBS:-32}
   --n-samples-per-prompt 8
   --rollout-max-response-len 8192
   --rollout-temperature 1
   --global-batch-size 128
   --balance-data
)
GRPO_ARGS=(
   --advantage-estimator grpo
   --use-kl-loss
   --kl-loss-coef 0.00
   --kl-loss-type low_var_kl
   --eps-clip 0.2
   --eps-clip-high 0.28
   # --use-tis
)
OPTIMIZER_ARGS=(
   --optimizer adam
   --lr 1e-6
   --adam-beta1 0.9
   --adam-beta2 0.98
)
CUSTOM_ARGS=(
   --custom-rm-path slime_user.arith_rm.custom_rm
)
ray job submit --address="http://127.0.0.1:8265" \
   -- python3 train.py \
   --actor-num-gpus-per-node ${NUM_GPUS} \
   --tensor-model-parallel-size 2 \
   ${MODEL_ARGS[@]} ${CKPT_ARGS[@]} ${ROLLOUT_ARGS[@]} ${GRPO_ARGS[@]} ${OPTIMIZER_ARGS[@]} ${CUSTOM_ARGS[@]}
"""


def _write(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "qwen3-4B.sh").write_text(MODEL)
    script = tmp_path / "run-qwen3-4B.sh"
    script.write_text(SCRIPT)
    return script


def test_sourced_model_file_is_followed(tmp_path: Path) -> None:
    sc = read_script(_write(tmp_path))
    assert sc.sourced == [tmp_path / "models" / "qwen3-4B.sh"]
    assert sc.unresolved == ["~/.no-such-rc-file"]
    names = [f for f, _ in parse_script(sc.text)]
    assert {"swiglu", "num-layers", "rotary-base", "qk-layernorm"} <= set(names)
    # a path that does not resolve here: the file given with --source stands in for it
    (tmp_path / "elsewhere").mkdir()
    given = tmp_path / "elsewhere" / "qwen3-4B.sh"  # same name: it stands in for that source line
    given.write_text("MODEL_ARGS=( --num-layers 2 --vocab-size 64 )\n")
    (tmp_path / "models" / "qwen3-4B.sh").unlink()
    sc = read_script(tmp_path / "run-qwen3-4B.sh", [given])
    assert sc.unresolved == ["~/.no-such-rc-file"]  # qwen3-4B.sh is covered by --source
    assert ("vocab-size", "64") in parse_script(sc.text)
    # slime's root-relative form (source scripts/models/X.sh, run from the checkout's root)
    (tmp_path / "scripts" / "models").mkdir(parents=True)
    (tmp_path / "scripts" / "models" / "m.sh").write_text(MODEL)
    sub = tmp_path / "scripts" / "run.sh"
    sub.write_text('source "/root/slime/scripts/models/m.sh"\npython3 train.py ${MODEL_ARGS[@]}\n')
    assert read_script(sub).sourced == [tmp_path / "scripts" / "models" / "m.sh"]


def test_translation_table(tmp_path: Path) -> None:
    flags = parse_script(read_script(_write(tmp_path)).text)
    names = [f for f, _ in flags]
    assert "use-tis" not in names and "address" not in names  # comments and ray's own flags
    tr = to_config(flags)
    c = tr.config
    assert c["model"]["path"] == "/root/Qwen3-4B" and "num_rollouts" not in c["run"]
    assert c["rollout"]["batch_size"] == 32  # ${RBS:-32}: bash's default
    assert c["rollout"]["reward"] == "deepscaler" and c["rollout"]["max_new_tokens"] == 8192
    assert c["train"]["adam_betas"] == [0.9, 0.98] and c["train"]["num_steps_per_rollout"] == 2
    assert c["algorithm"]["kl_estimator"] == "low_var_kl" and c["algorithm"]["eps_clip_high"] == 0.28
    assert c["algorithm"]["numerics"] == "slime"  # a slime script: slime's conventions
    assert c["slime"]["custom_rm_path"] == "slime_user.arith_rm.custom_rm"
    # Qwen3's thinking switch (a quoted JSON value in the array) and the prompt length filter
    assert c["data"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert c["data"]["max_prompt_len"] == 2048
    assert c["rollout"]["max_context_len"] == 10240 and c["eval"]["max_prompt_len"] == 1024
    dropped = {f: reason for f, _, reason in tr.dropped}
    assert set(dropped) == {"ref-load", "balance-data", "optimizer", "actor-num-gpus-per-node",
                            "tensor-model-parallel-size", "num-rollout", "swiglu", "num-layers",
                            "rotary-base", "qk-layernorm"}
    assert "shell variable" in dropped["num-rollout"] and "--set num-rollout=" in dropped["num-rollout"]
    # an unmapped flag names its own reason, not the variable in its value
    assert dropped["actor-num-gpus-per-node"].startswith("cluster layout")
    assert dropped["rotary-base"].startswith("model architecture")
    # --set supplies the variable: translated, and no longer listed as dropped
    tr = to_config(flags + [("num-rollout", "7")])
    assert tr.config["run"]["num_rollouts"] == 7 and "num-rollout" not in {f for f, _, _ in tr.dropped}


def test_imported_config_runs(tmp_path: Path) -> None:
    script, out, log = _write(tmp_path), tmp_path / "imported.toml", tmp_path / "calls.jsonl"
    proc = core(["slime-import", str(script), "-o", str(out), "--model-path", str(ARITH / "model"),
                 "--set", f"prompt-data={ARITH / 'train.jsonl'}", "--set", "rm-type=exact",
                 "--set", "num-rollout=5", "--set", f"eval-prompt-data=arith {ARITH / 'eval.jsonl'}",
                 # the tiny model's prompts are 4-6 tokens: 5 drops the 6-token ones at load
                 "--set", "rollout-max-prompt-len=5"], log)
    assert "not translated:" in proc.stdout and "--tensor-model-parallel-size" in proc.stdout
    assert "--num-layers" in proc.stdout and "(sourced)" in proc.stdout  # from the model file
    assert "--num-rollout " not in proc.stdout  # given with --set
    text = out.read_text()
    assert "num_rollouts = 5" in text and f'eval_path = "{ARITH / "eval.jsonl"}"' in text
    assert 'chat_template_kwargs = {"enable_thinking" = false}' in text and "max_prompt_len = 5" in text
    run_dir = tmp_path / "run"
    proc = core(["run", "--plugins", "slime_grpo,slime_compat", "--config", str(out),
          "-o", "run.num_rollouts=1", "-o", "rollout.batch_size=2", "-o", "rollout.n_samples_per_prompt=4",
          "-o", "rollout.max_new_tokens=8", "-o", "train.num_steps_per_rollout=1",
          "-o", f"run.run_dir={run_dir}", "-o", "run.progress=false", "-o", 'run.loggers=["jsonl"]'], log)
    assert len(metrics(run_dir)) == 1
    assert sum(c["fn"] == "custom_rm" for c in calls(log)) == 8  # the imported --custom-rm-path ran
    # --rollout-max-prompt-len: the 7927 six-token prompts of 9800 were dropped, and said so
    assert "data.max_prompt_len = 5: dropped 7927 of 9800 prompts" in proc.stderr
    rm = [c for c in calls(log) if c["fn"] == "custom_rm"]
    assert all(c["prompt_len"] <= 5 for c in rm) and {c["rollout_max_prompt_len"] for c in rm} == {5}
    assert all(c["apply_chat_template_kwargs"] == {"enable_thinking": False} for c in rm)


def test_chat_template_kwargs_and_prompt_len_reach_the_config_and_args(tmp_path: Path) -> None:
    from slime_compat.args import build_args
    from slime_compat.importer import write_toml
    from slime_core.config import load_config
    from slime_core.config.schema import build_schema
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    tr = to_config([("apply-chat-template-kwargs", '{"enable_thinking": false, "n": {"k": [1]}}'),
                    ("rollout-max-prompt-len", "512")])
    assert not tr.dropped and tr.config["data"] == {
        "chat_template_kwargs": {"enable_thinking": False, "n": {"k": [1]}}, "max_prompt_len": 512}
    # an unquoted value the shell split into words is joined back
    tr2 = to_config([("apply-chat-template-kwargs", '{"enable_thinking":\0false}')])
    assert tr2.config["data"]["chat_template_kwargs"] == {"enable_thinking": False}
    # the TOML it writes loads into the typed [data] section, and slime code sees both in args
    out = tmp_path / "c.toml"
    write_toml(tr.config, out)
    import tomllib

    manager = SlimePluginManager(PluginSelection(plugins=["slime_grpo", "slime_compat"])).load()
    config = load_config(build_schema(manager), data=tomllib.loads(out.read_text()))
    assert config.data.chat_template_kwargs == {"enable_thinking": False, "n": {"k": [1]}}
    assert config.data.max_prompt_len == 512
    args = build_args(config)
    assert args.apply_chat_template_kwargs == {"enable_thinking": False, "n": {"k": [1]}}
    assert args.rollout_max_prompt_len == 512
    # slime's "no filter" is None, ours 0
    off = load_config(build_schema(manager), data={})
    assert build_args(off).rollout_max_prompt_len is None and build_args(off).apply_chat_template_kwargs == {}
    # 0 would drop every prompt in slime: named as not translated, with the reason
    (flag, _, reason), = to_config([("rollout-max-prompt-len", "0")]).dropped
    assert flag == "rollout-max-prompt-len" and "every prompt" in reason


@pytest.mark.parametrize("value, words", [
    ("{enable_thinking: false}", ["--apply-chat-template-kwargs", "not JSON", "column 2"]),
    ('["enable_thinking"]', ["--apply-chat-template-kwargs", "expected a JSON object", "list"]),
    ('{"a": {"b": null}}', ["--apply-chat-template-kwargs.a.b is null", "TOML"]),
])
def test_bad_chat_template_kwargs_stop_the_import_naming_the_flag(value: str, words: list[str]) -> None:
    from slime_compat.importer import FlagError

    with pytest.raises(FlagError) as err:
        to_config([("apply-chat-template-kwargs", value)])
    assert all(w in str(err.value) for w in words), str(err.value)


def test_bad_chat_template_kwargs_fail_the_command(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script, out = tmp_path / "run.sh", tmp_path / "run.toml"
    script.write_text("ARGS=(\n   --apply-chat-template-kwargs '{enable_thinking: false}'\n)\n"
                      "python3 train.py ${ARGS[@]}\n")
    proc = subprocess.run([sys.executable, "-m", "slime_core", "slime-import", str(script),
                           "-o", str(out)], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode != 0 and not out.exists()
    assert "--apply-chat-template-kwargs" in proc.stderr and "not JSON" in proc.stderr
    # --set keeps a JSON value whole (shell-style splitting would eat its quotes)
    good = subprocess.run([sys.executable, "-m", "slime_core", "slime-import", str(script),
                           "-o", str(out), "--set",
                           'apply-chat-template-kwargs={"enable_thinking": false}'],
                          capture_output=True, text=True, env=dict(os.environ))
    assert good.returncode == 0, good.stderr
    assert 'chat_template_kwargs = {"enable_thinking" = false}' in out.read_text()


def test_megatron_backend_translates_the_parallelism_flags(tmp_path: Path) -> None:
    flags = parse_script(read_script(_write(tmp_path)).text) + [
        ("use-distributed-optimizer", None), ("sequence-parallel", None),
        ("recompute-granularity", "full"), ("recompute-method", "uniform"),
        ("recompute-num-layers", "2"), ("pipeline-model-parallel-size", "1")]
    tr = to_config(flags, backend="megatron")
    c = tr.config
    assert c["train"]["backend"] == "megatron" and c["train"]["num_ranks"] == 2
    assert c["megatron"] == {"tensor_model_parallel_size": 2, "use_distributed_optimizer": True,
                             "recompute": "full", "recompute_num_layers": 2,
                             "pipeline_model_parallel_size": 1}
    dropped = {f: reason for f, _, reason in tr.dropped}
    assert "tensor-model-parallel-size" not in dropped
    assert "TransformerEngine" in dropped["sequence-parallel"]
    assert any("train.num_ranks = 2" in w for w in tr.warnings)
    # a value the backend has no counterpart for is named, not silently mapped
    tr = to_config([("recompute-method", "block")], backend="megatron")
    assert "only uniform" in {f: r for f, _, r in tr.dropped}["recompute-method"]
    # the torch backend (the default) keeps them all dropped, with the reason
    assert "tensor-model-parallel-size" in {f for f, _, _ in to_config(flags).dropped}


def test_imported_megatron_config_runs_on_two_ranks(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("megatron_backend")
    script, out, log = _write(tmp_path), tmp_path / "imported.toml", tmp_path / "calls.jsonl"
    proc = core(["slime-import", str(script), "-o", str(out), "--model-path", str(ARITH / "model"),
                 "--backend", "megatron",
                 "--set", f"prompt-data={ARITH / 'train.jsonl'}", "--set", "rm-type=exact",
                 "--set", "num-rollout=1"], log)
    assert "--tensor-model-parallel-size" not in proc.stdout
    text = out.read_text()
    assert "--plugins slime_grpo,slime_compat,megatron_backend" in text
    assert 'backend = "megatron"' in text and "tensor_model_parallel_size = 2" in text
    run_dir = tmp_path / "run"
    core(["run", "--plugins", "slime_grpo,slime_compat,megatron_backend", "--config", str(out),
          "-o", "rollout.batch_size=2", "-o", "rollout.n_samples_per_prompt=4",
          "-o", "rollout.max_new_tokens=8", "-o", "train.num_steps_per_rollout=1",
          "-o", f"run.run_dir={run_dir}", "-o", "run.progress=false", "-o", 'run.loggers=["jsonl"]'], log)
    assert len(metrics(run_dir)) == 1
    assert sum(c["fn"] == "custom_rm" for c in calls(log)) == 8


# the PPO block of a slime script (scripts/run-*-ppo.sh): slime's "ppo" estimator is GAE with a
# critic, which slime_ppo registers as "gae"
PPO_SCRIPT = r"""#!/bin/bash
PPO_ARGS=(
   --advantage-estimator ppo
   --gamma 1.0
   --lambd 0.95
   --value-clip 0.5
   --critic-lr 1e-5
   --num-critic-only-steps 0
   --critic-lr-warmup-iters 5
   --custom-rm-path slime_user.arith_rm.custom_rm
)
python3 train.py ${PPO_ARGS[@]}
"""


def test_slime_ppo_is_gae_with_a_critic() -> None:
    tr = to_config([("advantage-estimator", "ppo"), ("critic-lr", "1e-5"),
                    ("num-critic-only-steps", "2"), ("critic-lr-warmup-iters", "5")])
    assert tr.config["algorithm"]["advantage_estimator"] == "gae"
    assert tr.config["ppo"] == {"critic_lr": 1e-5, "num_critic_only_steps": 2}
    assert "constant" in {f: r for f, _, r in tr.dropped}["critic-lr-warmup-iters"]
    # the other estimators keep slime's names, which are the records' names here
    assert to_config([("advantage-estimator", "gspo")]).config["algorithm"]["advantage_estimator"] == "gspo"


def test_imported_ppo_script_runs_a_step_with_a_critic(tmp_path: Path) -> None:
    script, out, log = tmp_path / "run-ppo.sh", tmp_path / "ppo.toml", tmp_path / "calls.jsonl"
    script.write_text(PPO_SCRIPT)
    core(["slime-import", str(script), "-o", str(out), "--model-path", str(ARITH / "model"),
          "--set", f"prompt-data={ARITH / 'train.jsonl'}", "--set", "num-rollout=1"], log)
    text = out.read_text()
    assert 'advantage_estimator = "gae"' in text
    plugins = "slime_grpo,slime_compat,slime_ppo"
    assert f"# run: core run --plugins {plugins} " in text
    run_dir = tmp_path / "run"
    core(["run", "--plugins", plugins, "--config", str(out),
          "-o", "rollout.batch_size=2", "-o", "rollout.n_samples_per_prompt=2",
          "-o", "rollout.max_new_tokens=8", "-o", "train.num_steps_per_rollout=1",
          "-o", f"run.run_dir={run_dir}", "-o", "run.progress=false", "-o", 'run.loggers=["jsonl"]'], log)
    (row,) = metrics(run_dir)
    assert "train/value_loss" in row and "train/critic_grad_norm" in row  # the critic trained
    assert sum(c["fn"] == "custom_rm" for c in calls(log)) == 4


def test_ref_load_ref_update_interval_and_keep_old_actor(tmp_path: Path) -> None:
    hf = tmp_path / "ref_hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    tr = to_config([("ref-load", str(hf)), ("ref-update-interval", "10"), ("keep-old-actor", None)])
    assert tr.config["model"]["ref_path"] == str(hf)
    assert tr.config["train"]["ref_update_interval"] == 10
    assert tr.config["train"]["keep_old_actor"] is True
    # slime's usual --ref-load: the Megatron conversion of the initial policy, dropped with why
    tr = to_config([("ref-load", "/root/Qwen3-4B_torch_dist")])
    (flag, _, why), = tr.dropped
    assert flag == "ref-load" and "not a Hugging Face model directory" in why
    assert "ref_path" not in tr.config.get("model", {})


def test_use_rollout_routing_replay() -> None:
    assert to_config([("use-rollout-routing-replay", None)]).config["train"]["routing_replay"] \
        == "rollout"


def test_delta_weight_sync_flags_map_onto_the_disk_transport() -> None:
    """slime's --update-weight-mode delta (disk only) is weights.delta with the encoding,
    whichever flag comes first; the post-write path stays slime's function, called from
    slime_after_weights_written for every directory written (full or delta)."""
    flags = [("update-weight-delta-encoding", "overwrite"), ("update-weight-mode", "delta"),
             ("update-weight-transport", "disk"), ("update-weight-disk-dir", "/mnt/deltas"),
             ("update-weight-delta-checksum", "xxh3-128"),
             ("custom-update-weight-post-write-path", "my_hooks.commit")]
    tr = to_config(flags)
    assert tr.config["weights"] == {"delta": "overwrite", "transport": "disk",
                                    "dir": "/mnt/deltas"}
    assert tr.config["slime"]["custom_update_weight_post_write_path"] == "my_hooks.commit"
    assert [f for f, _, _ in tr.dropped] == ["update-weight-delta-checksum"]
    # slime's defaults: xor, and delta mode implies the disk transport
    assert to_config([("update-weight-mode", "delta")]).config["weights"] == {
        "delta": "xor", "transport": "disk"}
    assert to_config([("update-weight-mode", "full"),
                      ("update-weight-delta-encoding", "xor")]).config["weights"] == {
        "delta": "off"}
    bad = to_config([("update-weight-transport", "nccl"), ("update-weight-mode", "fast")])
    reasons = {f: r for f, _, r in bad.dropped}
    assert "weights.transport = 'broadcast'" in reasons["update-weight-transport"]
    assert "'fast' is not full or delta" in reasons["update-weight-mode"]
