"""Pure parts of the executor layer: sharding, placement, staleness, buckets, addresses."""

from __future__ import annotations

import pytest
import torch
from slime_core.executors.placement import plan_placement
from slime_core.executors.ray_cluster import address_host, check_token_auth
from slime_core.executors.sharding import imbalance, shard_by_tokens
from slime_core.runner import staleness
from slime_core.runtime.dist_group import is_loopback
from slime_core.testing import build_test_config
from slime_core.weights.buckets import make_buckets, pack_bucket, unpack_bucket
from slime_hookspecs import RolloutScheduleRecord, Sample


def test_shards_keep_groups_whole_and_balance_tokens() -> None:
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    lengths = [10, 10, 50, 50, 20, 20, 30, 30]  # group tokens 20, 100, 40, 60
    shards = shard_by_tokens(groups, lengths, 2)
    # largest first: 100 -> r0, 60 -> r1, 40 -> r1, 20 -> r1 (100 vs 120 ... ) balanced greedily
    assert sorted(i for s in shards for i in s) == list(range(8))
    for s in shards:
        assert s == sorted(s)
        assert all(groups[i] != groups[j] or (i in s) == (j in s) for i in s for j in range(8))
    loads = [sum(lengths[i] for i in s) for s in shards]
    assert loads == [120, 100]
    assert imbalance(lengths, shards) == pytest.approx(120 / 110)


def test_shards_are_deterministic_and_allow_empty_ranks() -> None:
    assert shard_by_tokens([5, 5, 7], [1, 1, 1], 3) == [[0, 1], [2], []]
    assert shard_by_tokens([5, 5, 7], [1, 1, 1], 1) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="2 group ids but 1 lengths"):
        shard_by_tokens([1, 2], [3], 2)


def test_placement_separate_and_colocated() -> None:
    sep = plan_placement(2, 1, "GPU", False, 2.0, 1.0, 1.0)
    assert sep.bundles == [{"CPU": 2.0, "GPU": 1.0}] * 3 + [{"CPU": 1.0}]
    assert [s.bundle for s in sep.trainers] == [0, 1] and sep.engines[0].bundle == 2
    assert sep.engines[0].ray_options() == {"num_cpus": 2.0, "num_gpus": 1.0}
    co = plan_placement(2, 3, "NPU", True, 1.0, 1.0, 1.0)
    assert co.bundles[:2] == [{"CPU": 3.0, "NPU": 1.0}, {"CPU": 2.0, "NPU": 1.0}]
    assert [s.bundle for s in co.engines] == [0, 1, 0]
    assert co.trainers[0].ray_options() == {"num_cpus": 1.0, "resources": {"NPU": 0.5}}
    assert co.engines[0].devices == {"NPU": 0.25}
    cpu = plan_placement(1, 1, "CPU", True, 1.0, 1.0, 0.0)
    assert cpu.bundles == [{"CPU": 2.0}, {"CPU": 0.01}] and cpu.total("CPU") == pytest.approx(2.01)


def test_placement_puts_each_role_on_nodes_with_its_resources() -> None:
    roles = {"trainer": {"slime_trainer": 0.01}, "engine": {"slime_engine": 0.01},
             "manager": {"slime_head": 0.01}}
    sep = plan_placement(2, 1, "GPU", False, 1.0, 1.0, 1.0, roles)
    assert sep.bundles == [{"CPU": 1.0, "GPU": 1.0, "slime_trainer": 0.01}] * 2 + [
        {"CPU": 1.0, "GPU": 1.0, "slime_engine": 0.01}, {"CPU": 1.0, "slime_head": 0.01}]
    # the bundle holds the label; the actor asks only for its devices
    assert sep.engines[0].ray_options() == {"num_cpus": 1.0, "num_gpus": 1.0}
    # colocated: engines join trainer bundles, which carry both roles' labels (the larger
    # amount where both name one); a bundle without an engine carries the trainer's only
    co = plan_placement(2, 1, "CPU", True, 1.0, 1.0, 0.0,
                        {"trainer": {"n": 0.01}, "engine": {"n": 0.5, "e": 0.01}})
    assert co.bundles == [{"CPU": 2.0, "n": 0.5, "e": 0.01}, {"CPU": 1.0, "n": 0.01},
                          {"CPU": 0.01}]
    with pytest.raises(ValueError, match="ray.engine_resources: .'GPU'. are device"):
        plan_placement(1, 1, "GPU", False, 1.0, 1.0, 1.0, {"engine": {"GPU": 1}})
    with pytest.raises(ValueError, match="unknown roles .'critic'."):
        plan_placement(1, 1, "CPU", False, 1.0, 1.0, 1.0, {"critic": {"x": 1}})
    with pytest.raises(ValueError, match="ray.trainer_resources.CPU"):
        build_test_config(ray={"trainer_resources": {"CPU": 1.0}})


def test_staleness_bounds_and_drops() -> None:
    calls = []
    plain = RolloutScheduleRecord(name="plain", factory=lambda config, args: None)
    checked = RolloutScheduleRecord(name="checked", factory=lambda config, args: None,
                                    check=calls.append)
    with pytest.raises(ValueError, match="up to 1 weight versions"):
        staleness.check_config(build_test_config(run={"max_staleness": 0},
                                                 weights={"update_interval": 2}), plain)
    cfg = build_test_config(run={"max_staleness": 1}, weights={"update_interval": 2})
    staleness.check_config(cfg, plain)
    staleness.check_config(cfg, checked)  # the record's check first, then the bound
    assert calls == [cfg]
    samples = [Sample(index=i, weight_versions=[v]) for i, v in enumerate([3, 2, 1])]
    assert staleness.drop_stale(samples, 3, 1) == 1
    assert [s.remove_sample for s in samples] == [False, False, True]
    assert samples[2].metadata["dropped_reason"] == "stale"
    assert staleness.drop_stale(samples, 9, -1) == 0


def test_buckets_pack_and_unpack_every_dtype() -> None:
    weights = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int64),
               "c": torch.randn(4).to(torch.bfloat16), "d": torch.tensor(True)}
    buckets = make_buckets(weights, 1)
    assert len(buckets) == 1
    many = make_buckets({k: torch.zeros(2**18) for k in "xyz"}, 1)  # 1 MiB tensors
    assert [list(b) for b in many] == [["x"], ["y"], ["z"]]
    buf, meta = pack_bucket(weights, torch.device("cpu"))
    assert buf.dtype == torch.uint8 and buf.numel() == sum(m[3] for m in meta)
    out = unpack_bucket(buf, meta)
    for k, v in weights.items():
        assert out[k].dtype == v.dtype and torch.equal(out[k], v)


def test_addresses_and_token_policy(monkeypatch) -> None:
    assert address_host("auto") == "127.0.0.1"
    assert address_host("ray://10.0.0.5:10001") == "10.0.0.5"
    assert address_host("[::1]:6379") == "::1"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("10.0.0.5")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(RuntimeError, match="keeps Ray's token authentication on"):
        check_token_auth()


def test_snapshot_for_workers_leaves_out_failed_and_blocked_plugins() -> None:
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.pluginmgr.manager import PluginInfo

    m = SlimePluginManager(PluginSelection(modules=["my.mod"]))
    for name, status in (("good", "active"), ("probe", "unavailable"), ("bad", "failed"),
                         ("off", "blocked")):
        m.infos[name] = PluginInfo(name=name, source="entry point", module=name, status=status)
    snap = m.snapshot()
    assert snap.plugins == ["good", "probe"] and snap.modules == ["my.mod"]
