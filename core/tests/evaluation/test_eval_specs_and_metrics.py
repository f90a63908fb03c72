"""[[eval.datasets]] specs (inheritance, refusals) and the eval metrics (pass@k, per dataset)."""

from __future__ import annotations

from math import comb

import pytest
from slime_core.config import ConfigError
from slime_core.config.eval_datasets import resolved
from slime_core.evaluation.metrics import eval_metrics, pass_at_k
from slime_hookspecs import Sample, Status


def test_pass_at_k_known_values():
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 4) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - comb(7, 5) / comb(10, 5))
    assert pass_at_k(5, 3, 3) == 1.0  # fewer wrong samples than k: a right one is drawn
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_datasets_inherit_from_eval_and_rollout(make_config):
    cfg = make_config(
        rollout={"reward": "exact", "max_new_tokens": 12, "stop": ["\n"]},
        eval={"temperature": 0.5, "n_samples_per_prompt": 3, "top_k": 5, "datasets": [
            {"name": "a", "path": "a.jsonl"},
            {"name": "b", "source": "reasoning_gym", "task": "chain_sum", "reward": "reasoning_gym",
             "n_samples": 2, "temperature": 1.0, "max_new_tokens": 4, "stop": []},
        ]},
    )
    a, b = resolved(cfg)
    assert (a.source, a.reward, a.n_samples, a.temperature, a.top_k, a.max_new_tokens, a.stop) \
        == ("jsonl", "exact", 3, 0.5, 5, 12, ["\n"])
    assert (b.source, b.reward, b.n_samples, b.temperature, b.max_new_tokens, b.stop) \
        == ("reasoning_gym", "reasoning_gym", 2, 1.0, 4, [])


@pytest.mark.parametrize("datasets, message", [
    ([{"path": "a.jsonl"}], "name: required"),
    ([{"name": "a/b"}], "name: required"),
    ([{"name": "a"}, {"name": "a"}], "used by two datasets"),
    ([{"name": "a", "temprature": 1.0}], "did you mean 'temperature'"),
    ([{"name": "a", "n_samples": 0}], "n_samples: must be >= 1"),
    ([{"name": "a", "n_samples": "4"}], "expected int"),
    ([{"name": "a", "generate": "no_colon"}], "package.module:function"),
])
def test_bad_dataset_tables_are_refused_naming_the_key(make_config, datasets, message):
    with pytest.raises(ConfigError, match=message):
        make_config(eval={"datasets": datasets})


def _group(dataset, group, rewards, status=Status.COMPLETED, length=3):
    md = {} if dataset is None else {"eval_dataset": dataset}
    return [Sample(group_index=group, index=group * 10 + i, reward=r, status=status,
                   response_length=length, metadata=dict(md)) for i, r in enumerate(rewards)]


def test_eval_metrics_per_dataset_and_plain(make_config):
    cfg = make_config(eval={"pass_at": [1, 2, 8]})
    samples = (
        _group("math", 0, [1.0, 0.0, 0.0, 0.0]) + _group("math", 1, [1.0, 1.0, 1.0, 1.0])
        + _group("qa", 0, [0.0, 0.0], status=Status.TRUNCATED, length=7)
        + _group(None, 0, [1.0]) + _group(None, 1, [0.0])
    )
    m = eval_metrics(cfg, samples)
    assert m["eval/math/accuracy"] == pytest.approx(5 / 8)
    assert m["eval/math/pass@1"] == pytest.approx((0.25 + 1.0) / 2)
    assert m["eval/math/pass@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert "eval/math/pass@8" not in m  # k above the 4 samples per prompt
    assert m["eval/qa/accuracy"] == 0.0 and m["eval/qa/truncated_ratio"] == 1.0
    assert m["eval/qa/response_length_mean"] == 7.0
    # the plain data.eval_path keeps its names
    assert m["eval/accuracy"] == 0.5 and m["eval/pass@1"] == 0.5 and "eval/pass@2" not in m


def test_dapo_style_minus_one_counts_as_wrong(make_config):
    m = eval_metrics(make_config(eval={"pass_at": [2]}), _group("d", 0, [1.0, -1.0]))
    assert m["eval/d/accuracy"] == 0.5 and m["eval/d/reward_mean"] == 0.0
    assert m["eval/d/pass@2"] == 1.0
