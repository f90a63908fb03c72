"""The rest of the [slime] flags, each through a real ``core run`` on the tiny model.

Several flags share a run (2 CPU cores in CI): one run for the rollout side (buffer filter,
sample filter, all-samples process, the rollout and eval log functions, custom_config_path),
one for the trainer side with the torch backend (data source, custom advantages, rollout-data
postprocess, TIS, pg-loss reducer, the three custom_megatron_* hooks, the post-write hook),
and the three trainer hooks again with ``train.backend = "megatron"``. The modules in
``tests/slime_user`` have slime's signatures (read from THUDM/slime 624b824a8).
"""

from collections import Counter
from pathlib import Path

import pytest
from run_support import ARITH, base_config, calls, core, metrics


def test_rollout_side_flags_and_custom_config(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "calls.jsonl"
    yaml = tmp_path / "extra.yaml"
    yaml.write_text("my_custom_flag: 7\nrollout_batch_size: 4\n")
    train = f'path = "{ARITH / "train.jsonl"}"'
    text = (base_config(run_dir)
            .replace("[rollout]\n", "[rollout]\nover_sampling_batch_size = 6\n")
            .replace(train, f'{train}\neval_path = "{ARITH / "eval.jsonl"}"'))
    cfg = tmp_path / "c.toml"
    cfg.write_text(text + f"""
[eval]
interval = 2
max_prompts = 6

[slime]
buffer_filter_path = "slime_user.arith_rollout_hooks.pop_last"
rollout_sample_filter_path = "slime_user.arith_rollout_hooks.drop_truncated"
rollout_all_samples_process_path = "slime_user.arith_rollout_hooks.count_all"
custom_rollout_log_function_path = "slime_user.arith_rollout_hooks.log_rollout"
custom_eval_rollout_log_function_path = "slime_user.arith_rollout_hooks.log_eval"
custom_config_path = "{yaml}"
rollout_data_postprocess_path = "slime_user.arith_trainer_hooks.check_rollout_data"
""")
    core(["run", "--plugins", "slime_grpo,slime_compat", "--config", str(cfg)], log)
    seen = calls(log)
    by = Counter(c["fn"] for c in seen)
    # six groups per round for a batch of four: the surplus went back to the buffer, and
    # step 2 took it through the slime buffer filter (which saw the YAML's flag on args)
    buf = [c for c in seen if c["fn"] == "buffer_filter"]
    assert buf and all(c["flag"] == 7 for c in buf)
    assert all(c["left"] == 0 and c["picked"] == c["buffer"] for c in buf)
    assert by["sample_filter"] == 2 and all(c["groups"] == 4 for c in seen if c["fn"] == "sample_filter")
    # every generated group, the surplus included, reaches the all-samples hook
    assert by["all_samples"] == 2 and all(c["groups"] >= 4 and c["has_add_samples"]
                                          for c in seen if c["fn"] == "all_samples")
    rollouts = [c for c in seen if c["fn"] == "log_rollout"]
    assert [c["rollout_id"] for c in rollouts] == [0, 1] and all(c["n"] == 16 for c in rollouts)
    evals = [c for c in seen if c["fn"] == "log_eval"]
    # eval before step 0 and at the end (interval 2 = the last step), 6 prompts each
    assert len(evals) >= 2 and all(c["n"] == c["samples"] == c["truncated"] == 6 for c in evals)
    # the postprocess alone (no custom advantages): it sees the grpo estimator's advantages
    assert [c["rollout_id"] for c in seen if c["fn"] == "postprocess"] == [0, 1]
    rows = metrics(run_dir)
    assert len([r for r in rows if "train/loss" in r]) == 2
    # the log functions returned False: the default logging still wrote the eval metric
    assert any("eval/accuracy" in r for r in rows)


def test_trainer_side_flags_torch_backend(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "calls.jsonl"
    cfg = tmp_path / "c.toml"
    cfg.write_text(base_config(run_dir).replace("[train]", "[train]\nnum_steps_per_rollout = 2")
                   + """
[algorithm]
use_kl_loss = true
kl_loss_coef = 0.01

[weights]
transport = "disk"

[slime]
data_source_path = "slime_user.arith_data_source.JsonlSource"
custom_advantage_function_path = "slime_user.arith_trainer_hooks.group_baseline"
rollout_data_postprocess_path = "slime_user.arith_trainer_hooks.check_rollout_data"
custom_tis_function_path = "slime_user.arith_trainer_hooks.clipped_tis"
custom_pg_loss_reducer_function_path = "slime_user.arith_trainer_hooks.per_token_reducer"
custom_megatron_init_path = "slime_user.arith_trainer_hooks.megatron_init"
custom_megatron_before_log_prob_hook_path = "slime_user.arith_trainer_hooks.before_log_prob"
custom_megatron_before_train_step_hook_path = "slime_user.arith_trainer_hooks.before_train_step"
custom_update_weight_post_write_path = "slime_user.arith_trainer_hooks.post_write"
""")
    core(["run", "--plugins", "slime_grpo,slime_compat", "--config", str(cfg)], log)
    seen = calls(log)
    by = Counter(c["fn"] for c in seen)
    # the slime data source served every prompt: 4 groups of 4 per step
    gets = [c for c in seen if c["fn"] == "source_get"]
    assert by["source_init"] == 1 and sum(c["n"] for c in gets) == 8 and gets[-1]["offset"] == 8
    assert by["source_save"] >= 1  # the final checkpoint saved its state with slime's save()
    assert by["advantages"] == 2 and all(c["n"] == 16 for c in seen if c["fn"] == "advantages")
    post = [c for c in seen if c["fn"] == "postprocess"]
    assert [c["rollout_id"] for c in post] == [0, 1]
    # two optimizer steps per rollout: old log-probs exist, so the TIS hook runs per micro-batch
    assert by["tis"] >= 4 and by["pg_reducer"] >= by["tis"]
    assert by["megatron_init"] == 1 and next(c for c in seen if c["fn"] == "megatron_init")["lr"] == 1e-4
    prefixes = {c["store_prefix"] for c in seen if c["fn"] == "before_log_prob"}
    assert prefixes == {"", "ref_"}  # actor (old) and reference log-probs
    steps = [(c["rollout_id"], c["step_id"]) for c in seen if c["fn"] == "before_train_step"]
    assert steps == [(0, 0), (0, 1), (1, 0), (1, 1)]
    writes = [c for c in seen if c["fn"] == "post_write"]
    # the initial sync (version 0) and one per step, each after its files were in place
    assert [c["version"] for c in writes] == ["v000000", "v000001", "v000002"]
    assert all(c["files"] >= 1 and c["engines"] >= 1 for c in writes)
    rows = metrics(run_dir)
    assert len(rows) == 2 and all("train/tis" in r for r in rows)


def _megatron_available() -> bool:
    # find_spec, not import: megatron-core takes seconds to import, at collection time too
    from importlib.util import find_spec

    try:
        return find_spec("megatron.core") is not None and find_spec("megatron_backend") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(not _megatron_available(), reason="megatron_backend / megatron-core not installed")
def test_megatron_hooks_with_the_megatron_backend(tmp_path: Path) -> None:
    run_dir, log = tmp_path / "run", tmp_path / "calls.jsonl"
    cfg = tmp_path / "c.toml"
    # two optimizer steps: the actor's log-probs are computed before training (before_log_prob)
    cfg.write_text(base_config(run_dir, steps=1)
                   .replace("[train]", '[train]\nbackend = "megatron"\nnum_steps_per_rollout = 2')
                   + """
[slime]
custom_megatron_init_path = "slime_user.arith_trainer_hooks.megatron_init"
custom_megatron_before_log_prob_hook_path = "slime_user.arith_trainer_hooks.before_log_prob"
custom_megatron_before_train_step_hook_path = "slime_user.arith_trainer_hooks.before_train_step"
""")
    core(["run", "--plugins", "slime_grpo,slime_compat,megatron_backend", "--config", str(cfg)],
         log)
    seen = calls(log)
    by = Counter(c["fn"] for c in seen)
    assert by["megatron_init"] == 1
    assert {c["store_prefix"] for c in seen if c["fn"] == "before_log_prob"} == {""}
    steps = [(c["rollout_id"], c["step_id"]) for c in seen if c["fn"] == "before_train_step"]
    assert steps == [(0, 0), (0, 1)]
    assert len(metrics(run_dir)) == 1
