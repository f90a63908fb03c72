"""The services of an agentic run in this process: the agent API and the rollout-buffer task.

1. The agent API (:class:`~slime_agent.api.AgentApiServer`, ``[agent_api]``) is started
   in front of this process's rollout engines on first use (:func:`run_agent_api`).
2. A rollout-buffer source's task is started in the buffer service with the API's URL, token
   and model name (unless ``rollout_buffer.serve_engine_api`` is off), so workers know where
   to generate: at ``slime_run_start`` where the source lives in the driver's process, else on
   its first fetch (:func:`start_task`). The rollout itself is the rollout manager's: a source
   that ``delivers_finished_samples`` is fetched from instead of generated
   (:mod:`slime_core.rollout.manager`).
3. ``<run_dir>/agent_services.json`` tells workers the URLs and tokens; everything stops at
   ``slime_run_end`` (:func:`shutdown_services`).
4. Around a weight update in fully-async mode the source holds the agent API
   (:func:`pause_agent_api` / :func:`resume_agent_api`): requests wait, calls in flight are
   aborted and continued with the new weights (:meth:`~slime_agent.api.AgentApiServer.pause`).
5. The same for the episodes of ``agent.entrypoint`` that the fully-async generator runs
   (:func:`hold_rollouts` / :func:`release_rollouts`, from the hooks ``slime_hold_rollouts``
   / ``slime_release_rollouts``): only their sessions are held, an evaluation's go on.

The fully-async generator starts the task from its own thread while ``slime_run_start`` may
do it from the driver's: starting is done once, under a lock.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from pathlib import Path
from typing import Any

from slime_agent.sections import section

_API: dict[str, Any] = {}
_SOURCES: weakref.WeakSet[Any] = weakref.WeakSet()  # the live rollout-buffer sources
_LOCK = threading.RLock()  # starting the API and a task; pausing the API


def track_source(source: Any) -> None:
    """A rollout-buffer source of this process (started at run start, stopped at its end)."""
    _SOURCES.add(source)


def forget_source(source: Any) -> None:
    _SOURCES.discard(source)


def live_sources() -> list[Any]:
    return list(_SOURCES)


def run_agent_api(config: Any) -> Any:
    """The run's agent API (:class:`~slime_agent.api.AgentApiServer` from ``[agent_api]``)
    in front of this process's rollout engines: started on first use, the same server the
    rollout buffer hands to workers, stopped at the run's end (``slime_run_end``).

    Its ``url`` and ``token`` serve OpenAI clients; ``session_url(id)`` is a base URL that
    records into session ``id``; ``finish_session(id, reward=..., ...)`` (from any thread but
    the server's) returns the session as samples. Raises ``RuntimeError`` where this process
    has no rollout engines (no rollout manager).
    """
    with _LOCK:
        api = _API.get("server")
        if api is None:
            from slime_agent.api import AgentApiServer

            clients = _engine_clients()
            if not clients:
                raise RuntimeError("the agent API serves the rollout engines of this process, "
                                   "and it has none (no rollout manager here)")
            api = AgentApiServer.from_config(config, [c.engine for c in clients])
            if _API.get("paused"):  # started while a weight update is under way
                api.pause()
            if _API.get("rollouts_held"):
                api.hold_rollouts()
            _API["server"] = api.start()
        return api


def _mark(key: str, value: bool) -> Any:
    """Record ``key`` (what an agent API started later begins with: see
    :func:`run_agent_api`) and return the running server, if any."""
    with _LOCK:
        _API[key] = value
        return _API.get("server")


def pause_agent_api() -> None:
    """Hold this process's agent API for a weight update (see
    :meth:`~slime_agent.api.AgentApiServer.pause`); returns once none of its engine calls
    runs. A no-op without one."""
    api = _mark("paused", True)
    if api is not None:
        api.pause()


def resume_agent_api() -> None:
    """Let the agent API's held requests go on (with the weights the engines hold now)."""
    api = _mark("paused", False)
    if api is not None:
        api.resume()


def hold_rollouts() -> None:
    """Hold the engine calls of the generator's episodes (the sessions
    :meth:`~slime_agent.api.AgentApiServer.track` ed) in this process's agent API; returns
    once none of them runs. Without an API yet, one started meanwhile starts held."""
    api = _mark("rollouts_held", True)
    if api is not None:
        api.hold_rollouts()


def release_rollouts(end: bool) -> None:
    """Let the held episodes' calls go on, or (``end``) refuse them: the run is ending (an
    API started later serves a new run, so nothing of ``end`` outlives this one)."""
    api = _mark("rollouts_held", False)
    if api is not None:
        api.release_rollouts(end)


def agent_api_counters() -> dict[str, int]:
    """``continued_calls`` of this process's agent API (calls aborted by a weight update
    and continued after it); empty without one."""
    api = _API.get("server")
    return {"continued_calls": api.continued} if api is not None else {}


def _engine_clients() -> list[Any]:
    """The engine clients of this process's rollout manager (its run context): what
    :func:`run_agent_api` serves."""
    from slime_core.api import run_context

    return list(run_context().engine_clients)


def start_task(config: Any, source: Any) -> None:
    """Start the agent API (if configured) and the source's task with its address, unless
    another thread did already."""
    with _LOCK:
        if source.started:
            return
        engine = None
        context = None
        if section(config, "rollout_buffer").serve_engine_api:
            api = run_agent_api(config)
            engine = {"base_url": api.url, "token": api.token, "model": api.model_name}
            if api.vocab_size:  # the buffer then refuses writes with larger token ids
                engine["vocab_size"] = api.vocab_size
            context = api.context_length
        else:  # workers generate elsewhere; the engines here still know the model's context
            from slime_agent.api import engine_int

            clients = _engine_clients()
            context = engine_int(clients[0].engine, "context_length") if clients else None
        # the buffer then refuses samples longer than the model's context
        source.start(engine, context_length=context)


def prepare_services(config: Any, run_dir: str) -> Path | None:
    """At run start: start the task of every buffer source, write the service file."""
    for src in live_sources():
        if not src.started:
            start_task(config, src)
    return write_service_file(run_dir)


def write_service_file(run_dir: str) -> Path | None:
    """``<run_dir>/agent_services.json`` (mode 0600): URLs and tokens for agent workers."""
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
    for src in live_sources():
        src.close()
    _API.pop("paused", None)
    _API.pop("rollouts_held", None)
    api = _API.pop("server", None)
    if api is not None:
        api.stop()
