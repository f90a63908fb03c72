"""``run.num_threads``, ``run.cudnn_attention`` and ``run.matmul_precision`` reach torch in the process that runs the
components: the driver's (here) and, through the same function, every worker's."""

from __future__ import annotations

import torch
from slime_core.runtime import process_settings
from slime_core.testing import build_test_config


def test_cudnn_attention_switch_and_thread_count_reach_torch():
    threads = torch.get_num_threads()
    try:
        process_settings.apply(build_test_config(run={"cudnn_attention": False, "num_threads": 1}))
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.get_num_threads() == 1
        # the other backends stay allowed: only cuDNN's per-shape graph builds are avoided
        assert torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
        # a later configuration in the same process gets cuDNN back (nothing sticks)
        process_settings.apply(build_test_config(run={"cudnn_attention": True, "num_threads": 0}))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.get_num_threads() == 1  # 0 leaves torch's count alone
        # and the default leaves cuDNN out (its per-shape graph builds cost more than it gains)
        process_settings.apply(build_test_config())
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)
        torch.set_num_threads(threads)


def test_matmul_precision_is_set_both_ways():
    try:
        process_settings.apply(build_test_config(run={"matmul_precision": "high"}))
        assert torch.get_float32_matmul_precision() == "high"
        # the default puts true fp32 back for a later configuration in this process
        process_settings.apply(build_test_config())
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_matmul_precision_refuses_other_names():
    import pytest
    from slime_core.config import ConfigError

    with pytest.raises(ConfigError, match="run.matmul_precision.*'tf32'"):
        build_test_config(run={"matmul_precision": "tf32"})


def test_the_driver_and_every_worker_apply_them(monkeypatch):
    from slime_core.executors.ray_workers import bootstrap
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager
    from slime_core.runner import driver

    config = build_test_config(run={"cudnn_attention": False})
    try:  # a worker process (Ray actor or spawned local rank) starts with bootstrap
        bootstrap(PluginSelection(plugins=[], autoload=False), config)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)

    class Applied(Exception):
        pass

    def spy(cfg):
        raise Applied(cfg.run.cudnn_attention)

    monkeypatch.setattr(driver.process_settings, "apply", spy)
    manager = SlimePluginManager(PluginSelection(plugins=[], autoload=False)).load()
    try:
        driver.Driver(manager, config)
    except Applied as e:  # applied before the run directory, data or models exist
        assert e.args == (False,)
    else:
        raise AssertionError("Driver did not apply the process settings")
