"""The rollout of a step when the data source is the rollout buffer (``slime_rollout``).

1. On the first step the agent API is started in front of the run's engines (unless
   ``rollout_buffer.serve_engine_api`` is off) and the task is started in the buffer service
   with the API's URL, token and model name, so workers know where to generate.
2. Complete groups are fetched until ``rollout.batch_size`` groups are kept: samples without
   a reward (workers may leave it to the trainer) are scored like in the default rollout
   (``slime_reward_group`` / ``slime_reward`` / ``rollout.reward``), ``slime_after_generate``
   fires per sample, and the dynamic-sampling filters decide (dropped groups are counted as
   ``rollout/dropped/<reason>``; at most ``rollout.max_sampling_rounds`` fetches).
3. The sample filter, ``slime_rollout_sample_filter`` and ``slime_rollout_all_samples`` run
   as in the default rollout; the source's ``rollout_buffer/*`` numbers join the metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from slime_core.agent.config import section
from slime_hookspecs import RolloutResult, Sample, Status

_API: dict[str, Any] = {}


def engine_api(config: Any, rollout_manager: Any) -> Any:
    """The agent API of this run, started on first use."""
    api = _API.get("server")
    if api is None:
        from slime_core.agent.api import AgentApiServer

        engines = [c.engine for c in rollout_manager.clients]
        api = AgentApiServer.from_config(config, engines).start()
        _API["server"] = api
    return api


def run_agent_api(config: Any) -> Any:
    """The run's agent API (:class:`~slime_core.agent.api.AgentApiServer` from ``[agent_api]``)
    in front of this process's rollout engines: started on first use, the same server the
    rollout buffer hands to workers, stopped at the run's end (``slime_run_end``).

    Its ``url`` and ``token`` serve OpenAI clients; ``session_url(id)`` is a base URL that
    records into session ``id``; ``finish_session(id, reward=..., ...)`` (from any thread but
    the server's) returns the session as samples. Raises ``RuntimeError`` where this process
    has no rollout manager.
    """
    from slime_core.context import get_rollout_manager

    return engine_api(config, get_rollout_manager())


def start_task(config: Any, source: Any) -> None:
    """Start the agent API (if configured) and the source's task with its address."""
    from slime_core.context import get_rollout_manager

    engine = None
    if section(config, "rollout_buffer").serve_engine_api:
        api = engine_api(config, get_rollout_manager())
        engine = {"base_url": api.url, "token": api.token, "model": api.model_name}
        if api.vocab_size:  # the buffer then refuses writes with larger token ids
            engine["vocab_size"] = api.vocab_size
    source.start(engine)


def prepare_services(config: Any, run_dir: str) -> Path | None:
    """At run start: start the task of every buffer source, write the service file."""
    from slime_core.agent.buffer.source import live_sources

    for src in live_sources():
        if not src.started:
            start_task(config, src)
    return write_service_file(run_dir)


def buffer_rollout(config: Any, rollout_id: int, source: Any) -> RolloutResult:
    from slime_core.context import get_manager, get_rollout_manager

    rm = get_rollout_manager()
    pm = get_manager().hook
    t0 = time.perf_counter()
    if not source.started:
        start_task(config, source)
    target = config.rollout.batch_size
    kept: list[list[Sample]] = []
    everything: list[list[Sample]] = []
    dropped: dict[str, int] = {}
    rounds = 0
    while len(kept) < target:
        rounds += 1
        if rounds > config.rollout.max_sampling_rounds:
            raise RuntimeError(
                f"rollout buffer: kept {len(kept)} of {target} groups after "
                f"{config.rollout.max_sampling_rounds} fetches (rollout.max_sampling_rounds); "
                f"dropped: {dropped}")
        for group in source.get_samples(target - len(kept)):
            for s in group:
                s.rollout_id = rollout_id
            missing = [s for s in group if s.reward is None and s.status != Status.FAILED]
            if missing:
                asyncio.run(rm._reward(missing, False))  # the default rollout's scoring
            for s in group:
                pm.slime_after_generate(config=config, sample=s, rollout_id=rollout_id,
                                        evaluation=False)
            everything.append(group)
            keep, reason = rm._keep(group)
            if keep:
                kept.append(group)
            else:
                dropped[reason] = dropped.get(reason, 0) + 1
                for s in group:
                    s.metadata["dropped_reason"] = reason
    if rm._sample_filter is not None:
        rm._sample_filter(config, kept)
    pm.slime_rollout_sample_filter(config=config, groups=kept)
    pm.slime_rollout_all_samples(config=config, groups=everything, data_source=source)
    metrics = {**source.metrics(), "rollout/sampling_rounds": float(rounds),
               "rollout/groups_generated": float(len(everything)),
               "perf/rollout_time": time.perf_counter() - t0}
    for reason, n in dropped.items():
        metrics[f"rollout/dropped/{reason}"] = float(n)
    return RolloutResult(groups=kept, metrics=metrics)


def write_service_file(run_dir: str) -> Path | None:
    """``<run_dir>/agent_services.json`` (mode 0600): URLs and tokens for agent workers."""
    from slime_core.agent.buffer.source import live_sources

    services: dict[str, Any] = {}
    for src in live_sources():
        services["rollout_buffer"] = {"url": src.url, "token": src.token}
    api = _API.get("server")
    if api is not None:
        services["agent_api"] = {"url": api.url, "token": api.token}
    if not services:
        return None
    path = Path(run_dir) / "agent_services.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(services, fh, indent=2)
    return path


def shutdown_services() -> None:
    """Stop the agent API and the buffer sources of this process (end of the run)."""
    from slime_core.agent.buffer.source import live_sources

    for src in live_sources():
        src.close()
    api = _API.pop("server", None)
    if api is not None:
        api.stop()
