"""The ``rollout_buffer`` data source: training groups come back finished from agent workers.

``data.source = "rollout_buffer"``. Prompts still come from a data source record
(``rollout_buffer.prompt_source``, ``jsonl`` by default, reading ``data.path``); this source
queues them in the buffer service as jobs, agent workers run the episodes (usually through
the agent API in front of the engines) and write the trajectories back, and
:meth:`RolloutBufferSource.get_samples` returns complete groups. Because its groups are already
generated (``delivers_finished_samples``), the rollout manager takes them instead of
generating (see :mod:`slime_core.rollout.manager`); the eval split is the prompt source's own
eval split, generated locally. The first fetch starts the task with the agent API's address
(:mod:`slime_agent.buffer.services`) unless ``slime_run_start`` did.

With ``rollout_buffer.url`` empty the service runs in this process (``host``/``port``, a
random token unless ``token`` is set); otherwise the source connects to that URL with
``token`` or the ``SLIME_ROLLOUT_BUFFER_TOKEN`` environment variable.

For every fetch the source keeps enough prompts queued (the groups asked for plus
``prefetch_groups``, minus those already queued), waits at most ``rollout_buffer.timeout_s``
for complete groups and fails naming the partial groups and the counters if they do not come.
Invalid groups (every sample failed) are reported by the service, counted, and their prompts
replaced by fresh ones. ``state_dict`` holds the prompt source's state and the groups still in
the service, which a resumed run queues again at its first fetch (after the engines hold the
trainer's weights).

In fully-async mode (``run.rollout_mode = "fully_async"``) the generator calls the methods of
:class:`slime_hookspecs.FinishedGroupSource` instead of :meth:`~RolloutBufferSource.get_samples`:

* :meth:`~RolloutBufferSource.poll_finished` never waits: it keeps the groups open in the
  service (queued, with the workers, or complete and not yet fetched) at what the generator's
  bound leaves (``run.async_buffer_groups`` minus the groups it holds;
  ``rollout_buffer.prefetch_groups`` does not apply) and fetches the complete ones. It fails
  when no group comes back complete for ``rollout_buffer.timeout_s`` of generation (pauses
  for weight updates and checkpoints do not count).
* :meth:`~RolloutBufferSource.pause_generation` / ``resume_generation`` bracket every weight
  update: the agent API this process serves to the workers holds their requests, and the
  engine calls in flight are aborted and continued with the new weights, so no episode is
  lost or restarted (:meth:`slime_agent.api.AgentApiServer.pause`). Workers that generate
  elsewhere (``serve_engine_api = false``) are not paused.
* Staleness: the agent API records the engines' weight version on every token it serves
  (``Sample.weight_versions``); a group whose first token is staler than ``run.max_staleness``
  when a step takes it is dropped and its prompt queued again. A sample written without
  versions (not generated through the agent API) cannot be judged and is trained.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from typing import Any

from slime_hookspecs import Sample, Status

from slime_agent.buffer.client import RolloutBufferClient
from slime_agent.buffer.services import (
    agent_api_counters,
    forget_source,
    pause_agent_api,
    resume_agent_api,
    start_task,
    track_source,
)
from slime_agent.http import HttpError
from slime_agent.sections import section

STATE_FORMAT = "slime.rollout_buffer/1"
TOKEN_ENV = "SLIME_ROLLOUT_BUFFER_TOKEN"


def make_rollout_buffer_source(config: Any, split: str) -> Any:
    """The record's factory: the buffer source for ``train``, the prompt source for ``eval``."""
    from slime_core.api import get_manager

    cfg = section(config, "rollout_buffer")
    if cfg.prompt_source == "rollout_buffer":
        raise ValueError("rollout_buffer.prompt_source cannot be rollout_buffer itself; name the "
                         "source of the prompts (jsonl, parquet, reasoning_gym, ...)")
    try:
        rec = get_manager().registries.data_source.get(cfg.prompt_source)
    except (KeyError, RuntimeError) as exc:
        raise type(exc)(f"rollout_buffer.prompt_source: {exc}") from None
    prompts = rec.factory(config, split)
    if split == "eval":
        return prompts
    return RolloutBufferSource(config, prompts)


class RolloutBufferSource:
    """See the module docstring."""

    kind = "rollout_buffer"
    delivers_finished_samples = True

    def __init__(self, config: Any, prompts: Any) -> None:
        self.config = config
        self.settings = cfg = section(config, "rollout_buffer")
        self.prompts = prompts
        self.server: Any = None
        if cfg.url:
            token = cfg.token or os.environ.get(TOKEN_ENV, "")
            if not token:
                raise ValueError(f"rollout_buffer.url is set but no token: set "
                                 f"rollout_buffer.token or the {TOKEN_ENV} environment variable")
            self.url, self.token = cfg.url.rstrip("/"), token
        else:
            from slime_agent.buffer.server import RolloutBufferServer

            self.server = RolloutBufferServer(cfg.host, cfg.port, cfg.token,
                                              allow_remote=cfg.allow_remote,
                                              task_timeout_s=cfg.task_timeout_s,
                                              max_body_mb=cfg.max_body_mb,
                                              header_timeout_s=cfg.header_timeout_s).start()
            self.url, self.token = self.server.url, self.server.token
            print(f"rollout buffer: serving on {self.url} (token: rollout_buffer.token, or "
                  "agent_services.json in the run directory)", file=sys.stderr)
        self.client = RolloutBufferClient(self.url, self.token)
        try:
            self.client.status()
        except (OSError, HttpError) as exc:
            raise ConnectionError(f"rollout_buffer.url {self.url}: the rollout buffer does not "
                                  f"answer ({exc}); start it with `core rollout-buffer`") from None
        self.started = False
        self.engine: dict[str, Any] | None = None
        self.queued: dict[str, list[Sample]] = {}  # instance id -> the PENDING group
        self._to_queue: list[list[Sample]] = []  # groups to queue before fresh ones
        self.last_report: dict[str, Any] = {}
        self.counters = {"invalid_groups": 0, "replaced_groups": 0, "wait_time": 0.0}
        self.polling = False  # fully-async: poll_finished, not get_samples, fetches
        self._stalled_since: float | None = None  # poll_finished: since no group came back
        track_source(self)

    # -- task ----------------------------------------------------------------------------------
    def start(self, engine: dict[str, Any] | None = None,
              context_length: int | None = None) -> None:
        """Start (or restart) the task in the service; queued groups are sent again.

        The task carries the trainer's bounds on written samples, so a service in another
        process applies them too: ``rollout.max_abs_reward``, and as ``max_context_len``
        ``rollout.max_context_len`` when set, else ``context_length`` (the model's context,
        known where the engines are)."""
        cfg, r = self.settings, self.config.rollout
        tools = section(self.config, "tools")
        task = {
            "group_size": int(r.n_samples_per_prompt),
            "engine": engine,
            "sampling": {"temperature": r.temperature, "top_p": r.top_p,
                         "max_tokens": r.max_new_tokens},
            "tools": list(tools.enabled), "max_turns": tools.max_turns,
            "task_type": cfg.task_type, "task_kwargs": dict(cfg.task_kwargs),
        }
        if engine and engine.get("vocab_size"):  # writes with larger ids are refused (422)
            task["vocab_size"] = int(engine["vocab_size"])
        task["max_abs_reward"] = float(r.max_abs_reward)
        task["max_context_len"] = int(r.max_context_len) or context_length or None
        self.client.start(task)
        self.engine, self.started = engine, True
        # groups restored from a checkpoint (_to_queue) wait for the first fetch: queued here
        # at run start, workers would generate them before the first weight sync
        pending = list(self.queued.values())
        self.queued = {}
        self._queue(pending)

    def _queue(self, groups: list[list[Sample]]) -> None:
        if not groups:
            return
        items = []
        for g in groups:
            iid = f"g{g[0].group_index}"
            self.queued[iid] = g
            items.append({"instance_id": iid, "samples": [s.to_dict() for s in g]})
        self.client.add_prompts(items)

    # -- DataSource protocol ---------------------------------------------------------------------
    def get_samples(self, num_groups: int, rollout_id: int | None = None) -> list[list[Sample]]:
        """``num_groups`` complete groups from the workers (see the module docstring)."""
        if num_groups is None or num_groups < 1:
            raise ValueError("the rollout_buffer source hands out a positive number of groups")
        if not self.started:  # not started at slime_run_start (the source is not the driver's)
            start_task(self.config, self)
        cfg = self.settings
        want = num_groups + cfg.prefetch_groups - len(self.queued)
        fresh: list[list[Sample]] = []
        if self._to_queue:
            fresh, self._to_queue = self._to_queue, []
        if want > len(fresh):
            fresh += self.prompts.get_samples(want - len(fresh))
        self._queue(fresh)
        got: list[list[Sample]] = []
        t0 = time.monotonic()
        deadline = t0 + cfg.timeout_s
        while len(got) < num_groups:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(self._shortfall(len(got), num_groups))
            resp = self.client.get_rollout_data(num_groups - len(got), min(cfg.poll_s, left))
            groups, invalid = self._receive(resp)
            got += groups
            if invalid:
                self._queue(self.prompts.get_samples(invalid))
        self.counters["wait_time"] = time.monotonic() - t0
        return got

    def _receive(self, resp: dict[str, Any]) -> tuple[list[list[Sample]], int]:
        """The complete groups of a fetch (no longer queued) and how many were invalid (their
        prompts are for the caller to replace)."""
        self.last_report = resp["report"]
        got = []
        for g in resp["groups"]:
            self.queued.pop(g["instance_id"], None)
            got.append([Sample.from_dict(d) for d in g["samples"]])
        invalid = resp["report"].get("invalid_groups", [])
        if invalid:
            self.counters["invalid_groups"] += len(invalid)
            for item in invalid:
                self.queued.pop(item["instance_id"], None)
            print(f"rollout buffer: {len(invalid)} invalid group(s) replaced by fresh "
                  f"prompts: {invalid}", file=sys.stderr)
            self.counters["replaced_groups"] += len(invalid)
        return got, len(invalid)

    # -- fully-async mode (slime_hookspecs.FinishedGroupSource) ---------------------------------
    def poll_finished(self, max_open: int) -> list[list[Sample]]:
        """Top the groups open in the service up to ``max_open`` (restored and returned
        prompts first), then the complete groups ready now, without waiting (see the module
        docstring)."""
        self.polling = True
        if not self.started:
            start_task(self.config, self)
        want = max_open - len(self.queued)
        if want > 0:
            fresh, self._to_queue = self._to_queue[:want], self._to_queue[want:]
            if want > len(fresh):
                fresh += self.prompts.get_samples(want - len(fresh))
            self._queue(fresh)
        if not self.queued:
            self._stalled_since = None
            return []
        got, _ = self._receive(self.client.get_rollout_data(len(self.queued), 0.0))
        now = time.monotonic()
        # as a synchronous fetch fails when its batch is not complete in timeout_s: here when
        # no group completes in timeout_s of generation (invalid groups do not count)
        if got or self._stalled_since is None:
            self._stalled_since = now
        elif now - self._stalled_since > self.settings.timeout_s:
            raise TimeoutError(
                f"rollout buffer {self.url}: {len(self.queued)} open groups, and none came back "
                f"complete in rollout_buffer.timeout_s={self.settings.timeout_s:g} s of "
                "generation (raise it for longer episodes); invalid groups so far: "
                f"{self.counters['invalid_groups']}; " + self._situation())
        return got

    def open_groups(self) -> int:
        """Groups queued in the service and not yet fetched."""
        return len(self.queued)

    def pause_generation(self) -> None:
        """Hold the agent API for a weight update (its calls in flight continue after it)."""
        pause_agent_api()
        self._stalled_since = None  # the workers cannot progress while paused

    def resume_generation(self) -> None:
        resume_agent_api()
        self._stalled_since = None

    def _shortfall(self, got: int, want: int) -> str:
        return (f"rollout buffer {self.url}: {got} of {want} complete groups after "
                f"rollout_buffer.timeout_s={self.settings.timeout_s:g} s; " + self._situation())

    def _situation(self) -> str:
        rep = self.last_report
        return (
            f"partial groups: {rep.get('partial_groups', [])}; queued jobs "
            f"{rep.get('queued_tasks')}, leased {rep.get('leased_tasks')}; counters "
            f"{rep.get('stats')}; recent errors {rep.get('recent_errors')}. Are agent workers "
            f"pulling GET {self.url}/task?"
        )

    def add_samples(self, groups: list[list[Sample]]) -> None:
        """Groups given back are queued again as prompts (their responses are discarded)."""
        for g in groups:
            self._to_queue.append([_fresh(s) for s in g])

    def metrics(self) -> dict[str, float]:
        """``rollout_buffer/*`` numbers of the last fetch (fully-async: no ``wait_time``,
        since nothing waits here, but ``open_groups`` and the agent API's
        ``continued_calls``)."""
        rep = self.last_report
        stats = rep.get("stats", {})
        m = {
            "rollout_buffer/partial_groups": float(len(rep.get("partial_groups", []))),
            "rollout_buffer/invalid_groups": float(self.counters["invalid_groups"]),
            "rollout_buffer/queued_tasks": float(rep.get("queued_tasks", 0)),
            "rollout_buffer/leased_tasks": float(rep.get("leased_tasks", 0)),
        }
        if self.polling:
            m["rollout_buffer/open_groups"] = float(len(self.queued))
            for key, value in agent_api_counters().items():
                m[f"rollout_buffer/{key}"] = float(value)
        else:
            m["rollout_buffer/wait_time"] = float(self.counters["wait_time"])
        for key in ("invalid_writes", "requeued_tasks", "aborted_writes"):
            m[f"rollout_buffer/{key}"] = float(stats.get(key, 0))
        return m

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT, "kind": self.kind,
            "prompts": self.prompts.state_dict(),
            "queued": [[s.to_dict() for s in g] for g in
                       list(self.queued.values()) + self._to_queue],
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"rollout buffer state has format {state.get('format')!r}, "
                             f"expected {STATE_FORMAT!r} (data.source changed?)")
        self.prompts.load_state_dict(state["prompts"])
        self._to_queue = [[Sample.from_dict(d) for d in g] for g in state.get("queued", [])]
        self.counters.update(state.get("counters", {}))

    def __len__(self) -> int:
        return len(self.prompts)

    def close(self) -> None:
        """Tell the workers to stop and stop the in-process service."""
        try:
            self.client.stop()
        except (OSError, HttpError):
            pass
        if self.server is not None:
            self.server.stop()
            self.server = None
        forget_source(self)


def _fresh(s: Sample) -> Sample:
    out = copy.copy(s)
    out.tokens = s.prompt_tokens
    out.response, out.response_length = "", 0
    out.loss_mask, out.rollout_log_probs, out.weight_versions = [], [], []
    out.status, out.reward, out.error = Status.PENDING, None, None
    out.metadata = copy.deepcopy(s.metadata)
    return out

