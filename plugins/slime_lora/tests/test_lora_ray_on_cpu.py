"""Adapter-only weight sync under the ray executor: the engine actor and the trainer rank
actor each build their plugin manager with slime_lora, the adapters travel over Ray's object
store (``ray``) and over a torch.distributed broadcast group (``broadcast``), and the engine
merges them (a version the engine did not apply fails the driver's version check)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slime_core.pluginmgr import PluginSelection


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    from slime_core.executors.ray_cluster import start_local_ray

    start_local_ray(num_cpus=4)
    yield
    ray.shutdown()


def test_adapters_over_ray_and_broadcast(ray_session, lora_config, tmp_path: Path) -> None:
    import json

    from safetensors.torch import load_file
    from slime_core.runner.driver import run_training
    from slime_core.session import resolve

    lora_config["run"].update(executor="ray", num_threads=1, num_rollouts=1)
    for transport in ("ray", "broadcast"):
        lora_config["run"]["run_dir"] = str(tmp_path / transport)
        lora_config["weights"] = {"transport": transport}
        manager, config = resolve(PluginSelection(plugins=["slime_grpo", "slime_lora"]), None,
                                  (), lora_config)
        run_dir = run_training(manager, config)
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        saved = load_file(run_dir / "checkpoints" / "step_000001" / "trainer" /
                          "model.safetensors")
        adapter_bytes = sum(v.numel() * v.element_size() for v in saved.values())
        assert all(".lora_" in k for k in saved)
        assert rows[-1]["perf/weight_sync_bytes"] == adapter_bytes, transport
