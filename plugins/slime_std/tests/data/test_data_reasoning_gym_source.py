"""The reasoning_gym data source: entries, seeds, mixtures, errors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("reasoning_gym")

from slime_std.data import make_reasoning_gym_source  # noqa: E402


def rg_config(make_config, tok_dir, eval=None, **data):
    return make_config(
        model={"path": str(tok_dir)}, eval=eval or {},
        data={"source": "reasoning_gym", "task": "basic_arithmetic", "size": 6, "eval_size": 4,
              "prompt_template": "{prompt} Answer in <answer></answer>.", **data},
        rollout={"n_samples_per_prompt": 2},
    )


def test_entries_become_samples(make_config, tiny_tokenizer_dir):
    import reasoning_gym

    config = rg_config(make_config, tiny_tokenizer_dir, shuffle=False)
    src = make_reasoning_gym_source(config, "train")
    assert len(src) == 6
    ref = reasoning_gym.create_dataset("basic_arithmetic", size=6, seed=config.run.seed)
    groups = src.get_samples(6)
    for i, g in enumerate(groups):
        entry = ref[i]
        s = g[0]
        assert s.prompt == f"{entry['question']} Answer in <answer></answer>."
        assert s.label == entry["answer"]
        assert s.metadata["task"] == "basic_arithmetic"
        assert s.metadata["reasoning_gym"]["question"] == entry["question"]
        assert s.metadata["reasoning_gym"]["metadata"]["source_dataset"] == "basic_arithmetic"
        assert src.encoder.tokenizer.decode(s.tokens) == s.prompt
    json.dumps(src.state_dict())  # metadata is JSON-safe


def test_eval_split_uses_eval_seed_and_size(make_config, tiny_tokenizer_dir):
    config = rg_config(make_config, tiny_tokenizer_dir)
    ev = make_reasoning_gym_source(config, "eval")
    assert len(ev) == 4 and ev.n_samples_per_prompt == 1 and not ev.shuffle
    questions = [g[0].metadata["reasoning_gym"]["question"] for g in ev.get_samples(-1)]
    tr = make_reasoning_gym_source(config, "train")
    train_q = {g[0].metadata["reasoning_gym"]["question"] for g in tr.get_samples(6)}
    assert len(questions) == 4 and set(questions) != train_q


def test_task_mixture(make_config, tiny_tokenizer_dir):
    config = rg_config(make_config, tiny_tokenizer_dir, task="basic_arithmetic, chain_sum",
                       shuffle=False)
    src = make_reasoning_gym_source(config, "train")
    tasks = [g[0].metadata["task"] for g in src.get_samples(4)]
    assert tasks == ["basic_arithmetic", "chain_sum", "basic_arithmetic", "chain_sum"]


def test_unknown_task_lists_choices(make_config, tiny_tokenizer_dir):
    config = rg_config(make_config, tiny_tokenizer_dir, task="basic_arithmetc")
    with pytest.raises(ValueError, match="did you mean basic_arithmetic.*choose one of"):
        make_reasoning_gym_source(config, "train")


def test_the_source_makes_its_own_eval_split(make_config, tiny_tokenizer_dir):
    """``extra["eval_split"]`` on the record: a run evaluates on reasoning-gym's held-out
    tasks without data.eval_path; a file source without one has no eval."""
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.rollout.components import has_eval

    manager = SlimePluginManager(PluginSelection(autoload=False)).load()
    config = rg_config(make_config, tiny_tokenizer_dir, eval={"interval": 1})
    assert not config.data.eval_path and has_eval(config, manager)
    plain = make_config(model={"path": str(tiny_tokenizer_dir)}, data={"source": "jsonl"},
                        eval={"interval": 1})
    assert not has_eval(plain, manager)
