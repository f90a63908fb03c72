"""Fully-asynchronous rollout (``run.rollout_mode = "fully_async"``): the engines generate
continuously into a bounded buffer of completed groups while the trainer consumes it.

Lives in the rollout manager's process (the ``core run`` process with the local executor, the
rollout manager actor with the ray executor), beside the :class:`RolloutManager` whose
generate, reward and filter paths it uses, on its own thread and event loop.

* **Bound**: at most ``run.async_buffer_groups`` groups are held at once, completed ones in
  the buffer plus those in generation; a new prompt is taken from the data source only when a
  group leaves (the trainer took it, or a filter dropped it).
* **Rounds**: every pending sample of every group in generation is sent in one round, so
  each engine gets them as one batched call; a group taken from the data source meanwhile
  joins the next round, a complete one is rewarded and filtered beside it.
* **Weight updates**: :meth:`StreamingRollout.pause` aborts the calls in flight and waits until
  none runs; the aborted samples keep their tokens (status back to PENDING: the partial-rollout
  path of ``default_generate``, which asks only for the remaining budget) and continue after
  :meth:`StreamingRollout.resume` with the new weights; the samples that finished in the
  aborted call leave for the buffer, so a few long samples do not hold back the rest.
  ``Sample.weight_versions`` lists the versions that generated the response, in order.
  ``rollout.mask_offpolicy_in_partial_rollout`` masks the tokens generated before an update,
  as for partial rollouts.
* **Held rollouts** (a plugin whose ``slime_generate`` runs a whole agent episode, e.g.
  ``agent.entrypoint``): aborting would restart the episode from its prompt at every update,
  so an episode longer than the interval between updates would never finish. The pause
  first fires ``slime_hold_rollouts``; a plugin that answers ``True`` holds the engine calls
  of the rollouts it serves (suspended, continued after the update) and promises that they
  reach the engines only through it, so the pause returns without waiting for those rounds:
  they stay in flight, and :meth:`resume` fires ``slime_release_rollouts``. A hook, not a
  count of engine calls in flight: an episode between two calls runs no engine call yet may
  start one during the update, and only the plugin that serves its calls can stop that. The
  generator's clients are ``holdable`` (an evaluation's are not), so the plugin holds the
  generator's rollouts only. :meth:`snapshot` releases held rounds and waits for them to
  end (a running episode cannot be written down); :meth:`stop` ends them
  (``slime_release_rollouts(end=True)``).
* **Chunks**: with ``run.async_chunk_tokens = C`` each engine call generates at most C new
  tokens of a sample; a sample cut by the chunk (not by ``rollout.max_new_tokens``) goes on in
  the next round. For runs whose weight updates are rare (``weights.update_interval > 1``):
  without an update no abort ends a long call.
* **Staleness** (``run.max_staleness = N``; staleness = trainer version when trained minus
  ``weight_versions[0]``): a pending partial sample that is already more than N versions old
  is restarted from its prompt before its next call (``rollout/stale_restarted``); a buffered
  group holding a sample staler than N when the trainer takes it is discarded, its prompt goes
  back to the data source to be generated again (``rollout/stale_dropped`` counts its
  samples).
* **Engine failures**: the generator's clients wrap the manager's engine objects, so an engine
  that its executor restarts is the one the next call reaches (under ``ray`` the actor handle
  survives the restart and :class:`~slime_core.executors.ray_workers.RemoteEngine` re-sends a
  call whose engine died, once the supervisor has restarted and re-synced it, or answers it
  as aborted when a pause came meanwhile). An error that still leaves a round (a lost engine
  without ``run.fault_tolerance``: ``EngineLostError``, naming it) stops the generator, and
  the next :meth:`StreamingRollout.pause` or :meth:`StreamingRollout.take` raises it, so the
  run ends on that cause rather than on the weight sync that would reach the dead engine.
* **Groups generated elsewhere** (a data source that ``delivers_finished_samples``, e.g. the
  agentic rollout buffer: :class:`slime_hookspecs.FinishedGroupSource`): the generator
  generates nothing; it polls the source without waiting (every ``POLL_S`` while groups are
  out), which keeps at most what the bound leaves open with the workers (the source's
  ``open_groups`` count as in generation), and rewards the unscored samples of each group
  that comes back, then ``slime_after_generate`` and the filters, as for its own groups.
  :meth:`StreamingRollout.pause` calls the source's ``pause_generation`` instead of
  aborting engine calls (the source holds its workers' calls and says what becomes of
  them), :meth:`StreamingRollout.resume` its ``resume_generation``. Staleness is judged
  from the ``weight_versions`` the workers' samples carry; a group still with the workers
  cannot be restarted from here, so only the drop at a take applies.
* **Records**: every group taken from the data source is, at any pause, in exactly one place:
  trained, in the buffer, in generation (with its partial responses; for a source of
  finished groups: open with the workers, which the source's own state holds), or back in
  the data source. :meth:`snapshot` (paused) writes the buffer and the groups in
  generation; a resumed run :meth:`restore` s them with the data source's state of the same
  instant, so no group is trained twice or lost (not the same samples as an uninterrupted
  run: timing decides what completes when).

Thread safety: the data source, the buffer and the in-generation table are touched only with
``self._cond`` held (but a finished-groups source's pause pair, called while paused, when no
poll can run: it may wait for the workers' engine calls); engine calls run on worker threads (``asyncio.to_thread``), an
evaluation's engine calls may run beside them (the engines serialise calls; the generator has
its own :class:`EngineClient` objects, so no batching state is shared with an evaluation).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
import warnings
from collections import Counter, deque
from typing import Any, cast

from slime_core.api import EngineClient, RolloutManager, async_buffer_groups, sampling_params
from slime_hookspecs import FinishedGroupSource, RolloutResult, Sample, SamplingParams, Status

SNAPSHOT_FORMAT = "slime.fully_async/1"
POLL_S = 0.1  # between polls of a source of finished groups while nothing came back
FINISHED_SOURCE_METHODS = ("poll_finished", "open_groups", "pause_generation",
                           "resume_generation")


def _warn_bypassed_rollouts(manager: Any) -> None:
    """A plugin's ``slime_rollout`` is not asked for training rollouts in this mode (the
    generator takes groups one by one; evaluations still go through the hook). Whether an
    implementation answers training calls cannot be known without calling it, so this warns,
    naming each plugin; a plugin that knows it does refuses the mode itself. The core's and
    the default plugins' own (a rollout manager's default, slime-std's SFT rollout, which
    answers only ``train.loss = "sft"``) are not named."""
    infos = getattr(manager, "infos", {})
    names = []
    for impl in manager.pluggy.hook.slime_rollout.get_hookimpls():
        if impl.wrapper or impl.hookwrapper:
            continue
        plugin = impl.plugin
        module = getattr(plugin, "__name__", None) if inspect.ismodule(plugin) \
            else type(plugin).__module__
        info = infos.get(impl.plugin_name)
        if str(module).startswith("slime_core.") or (
                info is not None and info.source in ("builtin", "default")):
            continue
        names.append(impl.plugin_name)
    if names:
        warnings.warn(
            f"run.rollout_mode = \"fully_async\": plugin(s) {', '.join(sorted(names))} implement "
            "slime_rollout, which this mode does not call for training rollouts (the generator "
            "builds each group through slime_generate, the rewards and the filters; evaluations "
            "still go through slime_rollout); if a plugin replaces the training rollout, use "
            "run.rollout_mode = \"one_step_off\"", stacklevel=3)


class StreamingRollout:
    """The continuous generator of one run (see the module docstring). Driver-side calls:
    :meth:`resume` (starts it), :meth:`take`, :meth:`pause`, :meth:`snapshot`,
    :meth:`restore` (before the first resume), :meth:`stop`."""

    def __init__(self, manager: RolloutManager) -> None:
        config = manager.config
        source = manager.train_source
        # groups generated elsewhere (agent workers): polled, rewarded and filtered here
        self.finished = bool(getattr(source, "delivers_finished_samples", False))
        missing = [m for m in FINISHED_SOURCE_METHODS
                   if self.finished and not callable(getattr(source, m, None))]
        if missing:
            raise ValueError(
                f"run.rollout_mode = \"fully_async\": the data source "
                f"{getattr(source, 'kind', type(source).__name__)!r} (data.source) delivers "
                f"finished groups but has no {', '.join(missing)} (slime_hookspecs."
                "FinishedGroupSource), which this mode calls; implement them in the source or "
                "use run.rollout_mode = \"one_step_off\"")
        if manager.has_teacher_engine:
            raise ValueError(
                "run.rollout_mode = \"fully_async\" with [opd] mode = \"engine\" (a teacher "
                "engine scoring each rollout) is not supported yet; use \"one_step_off\"")
        _warn_bypassed_rollouts(manager.manager)
        self.m, self.config, self.source = manager, config, source
        self.capacity = async_buffer_groups(config)
        self.chunk = int(config.run.async_chunk_tokens)
        self.max_staleness = int(config.run.max_staleness)
        self.params: SamplingParams = sampling_params(config, False)
        # own clients: an evaluation on the driver's thread uses the manager's at the same time;
        # the engine objects are the manager's, which stay valid across an engine's restart
        self.clients = [EngineClient(c.engine, config.rollout.generate_batch_size, c.index,
                                     holdable=True) for c in manager.clients]
        self._cond = threading.Condition()
        self.buffer: deque[list[Sample]] = deque()
        self.inflight: dict[int, list[Sample]] = {}
        self._next_key = 0
        self._paused = True
        self._stopping = False
        self._started = False
        self._calls = 0  # generate rounds in flight
        # a plugin holds the engine calls of the rounds in flight (slime_hold_rollouts)
        self._held = False
        self._version = 0  # the engines' weight version (what a resumed round generates with)
        self._step = 0  # the step the trainer is on (slime_after_generate's rollout_id)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stats: Counter[str] = Counter()  # since the last take
        self._filtered: list[list[Sample]] = []  # dropped by dynamic sampling since the last take
        self._last_take = time.perf_counter()
        self.max_held = 0  # most groups held at once (buffer + in generation): tests check it

    # -- driver side -------------------------------------------------------------------------
    def resume(self, version: int) -> None:
        """Generate with weight version ``version`` (the engines hold it now); starts the
        generator on its first call."""
        if self.finished:  # still paused here: no poll runs beside it
            self._finished_source.resume_generation()
        elif self._held:  # the held calls go on with the weights the engines hold now
            self._release(end=False)
        with self._cond:
            self._version = int(version)
            self._paused = False
            start = not self._started
            self._started = True
        if start:
            for c in self.clients:  # a new run draws its own samples, not a copy of step 0's
                if hasattr(c.engine, "reseed"):
                    c.engine.reseed(self.config.run.seed * 1_000_003 + 7919 + c.index)
            self._thread = threading.Thread(target=self._thread_main, name="slime-fully-async",
                                            daemon=True)
            self._thread.start()
        else:
            self._poke()

    def pause(self) -> None:
        """Stop generating: abort the engine calls in flight and return once none runs (their
        samples keep their partial responses and continue at :meth:`resume`), or, where a
        plugin holds the rounds' engine calls (``slime_hold_rollouts``), once it says none
        of them runs (the rounds stay in flight, suspended, and go on at :meth:`resume`).
        Raises the generator's error if it stopped on one."""
        with self._cond:
            if self._paused:
                return
            self._paused = True
        if self.finished:  # no engine call of its own; the workers' are the source's
            self._finished_source.pause_generation()
        else:
            # asked first: aborting the engines before the plugin holds would end its calls
            # as aborted answers instead of held ones
            self._held = bool(self.m.manager.hook.slime_hold_rollouts(config=self.config))
            if not self._held:
                self._drain()
        with self._cond:
            # a weight sync or a save follows: with a lost engine it would fail on that engine
            # with a message about the trainer ranks or the transport; name the cause instead
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(
                f"fully-async generation failed: {type(self._error).__name__}: "
                f"{self._error}") from self._error

    def _drain(self) -> None:
        while True:
            # again every 50 ms: a call that reached its engine after an abort is not ended
            # by it (aborts end the calls that have started)
            for c in self.clients:
                c.abort()
            with self._cond:
                if self._calls == 0 or self._error is not None or self._thread is None \
                        or not self._thread.is_alive():
                    return
                self._cond.wait(0.05)

    def take(self, n: int, version: int, step: int) -> tuple[RolloutResult, float]:
        """``n`` completed groups, oldest first, for the trainer at weight version ``version``
        training step ``step``, and the seconds waited for them. A buffered group staler than
        ``run.max_staleness`` is discarded and its prompt generated again."""
        t0 = time.perf_counter()
        out: list[list[Sample]] = []
        stale = 0
        with self._cond:
            self._step = step
            while len(out) < n:
                self._raise_if_failed()
                while self.buffer and len(out) < n:
                    group = self.buffer.popleft()
                    if self._too_stale(group, version):
                        stale += len(group)
                        self.source.add_samples([[self.m.reset_for_buffer(s, fresh=True)
                                                  for s in group]])
                        continue
                    out.append(group)
                self._poke()  # room for new prompts
                if len(out) < n:
                    if self._paused or not self._started:
                        raise RuntimeError(
                            f"fully-async: step {step} waits for {n - len(out)} more groups, "
                            "but generation is paused")
                    self._cond.wait(0.5)
            waited = time.perf_counter() - t0
            for g in out:
                for s in g:
                    s.rollout_id = step
            window = time.perf_counter() - self._last_take
            self._last_take = time.perf_counter()
            stats, self._stats = self._stats, Counter()
            filtered, self._filtered = self._filtered, []
            metrics: dict[str, float] = {
                "rollout/stale_dropped": float(stale),
                "rollout/stale_restarted": float(stats["stale_restarted"]),
                "rollout/partial_resumed": float(stats["partial_resumed"]),
                "rollout/groups_generated": float(stats["completed"]),
                "rollout/buffer_groups": float(len(self.buffer)),
                "rollout/inflight_groups": float(self._in_generation()),
                "rollout/held_groups_max": float(self.max_held),
                "perf/rollout_time": window,  # the generation window this batch came from
                "perf/rollout_wait_time": waited,
            }
            for key, value in stats.items():
                if key.startswith("dropped/"):
                    metrics[f"rollout/{key}"] = float(value)
            source_metrics = getattr(self.source, "metrics", None)
            if self.finished and source_metrics is not None:
                metrics.update(source_metrics())  # e.g. rollout_buffer/*, as in the sync modes
            # under the lock: a plugin that edits the data source here races no generator
            self.m.finish_batch(out, out + filtered, self.source)
        return RolloutResult(groups=out, metrics=metrics), waited

    def snapshot(self) -> dict[str, Any]:
        """The buffer and the groups in generation, JSON-ready; only while paused (the data
        source's state of the same instant belongs with it).

        Rounds held by a plugin (``slime_hold_rollouts``) cannot be written down (an agent
        episode is a running program): they are released and waited for. Still paused, no
        new round starts, and the weights do not change before the :meth:`resume` that
        follows a save, so they finish as they would have; the save takes as long as the
        longest of them (bounded by the plugin's own timeout, e.g. ``agent.timeout_s``).
        Ending them instead would restart every episode in flight at each save, which
        for episodes longer than ``run.save_interval`` steps is the livelock the hold
        exists to avoid."""
        with self._cond:
            held = self._paused and self._held and self._calls > 0
        if held:
            self._release(end=False)
            with self._cond:
                while self._calls and self._error is None and self._thread is not None \
                        and self._thread.is_alive():
                    self._cond.wait(0.5)
                self._raise_if_failed()
        with self._cond:
            if not self._paused or self._calls:
                raise RuntimeError("fully-async: snapshot() while generating; pause() first")
            return {"format": SNAPSHOT_FORMAT,
                    "buffer": [[s.to_dict() for s in g] for g in self.buffer],
                    "inflight": [[s.to_dict() for s in g] for g in self.inflight.values()]}

    def restore(self, state: dict[str, Any]) -> None:
        """Take back a :meth:`snapshot` (before the first :meth:`resume`)."""
        if state.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"fully-async state: format {state.get('format')!r}, expected "
                             f"{SNAPSHOT_FORMAT!r}")
        with self._cond:
            if self._started:
                raise RuntimeError("fully-async: restore() after the generator started")
            self.buffer = deque([Sample.from_dict(d) for d in g] for g in state["buffer"])
            self.inflight = {}
            for g in state["inflight"]:
                self._register([Sample.from_dict(d) for d in g])

    def stop(self) -> None:
        """End the generator (aborting what runs); the buffer's content stays readable."""
        with self._cond:
            self._stopping = True
            self._paused = True
        if not self.finished:  # the workers' calls end with the source (slime_run_end)
            # held rollouts would wait for a resume that will not come
            self._release(end=True)
            self._drain()
        self._poke()
        if self._thread is not None:
            self._thread.join(timeout=120)

    def _release(self, end: bool) -> None:
        self._held = False
        self.m.manager.hook.slime_release_rollouts(config=self.config, end=end)

    def state(self) -> dict[str, int]:
        """Sizes, for tests and logs: buffer, in generation, most held at once, capacity."""
        with self._cond:
            return {"buffer": len(self.buffer), "inflight": self._in_generation(),
                    "max_held": self.max_held, "capacity": self.capacity}

    # -- generator side ----------------------------------------------------------------------
    def _poke(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            if self._wake is not None:
                loop.call_soon_threadsafe(self._wake.set)
        except RuntimeError:  # the loop closed meanwhile (stop)
            pass

    @property
    def _finished_source(self) -> FinishedGroupSource:
        """``self.source`` where ``self.finished`` (checked in ``__init__`` to have the methods)."""
        return cast(FinishedGroupSource, self.source)

    def _in_generation(self) -> int:
        """Groups in generation: in the table, and open with the workers of a source of
        finished groups (``self._cond`` held)."""
        return len(self.inflight) + (self._finished_source.open_groups() if self.finished else 0)

    def _register(self, group: list[Sample]) -> int:
        key = self._next_key
        self._next_key += 1
        self.inflight[key] = group
        self.max_held = max(self.max_held, len(self.buffer) + self._in_generation())
        return key

    def _too_stale(self, group: list[Sample], version: int) -> bool:
        return any(s.weight_versions and version - s.weight_versions[0] > self.max_staleness
                   for s in group)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - surfaces at the next take()
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    async def _main(self) -> None:
        with self._cond:
            self._loop = asyncio.get_running_loop()
            self._wake = asyncio.Event()
        rewarding: dict[int, asyncio.Task[None]] = {}

        def rewarded(key: int, task: asyncio.Task[None]) -> None:
            rewarding.pop(key, None)
            if not task.cancelled() and task.exception() is not None:
                with self._cond:
                    if self._error is None:
                        self._error = task.exception()
                    self._cond.notify_all()
            assert self._wake is not None
            self._wake.set()

        while True:
            polled = False
            with self._cond:
                if self._stopping or self._error is not None:
                    break
                if not self._paused:
                    room = self.capacity - len(self.buffer) - len(self.inflight)
                    if self.finished:
                        # the source keeps at most `room` open with its workers
                        for g in self._finished_source.poll_finished(max(room, 0)):
                            if g:
                                for x in g:
                                    x.rollout_id = self._step
                                self._register(g)
                        self.max_held = max(self.max_held,
                                            len(self.buffer) + self._in_generation())
                        polled = self._finished_source.open_groups() > 0
                    elif room > 0:
                        for g in self.source.get_samples(room):
                            if g:
                                self._register(g)
                # complete groups (also restored ones) are scored beside the next round
                for key, group in self.inflight.items():
                    if key not in rewarding and not any(x.status == Status.PENDING for x in group):
                        task = asyncio.ensure_future(self._finish(key))
                        rewarding[key] = task
                        task.add_done_callback(functools.partial(rewarded, key))
                todo = [] if self._paused else [
                    (key, i) for key, group in self.inflight.items() if key not in rewarding
                    for i, x in enumerate(group) if x.status == Status.PENDING]
                if todo:
                    self._calls += 1
            if not todo:
                if polled:  # groups are with the workers: look again soon
                    try:
                        await asyncio.wait_for(self._wake.wait(), POLL_S)
                    except asyncio.TimeoutError:
                        pass
                else:
                    await self._wake.wait()
                self._wake.clear()
                continue
            try:
                await self._round(todo)
            except BaseException as exc:
                with self._cond:  # recorded before the round counts as ended: see pause()
                    if self._error is None:
                        self._error = exc
                raise
            finally:
                with self._cond:  # settled before pause() can see no round in flight
                    self._calls -= 1
                    self._cond.notify_all()
        for t in list(rewarding.values()):
            t.cancel()
        await asyncio.gather(*rewarding.values(), return_exceptions=True)

    async def _round(self, todo: list[tuple[int, int]]) -> None:
        """One engine call's worth for every pending sample of every group in generation: all
        requests are submitted in one turn of the loop, so each engine gets them as one batch
        (per-group loops drifted into cohorts that took turns at the engine)."""
        with self._cond:
            groups = {key: self.inflight[key] for key, _ in todo}
        for group in groups.values():
            self._restart_stale(group)
        before = {(key, i): groups[key][i].response_length for key, i in todo}
        outs = await asyncio.gather(*(
            self.m.generate(groups[key][i], self._params(groups[key][i]),
                            self.clients[groups[key][0].group_index % len(self.clients)])
            for key, i in todo))
        results: dict[int, dict[int, Sample | list[Sample]]] = {}
        for (key, i), out in zip(todo, outs, strict=True):
            results.setdefault(key, {})[i] = out
        with self._cond:
            for key, done in results.items():
                self.inflight[key] = self._merge(groups[key], done,
                                                 {i: before[(key, i)] for i in done})

    async def _finish(self, key: int) -> None:
        """Reward a complete group, run the per-sample hook and the dynamic-sampling filters,
        then move it to the buffer (or count it dropped)."""
        with self._cond:
            group = self.inflight[key]
        # a worker may have scored its samples already (the agent's own reward)
        await self.m.score_group(group, self._step, False, unscored_only=self.finished)
        dropped: dict[str, int] = {}
        keep = self.m.keep_group(group, dropped)
        with self._cond:
            del self.inflight[key]
            if keep:
                self.buffer.append(group)
                self._stats["completed"] += 1
            else:
                self._filtered.append(group)
                for reason, count in dropped.items():
                    self._stats[f"dropped/{reason}"] += count
            self._cond.notify_all()

    def _params(self, s: Sample) -> SamplingParams:
        # default_generate asks for max_new_tokens - response_length: the chunk's end
        if not self.chunk:
            return self.params
        return self.params.replace(
            max_new_tokens=min(self.params.max_new_tokens, s.response_length + self.chunk))

    def _restart_stale(self, group: list[Sample]) -> None:
        """A pending sample already staler than the bound would be dropped when trained on:
        start it again from its prompt with the current weights."""
        for i, s in enumerate(group):
            if (s.status == Status.PENDING and s.weight_versions
                    and self._version - s.weight_versions[0] > self.max_staleness):
                group[i] = self.m.reset_for_buffer(s, fresh=True)
                self._stats["stale_restarted"] += 1

    def _merge(self, group: list[Sample], results: dict[int, Sample | list[Sample]],
               before: dict[int, int]) -> list[Sample]:
        """The group after a round: each generated sample settled (aborted: continues after
        the update; cut by a chunk: continues in the next call); a ``slime_generate`` that
        returned several samples contributes them all."""
        merged: list[Sample] = []
        for i, s in enumerate(group):
            got = results.get(i, s)
            for out in got if isinstance(got, list) else [got]:
                merged.append(self._settle(out, before[i]) if i in results else out)
        return merged

    def _settle(self, s: Sample, length_before: int) -> Sample:
        if s.status == Status.ABORTED:
            s.status = Status.PENDING
            self._stats["partial_resumed"] += 1
            if self.config.rollout.mask_offpolicy_in_partial_rollout:
                s.loss_mask = [0] * s.response_length
        elif (s.status == Status.TRUNCATED and self.chunk
              and length_before < s.response_length < self.params.max_new_tokens):
            # cut by the chunk, not by the budget (a call that added nothing, e.g. at the
            # context limit, ends the sample instead of asking again forever)
            s.status = Status.PENDING
        return s
