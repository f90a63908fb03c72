"""``core slime-import``: a slime-style launch script -> TOML that ``core run`` runs."""

from pathlib import Path

from run_support import ARITH, calls, core, metrics

from slime_compat.importer import parse_script, to_config

# the shape of slime's scripts/run-*.sh: flag arrays, a sourced model file, ray job submit
SCRIPT = r"""#!/bin/bash
set -ex
NUM_GPUS=${NUM_GPUS:-8}
CKPT_ARGS=(
   --hf-checkpoint /root/Qwen3-4B
   --ref-load /root/Qwen3-4B_torch_dist
   --save-interval 20
)
ROLLOUT_ARGS=(
   --prompt-data /root/dapo-math-17k/dapo-math-17k.jsonl
   --input-key prompt
   --label-key label
   --rollout-shuffle
   --rm-type deepscaler
   --num-rollout 3000
   --rollout-batch-size 32
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
   ${CKPT_ARGS[@]} ${ROLLOUT_ARGS[@]} ${GRPO_ARGS[@]} ${OPTIMIZER_ARGS[@]} ${CUSTOM_ARGS[@]}
"""


def test_translation_table() -> None:
    flags = parse_script(SCRIPT)
    names = [f for f, _ in flags]
    assert "use-tis" not in names and "address" not in names  # comments and ray's own flags
    tr = to_config(flags)
    c = tr.config
    assert c["model"]["path"] == "/root/Qwen3-4B" and c["run"]["num_rollouts"] == 3000
    assert c["rollout"]["reward"] == "deepscaler" and c["rollout"]["max_new_tokens"] == 8192
    assert c["train"]["adam_betas"] == [0.9, 0.98] and c["train"]["num_steps_per_rollout"] == 2
    assert c["algorithm"]["kl_estimator"] == "low_var_kl" and c["algorithm"]["eps_clip_high"] == 0.28
    assert c["algorithm"]["numerics"] == "slime"  # a slime script: slime's conventions
    assert c["slime"]["custom_rm_path"] == "slime_user.arith_rm.custom_rm"
    dropped = {f: reason for f, _, reason in tr.dropped}
    assert set(dropped) == {"ref-load", "balance-data", "optimizer", "actor-num-gpus-per-node",
                            "tensor-model-parallel-size"}
    assert "shell variable" in dropped["actor-num-gpus-per-node"]


def test_imported_config_runs(tmp_path: Path) -> None:
    script, out, log = tmp_path / "run-qwen3-4B.sh", tmp_path / "imported.toml", tmp_path / "calls.jsonl"
    script.write_text(SCRIPT)
    proc = core(["slime-import", str(script), "-o", str(out), "--model-path", str(ARITH / "model"),
                 "--set", f"prompt-data={ARITH / 'train.jsonl'}", "--set", "rm-type=exact"], log)
    assert "not translated:" in proc.stdout and "--tensor-model-parallel-size" in proc.stdout
    run_dir = tmp_path / "run"
    core(["run", "--plugins", "slime_grpo,slime_compat", "--config", str(out),
          "-o", "run.num_rollouts=1", "-o", "rollout.batch_size=2", "-o", "rollout.n_samples_per_prompt=4",
          "-o", "rollout.max_new_tokens=8", "-o", "train.num_steps_per_rollout=1",
          "-o", f"run.run_dir={run_dir}", "-o", "run.progress=false", "-o", 'run.loggers=["jsonl"]'], log)
    assert len(metrics(run_dir)) == 1
    assert sum(c["fn"] == "custom_rm" for c in calls(log)) == 8  # the imported --custom-rm-path ran
