"""nonzero_std, fifo / lifo and drop_truncated, and their registration."""

from __future__ import annotations

import pytest

from slime_std.filters import drop_truncated, fifo, lifo, nonzero_std
from slime_hookspecs import FilterResult, Sample, Status


def group(*rewards, **kw):
    return [Sample(index=i, reward=r, **kw) for i, r in enumerate(rewards)]


def test_records_are_registered_with_stages():
    from slime_core.pluginmgr import SlimePluginManager

    reg = SlimePluginManager().load().registries.filter
    stages = {r.name: r.stage for r in reg if r.owner == "core_filters"}
    assert stages == {"nonzero_std": "dynamic_sampling", "fifo": "buffer", "lifo": "buffer",
                      "drop_truncated": "sample"}
    built = reg.get("nonzero_std").factory("the config")
    assert built.func is nonzero_std and built.args == ("the config",)


def test_nonzero_std(make_config):
    config = make_config()
    assert nonzero_std(config, group(1.0, 0.0, 1.0)) == FilterResult(keep=True)
    assert nonzero_std(config, group(1.0, 1.0, 1.0)) == FilterResult(keep=False, reason="zero_std")
    assert nonzero_std(config, group(0.0, 0.0)).keep is False
    assert nonzero_std(config, group(0.5)).keep is False  # one sample: no spread


def test_nonzero_std_dict_rewards_use_reward_key(make_config):
    g = group({"acc": 1.0, "fmt": 1.0}, {"acc": 0.0, "fmt": 1.0})
    assert nonzero_std(make_config(rollout={"reward_key": "acc"}), g).keep is True
    assert nonzero_std(make_config(rollout={"reward_key": "fmt"}), g).keep is False
    with pytest.raises(ValueError, match="rollout.reward_key"):
        nonzero_std(make_config(), g)
    with pytest.raises(ValueError, match="no reward"):
        nonzero_std(make_config(), group(1.0, None))


def test_fifo_and_lifo_remove_what_they_return():
    a, b, c = [Sample(group_index=0)], [Sample(group_index=1)], [Sample(group_index=2)]
    buf = [a, b, c]
    assert fifo(None, 0, buf, 2) == [a, b] and buf == [c]
    buf = [a, b, c]
    assert lifo(None, 0, buf, 2) == [c, b] and buf == [a]
    buf = [a, b]
    assert fifo(None, 0, buf, -1) == [a, b] and buf == []
    assert lifo(None, 0, [], 3) == []


def test_drop_truncated(make_config):
    done = Sample(status=Status.COMPLETED)
    cut = Sample(status=Status.TRUNCATED)
    drop_truncated(make_config(), [[done, cut]])
    assert cut.remove_sample is True and done.remove_sample is False
