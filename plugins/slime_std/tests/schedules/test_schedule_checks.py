"""The start-up checks of slime-std's overlapping schedules (their records' ``check``), and the
records themselves: ``run.rollout_mode`` names one, an unknown name is refused naming the key
and the choices."""

from __future__ import annotations

import pytest
from slime_core.pluginmgr import PluginSelection, SlimePluginManager
from slime_core.runner import staleness
from slime_core.testing import build_test_config
from slime_std.schedules.checks import check_fully_async, check_one_step_off


@pytest.fixture(scope="module")
def schedules():
    return SlimePluginManager(PluginSelection(autoload=False)).load().registries.rollout_schedule


def test_slime_std_registers_the_three_schedules(schedules) -> None:
    assert {r.name: r.owner for r in schedules} == {
        "sync": "rollout_schedules", "one_step_off": "rollout_schedules",
        "fully_async": "rollout_schedules"}
    assert schedules.get("fully_async").rollout_side is not None
    assert schedules.get("sync").check is None and schedules.get("sync").rollout_side is None


def test_one_step_off_refuses_a_bound_below_the_update_interval(schedules) -> None:
    cfg = build_test_config(run={"async_rollout": True, "max_staleness": 1},
                            weights={"update_interval": 2}, algorithm={"is_correction": "tis"})
    with pytest.raises(ValueError, match="up to 2 weight versions"):
        check_one_step_off(cfg)
    with pytest.raises(ValueError, match="run.async_rollout = true samples are trained up to 2"):
        staleness.check_config(cfg, schedules.get("one_step_off"))
    staleness.check_config(cfg, schedules.get("sync"))  # the same bound is fine without overlap
    with pytest.raises(ValueError, match="ray.colocate"):
        check_one_step_off(build_test_config(run={"async_rollout": True, "executor": "ray"},
                                             ray={"colocate": True}))
    with pytest.warns(UserWarning, match="algorithm.is_correction is off"):
        check_one_step_off(build_test_config(run={"async_rollout": True}))


def test_fully_async_needs_a_bound(schedules) -> None:
    with pytest.raises(ValueError, match=r"run.max_staleness = -1 \(no bound\)"):
        staleness.check_config(build_test_config(run={"rollout_mode": "fully_async"}),
                               schedules.get("fully_async"))
    check_fully_async(build_test_config(run={"rollout_mode": "fully_async", "max_staleness": 1},
                                        algorithm={"is_correction": "tis"}))
