"""Agentic rollouts in real ``core run``s (local executor, ~50k-parameter Qwen2, 2 steps).

* multi-turn generation with tools turned on by ``[tools]``;
* ``data.source = "rollout_buffer"``: agent worker threads pull jobs from the in-process
  rollout-buffer service, run their episodes through the agent API on the run's engine, and
  write the trajectories back; the trainer trains on them;
* the buffer as its own process (``core rollout-buffer``) feeding the data source.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


from slime_hookspecs import hookimpl
from tests.conftest import read_metrics


class BatchRecorder:
    @hookimpl
    def slime_rollout_data_postprocess(self, config, rollout_id, batch):
        self.batches = getattr(self, "batches", []) + [batch]


def test_core_run_with_tools(base_config, run_slime):
    cfg = dict(base_config)
    cfg["tools"] = {"enabled": ["calculator", "python"], "max_turns": 2}
    rec = BatchRecorder()
    run_dir = run_slime(cfg, plugins=[rec], select=("slime_grpo", "core_tools"))
    rows = read_metrics(run_dir)
    steps = [r for r in rows if "rollout/reward_mean" in r]
    assert len(steps) == 2
    for r in steps:  # the multi-turn generator ran every sample
        assert r["rollout/turns_mean"] >= 1.0 and "rollout/tool_calls" in r
    assert len(rec.batches) == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers(url: str, token: str, n: int) -> tuple[list[Any], list[threading.Thread],
                                                           threading.Event]:
    from slime_agent.tools import CALCULATOR_SCHEMA, calculator
    from slime_agent.worker import BufferWorker, tool_agent_episode

    schema = {"type": "function", "function": {"name": "calculator",
                                               "parameters": CALCULATOR_SCHEMA}}
    stop = threading.Event()
    workers = [BufferWorker(url, token, tool_agent_episode({"calculator": (schema, calculator)}),
                            poll_s=0.5) for _ in range(n)]
    threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    return workers, threads, stop


def test_core_run_fed_by_rollout_buffer_workers(base_config, run_slime):
    port = free_port()
    cfg = dict(base_config)
    cfg["data"] = {**cfg["data"], "source": "rollout_buffer"}
    cfg["tools"] = {"enabled": ["calculator"]}  # handed to the workers with each job
    cfg["rollout_buffer"] = {"port": port, "token": "buffer-token", "timeout_s": 120,
                             "poll_s": 1.0}
    workers, threads, stop = start_workers(f"http://127.0.0.1:{port}", "buffer-token", 2)
    rec = BatchRecorder()
    try:
        run_dir = run_slime(cfg, plugins=[rec], select=("slime_grpo", "core_tools"))
    finally:
        for t in threads:  # the run's end tells them to stop (POST /stop)
            t.join(timeout=15)
        stop.set()
    assert not any(t.is_alive() for t in threads), "workers were not told to stop"
    assert sum(w.done for w in workers) >= 2 * 2 * 4 and not any(w.errors for w in workers)
    rows = [r for r in read_metrics(run_dir) if "rollout/reward_mean" in r]
    assert len(rows) == 2
    for r in rows:
        assert r["rollout/samples"] == 8.0 and r["rollout_buffer/partial_groups"] >= 0
        assert r["rollout_buffer/invalid_writes"] == 0.0 and "rollout/tool_calls" in r
    # every trained sample came through a session of the agent API: prompt = chat template
    for batch in rec.batches:
        assert len(batch.tokens) == 8
        for mask, lp in zip(batch.loss_masks, batch.rollout_log_probs):
            assert mask.numel() == lp.numel() > 0
            assert bool((lp[mask == 1] < 0).all())  # real log-probs on the model's tokens
    services = Path(run_dir) / "agent_services.json"
    assert stat.S_IMODE(services.stat().st_mode) == 0o600
    info = json.loads(services.read_text())
    assert info["rollout_buffer"] == {"url": f"http://127.0.0.1:{port}", "token": "buffer-token"}
    assert info["agent_api"]["url"].startswith("http://127.0.0.1:") and info["agent_api"]["token"]


def test_rollout_buffer_as_its_own_process(base_config, tmp_path):
    """``core rollout-buffer`` in a subprocess; the data source connects by url and token."""
    from slime_agent.buffer.source import RolloutBufferSource
    from slime_core.context import set_manager
    from slime_core.pluginmgr import PluginSelection
    from slime_core.rollout.components import make_data_source
    from slime_core.session import resolve

    port = free_port()
    env = {**os.environ, "SLIME_ROLLOUT_BUFFER_TOKEN": "proc-token"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "slime_core", "rollout-buffer", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert f"rollout buffer on http://127.0.0.1:{port}" in line, line
        cfg = dict(base_config)
        cfg["data"] = {**cfg["data"], "source": "rollout_buffer"}
        cfg["rollout_buffer"] = {"url": f"http://127.0.0.1:{port}", "timeout_s": 60}
        os.environ["SLIME_ROLLOUT_BUFFER_TOKEN"] = "proc-token"
        try:
            manager, config = resolve(PluginSelection(plugins=["core_tools", "core_sandbox"]), None, (), cfg)
            set_manager(manager)
            source = make_data_source(manager, config, "train")
        finally:
            del os.environ["SLIME_ROLLOUT_BUFFER_TOKEN"]
        assert isinstance(source, RolloutBufferSource) and source.server is None
        assert make_data_source(manager, config, "eval").__class__.__name__ == "FileDataSource"
        source.start(engine=None)

        def episode(job: dict[str, Any], task: dict[str, Any]) -> list[dict[str, Any]]:
            from slime_hookspecs import Sample, Status

            s = Sample.from_dict(dict(job["sample"]))
            s.append_response_tokens([40, 41], [-1.0, -2.0], text="42")
            s.status, s.reward = Status.COMPLETED, float(job["slot"])
            assert task["group_size"] == 4 and task["tools"] == []
            return [s.to_dict()]

        from slime_agent.worker import BufferWorker

        worker = BufferWorker(source.url, "proc-token", episode, poll_s=0.2)
        stop = threading.Event()
        t = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        t.start()
        groups = source.get_samples(2)
        assert [len(g) for g in groups] == [4, 4]
        for g in groups:
            assert len({s.group_index for s in g}) == 1
            assert sorted(s.reward for s in g) == [0.0, 1.0, 2.0, 3.0]
        state = source.state_dict()
        assert state["format"] == "slime.rollout_buffer/1"
        source.close()  # POST /stop: the worker exits
        t.join(timeout=10)
        assert not t.is_alive()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
