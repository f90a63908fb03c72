"""The rollout manager: data sources, engines, rewards, filters; the built-in rollout.

Default rollout of one training step (``slime_rollout`` trylast implementation):

1. take groups from the data source (``rollout.over_sampling_batch_size`` per round);
2. generate every sample concurrently (``slime_generate``; engines batch the requests);
3. reward each finished group with the reward function ``rollout.reward`` names (the
   deprecated ``slime_reward_group`` / ``slime_reward`` hooks first, when a plugin still
   implements them), then ``slime_after_generate`` per sample;
4. dynamic sampling (``rollout.dynamic_sampling_filter``; the deprecated
   ``slime_dynamic_sampling_filter`` too):
   kept groups count towards ``rollout.batch_size``; once the batch is full, in-flight requests
   are aborted through the engine and their groups go back to the data source (with their
   partial responses when ``rollout.partial_rollout``);
5. sample filter (``rollout.sample_filter``; the deprecated ``slime_rollout_sample_filter``
   too) and ``slime_rollout_all_samples``.

A data source whose groups come back already generated (``delivers_finished_samples``: the
rollout buffer, where agent workers run the episodes) replaces steps 1-2: complete groups are
fetched until ``rollout.batch_size`` are kept, samples without a reward are scored as in step
3, and steps 3-5 run unchanged; the source's own ``metrics()`` join the step's metrics.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import sys
import threading
import time
from collections.abc import Set as AbstractSet
from typing import Any

from slime_hookspecs import (
    Config,
    DataSource,
    RolloutResult,
    Sample,
    SamplingParams,
    Status,
    hookimpl,
)

from slime_core.algo.opd import build_teacher_engine, score_with_teacher, teacher_in_engine
from slime_core.context import get_manager, run_context
from slime_core.evaluation.settings import EvalSettings
from slime_core.observe.trace import span
from slime_core.pluginmgr.deprecation import warn_deprecated_impls
from slime_core.rewards.processes import InProcesses
from slime_core.rewards.routing import RewardFunctions, row_reward_name
from slime_core.rewards.validate import RewardValueError, check_reward, summarise_failures
from slime_core.rollout.engine_client import EngineClient, EngineLostError
from slime_core.rollout.engine_host import CallerThreadHost
from slime_core.rollout.hook_answer import FirstAnswer, HookCallError


async def _maybe_await(value: Any) -> Any:
    if isinstance(value, concurrent.futures.Future):  # a reward scored in a worker process
        return await asyncio.wrap_future(value)
    return await value if inspect.isawaitable(value) else value


def sampling_params(config: Any, evaluation: bool) -> SamplingParams:
    r, e = config.rollout, config.eval
    if evaluation:
        return SamplingParams(
            temperature=e.temperature, top_p=e.top_p, top_k=e.top_k,
            max_new_tokens=e.max_new_tokens or r.max_new_tokens,
            stop=list(r.stop), stop_token_ids=list(r.stop_token_ids),
        )
    return SamplingParams(
        temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens,
        stop=list(r.stop), stop_token_ids=list(r.stop_token_ids),
    )


async def default_generate(
    config: Any, sample: Sample, sampling_params: SamplingParams, engine: EngineClient
) -> Sample:
    """Single turn: the prompt ids in, response ids and log-probs appended; never re-tokenized.
    With ``rollout.max_context_len`` the call asks for no more than the context has left; a
    prompt that fills it fails the sample (nothing to generate, nothing to train on)."""
    params = sampling_params
    if sample.response_length:  # resumed partial rollout: only the remaining budget
        params = params.replace(max_new_tokens=max(1, params.max_new_tokens - sample.response_length))
    limit = config.rollout.max_context_len
    if limit:
        room = limit - len(sample.tokens)
        if room <= 0:
            if sample.response_length:  # a continued sample that reached the limit: done
                sample.status = Status.TRUNCATED
            else:
                sample.status, sample.error = Status.FAILED, (
                    f"generate: the prompt has {len(sample.tokens)} tokens, "
                    f"rollout.max_context_len = {limit} leaves no room for a response")
            return sample
        params = params.replace(max_new_tokens=min(params.max_new_tokens, room))
    out = await engine.generate(sample.tokens, params)
    sample.append_response_tokens(
        out.token_ids, out.log_probs, text=out.text, weight_version=out.weight_version
    )
    # the call read the whole sample so far (a continued one included): its record covers it
    sample.rollout_routed_experts = getattr(out, "routed_experts", None)
    sample.status = {
        "stop": Status.COMPLETED, "length": Status.TRUNCATED, "abort": Status.ABORTED,
    }.get(out.finish_reason, Status.COMPLETED)
    return sample


DEFAULT_ROLLOUT_PLUGIN = "rollout_manager"  # the plugin name of a manager's own default


class _DefaultRollout:
    """A rollout manager's own ``slime_rollout``, registered ``trylast`` on its plugin manager:
    any plugin that answers wins, every wrapper (traces, dumps) still wraps it, and no process
    global leads back to the manager."""

    def __init__(self, manager: RolloutManager) -> None:
        self._manager = manager

    @hookimpl(trylast=True)
    def slime_rollout(self, config: Config, rollout_id: int, data_source: DataSource,
                      evaluation: bool) -> RolloutResult:
        return self._manager.default_rollout(rollout_id, data_source, evaluation)


def start_rewards(manager: Any, config: Any, evaluation: bool) -> RewardFunctions:
    """The run's reward functions, built: ``rollout.reward``, with ``evaluation`` also
    ``eval.reward``, and each evaluation dataset's; then their worker processes
    (``rollout.reward_processes``) started, each importing what its checkers import.

    An unknown reward name fails here, once, before anything is generated (raised later by
    every concurrent group task it ended runs with hundreds of asyncio warnings). Called
    first in an executor's set-up, the workers' start (spawned interpreters importing
    math-verify: 2.4-3.5 s on an H100 host, paid by the first evaluation when they started
    after the models) overlaps the driver's own imports and loading."""
    rewards = RewardFunctions(manager, config)
    names = [config.rollout.reward]
    if evaluation:
        names.append(config.eval.reward or config.rollout.reward)
    for name in names + [spec.reward for spec in EvalSettings(config).specs.values()]:
        rewards.get(name)  # (no worker has started yet: nothing to stop when one fails)
    rewards.warm()
    return rewards


class RolloutManager:
    """Owns the data sources, the engine clients, the reward function and the filters."""

    def __init__(self, config: Any, engines: list[Any], train_source: DataSource,
                 eval_source: DataSource | None, rewards: RewardFunctions | None = None) -> None:
        """``rewards``: the run's reward functions from :func:`start_rewards`, when the
        executor started them before the rest of its set-up; None: built here."""
        self.config = config
        self.manager = get_manager()
        # one rollout manager per plugin manager: the newest one's default serves
        old = self.manager.pluggy.get_plugin(DEFAULT_ROLLOUT_PLUGIN)
        if old is not None:
            self.manager.pluggy.unregister(old)
        self.manager.pluggy.register(_DefaultRollout(self), name=DEFAULT_ROLLOUT_PLUGIN)
        batch = config.rollout.generate_batch_size
        self.clients = [EngineClient(e, batch, i) for i, e in enumerate(engines)]
        run_context().engine_clients = list(self.clients)
        self._host: CallerThreadHost | None = None  # set while a main-thread rollout runs
        self.train_source = train_source
        self.eval_source = eval_source
        self._next_engine = 0
        self._rewards = rewards if rewards is not None else start_rewards(
            self.manager, config, evaluation=eval_source is not None)
        self._hook_calls: tuple[FirstAnswer, FirstAnswer] | None = None
        self._eval_sets = EvalSettings(config)
        # [opd] mode = "engine": a teacher engine scores the student's tokens after each rollout
        self._teacher = build_teacher_engine(self.manager, config) if teacher_in_engine(config) else None
        reg = self.manager.registries
        self._ds_filter = (
            reg.filter.get(config.rollout.dynamic_sampling_filter).factory(config)
            if config.rollout.dynamic_sampling_filter else None
        )
        self._sample_filter = (
            reg.filter.get(config.rollout.sample_filter).factory(config)
            if config.rollout.sample_filter else None
        )
        # last, once the manager is valid: plugins that serve the engines (agent API, slime's
        # /generate) get the clients here instead of reading a process global
        self.manager.hook.slime_rollout_engines_ready(config=config, clients=list(self.clients))

    # -- engine choice -----------------------------------------------------------------
    def client_for(self, group_index: int) -> EngineClient:
        """Groups stay on one engine (prefix caching); groups round-robin across engines."""
        return self.clients[group_index % len(self.clients)]

    def close(self) -> None:
        """Stop what the manager started beside the engines: the reward worker processes
        (``rollout.reward_processes``). Called by the executor at the end of a run."""
        self._rewards.close()

    def reward_fn(self, evaluation: bool) -> tuple[Any, bool, str]:
        """``(fn, is_group, source)``: the configured reward function; ``source`` names it and
        its plugin for error messages."""
        name = (self.config.eval.reward if evaluation else "") or self.config.rollout.reward
        return self._rewards.get(name)

    def _reward_hooks(self) -> tuple[FirstAnswer, FirstAnswer]:
        # built on first use: tests register plugins after the manager was loaded
        if self._hook_calls is None:
            warn_deprecated_impls(self.manager.hook.slime_reward_group)  # rollout.reward's
            warn_deprecated_impls(self.manager.hook.slime_reward)  # aliases
            self._hook_calls = (FirstAnswer(self.manager.pluggy, "slime_reward_group"),
                                FirstAnswer(self.manager.pluggy, "slime_reward"))
        return self._hook_calls

    # -- one rollout ---------------------------------------------------------------------
    def rollout(self, rollout_id: int, evaluation: bool = False) -> RolloutResult:
        source = self.eval_source if evaluation else self.train_source
        if source is None:
            raise ValueError("evaluation requested but no eval data (set data.eval_path)")
        result = self.manager.hook.slime_rollout(
            config=self.config, rollout_id=rollout_id, data_source=source, evaluation=evaluation
        )
        if inspect.isawaitable(result):
            result = asyncio.run(_maybe_await(result))
        if result is None:
            raise RuntimeError("no slime_rollout implementation returned a result")
        return result

    def default_rollout(self, rollout_id: int, source: DataSource, evaluation: bool) -> RolloutResult:
        if threading.current_thread() is not threading.main_thread():
            return asyncio.run(self._rollout(rollout_id, source, evaluation))
        # On the main thread (synchronous runs, evaluations): the engine calls run here and
        # the event loop on a helper thread (see rollout/engine_host.py for why).
        host = CallerThreadHost()
        self._host = host
        for client in self.clients:
            client.host = host
        try:
            return host.run(lambda: self._rollout(rollout_id, source, evaluation))
        finally:
            self._host = None
            for client in self.clients:
                client.host = None

    async def _on_caller(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the thread that drives the rollout when it serves engine calls
        (built-in rewards: math-verify's signal-based timeouts work on the main thread only),
        else right here on the event loop."""
        host = self._host
        if host is None or threading.current_thread() is not host.loop_thread:
            return fn(*args)
        return await host.call(fn, *args)

    async def _rollout(self, rollout_id: int, source: DataSource, evaluation: bool) -> RolloutResult:
        cfg = self.config
        t0 = time.perf_counter()
        params = sampling_params(cfg, evaluation)
        metrics: dict[str, float] = {}
        if evaluation:
            limit = cfg.eval.max_prompts or -1
            groups = source.get_samples(limit)
            done = await asyncio.gather(*(self._run_group(g, self._eval_sets.params(g, params),
                                                          rollout_id, True) for g in groups))
            kept = list(done)
            all_groups = kept
        else:
            if getattr(source, "delivers_finished_samples", False):
                kept, all_groups = await self._finished_groups(rollout_id, source, metrics)
            else:
                kept, all_groups = await self._train_groups(rollout_id, source, params, metrics)
            if self._teacher is not None:
                t_score = time.perf_counter()
                await score_with_teacher(self, self._teacher, kept)
                metrics["perf/opd_teacher_time"] = time.perf_counter() - t_score
            self.finish_batch(kept, all_groups, source)
        metrics["perf/rollout_time"] = time.perf_counter() - t0
        what = f"eval at step {rollout_id}" if evaluation else f"rollout {rollout_id}"
        failures = summarise_failures((s for g in all_groups for s in g), what)
        if failures:  # the metrics count them; the log says why (trace.json is not read)
            print(f"warning: {failures}", file=sys.stderr, flush=True)
        return RolloutResult(groups=kept, metrics=metrics)

    # -- the per-group pipeline (the batch rollout here and the fully-async generator) ----
    @property
    def has_teacher_engine(self) -> bool:
        """``[opd] mode = "engine"``: a teacher engine scores each rollout after it is made."""
        return self._teacher is not None

    def finish_batch(self, kept: list[list[Sample]], all_groups: list[list[Sample]],
                     source: DataSource) -> None:
        """A training batch is complete: ``rollout.sample_filter``, then the hooks
        ``slime_rollout_sample_filter`` (on ``kept``) and ``slime_rollout_all_samples`` (on
        every group generated for it, dropped ones too)."""
        if self._sample_filter is not None:
            self._sample_filter(kept)
        hook = self.manager.hook
        warn_deprecated_impls(hook.slime_rollout_sample_filter)  # rollout.sample_filter's alias
        hook.slime_rollout_sample_filter(config=self.config, groups=kept)
        hook.slime_rollout_all_samples(config=self.config, groups=all_groups, data_source=source)

    async def score_group(self, group: list[Sample], rollout_id: int, evaluation: bool,
                          unscored_only: bool = False) -> None:
        """Reward a generated group (only its samples without a reward with
        ``unscored_only``: a worker may have scored them) and fire ``slime_after_generate``
        for each sample."""
        await self.reward([s for s in group if s.reward is None] if unscored_only else group,
                          evaluation)
        self.after_generate(group, rollout_id, evaluation)

    async def _train_groups(self, rollout_id: int, source: DataSource, params: SamplingParams,
                            metrics: dict[str, float]) -> tuple[list[list[Sample]], list[list[Sample]]]:
        cfg = self.config.rollout
        target = cfg.batch_size
        kept: list[list[Sample]] = []
        everything: list[list[Sample]] = []
        dropped: dict[str, int] = {}
        surplus: list[list[Sample]] = []
        rounds = aborted = 0
        while len(kept) < target:
            rounds += 1
            if rounds > cfg.max_sampling_rounds:
                raise RuntimeError(
                    f"dynamic sampling kept {len(kept)} of {target} groups after "
                    f"{cfg.max_sampling_rounds} rounds (rollout.max_sampling_rounds); dropped: "
                    f"{dropped}. Loosen the filter or raise the limit."
                )
            want = max(target - len(kept), cfg.over_sampling_batch_size)
            groups = source.get_samples(want)
            for g in groups:
                for s in g:
                    s.rollout_id = rollout_id
            tasks = [asyncio.ensure_future(self._run_group(g, params, rollout_id, False)) for g in groups]
            pending = set(tasks)
            while pending and len(kept) < target:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                failed = next((t for t in done if not t.cancelled() and t.exception() is not None), None)
                if failed is not None:  # one error, not one "never retrieved" warning per task
                    await _cancel(pending | done)
                    raise failed.exception()  # type: ignore[misc]
                for task in done:
                    group = task.result()
                    everything.append(group)
                    if self.keep_group(group, dropped):
                        (kept if len(kept) < target else surplus).append(group)
            if pending:
                aborted += await self._abort(pending, source)
        if surplus:
            # Finished after the batch was full: the prompts go back, the generation is
            # discarded so the next step stays on-policy.
            source.add_samples([[self.reset_for_buffer(s, fresh=True) for s in g] for g in surplus])
            metrics["rollout/surplus_groups"] = float(len(surplus))
        if aborted:
            metrics["rollout/aborted_groups"] = float(aborted)
        _count(metrics, rounds, everything, dropped)
        return kept, everything

    async def _finished_groups(self, rollout_id: int, source: DataSource,
                               metrics: dict[str, float]) -> tuple[list[list[Sample]], list[list[Sample]]]:
        """Groups generated elsewhere (``delivers_finished_samples``): fetched until
        ``rollout.batch_size`` are kept; a sample without a reward is scored here."""
        cfg = self.config.rollout
        target = cfg.batch_size
        kept: list[list[Sample]] = []
        everything: list[list[Sample]] = []
        dropped: dict[str, int] = {}
        rounds = 0
        while len(kept) < target:
            rounds += 1
            if rounds > cfg.max_sampling_rounds:
                raise RuntimeError(
                    f"{getattr(source, 'kind', 'data source')}: kept {len(kept)} of {target} "
                    f"groups after {cfg.max_sampling_rounds} fetches "
                    f"(rollout.max_sampling_rounds); dropped: {dropped}")
            for group in source.get_samples(target - len(kept)):
                for s in group:
                    s.rollout_id = rollout_id
                await self.score_group(group, rollout_id, False, unscored_only=True)
                everything.append(group)
                if self.keep_group(group, dropped):
                    kept.append(group)
        source_metrics = getattr(source, "metrics", None)
        if source_metrics is not None:
            metrics.update(source_metrics())
        _count(metrics, rounds, everything, dropped)
        return kept, everything

    def keep_group(self, group: list[Sample], dropped: dict[str, int]) -> bool:
        """Whether the dynamic-sampling filters keep ``group``; a dropped group is counted in
        ``dropped`` and its samples carry ``metadata["dropped_reason"]``."""
        keep, reason = self._keep(group)
        if not keep:
            dropped[reason] = dropped.get(reason, 0) + 1
            for s in group:
                s.metadata["dropped_reason"] = reason
        return keep

    async def _abort(self, pending: AbstractSet[asyncio.Future[Any]], source: DataSource) -> int:
        """Batch is full: abort surplus requests; their groups return to the data source.
        Returns how many groups went back."""
        for c in self.clients:
            c.abort()
        results = await asyncio.gather(*pending, return_exceptions=True)
        back: list[list[Sample]] = []
        for res in results:
            if isinstance(res, BaseException) or res is None:
                continue
            back.append([self.reset_for_buffer(s) for s in res])
        if back:
            source.add_samples(back)
        return len(back)

    def reset_for_buffer(self, s: Sample, fresh: bool = False) -> Sample:
        """The sample as it goes back to the data source: aborted samples keep their partial
        response with ``rollout.partial_rollout`` (continued next step with the remaining
        budget) unless ``fresh``; everything else restarts from its prompt."""
        if not fresh and self.config.rollout.partial_rollout and s.status == Status.ABORTED:
            s.status = Status.PENDING
            if self.config.rollout.mask_offpolicy_in_partial_rollout:
                s.loss_mask = [0] * s.response_length
            return s
        out = copy.copy(s)
        out.tokens = s.prompt_tokens
        out.response, out.response_length = "", 0
        out.loss_mask, out.rollout_log_probs, out.weight_versions = [], [], []
        out.status, out.reward, out.error = Status.PENDING, None, None
        out.metadata = {k: v for k, v in s.metadata.items() if k != "dropped_reason"}
        return out

    def _keep(self, group: list[Sample]) -> tuple[bool, str]:
        if all(s.status == Status.ABORTED for s in group):
            return False, "aborted"
        caller = self.manager.hook.slime_dynamic_sampling_filter
        warn_deprecated_impls(caller)  # rollout.dynamic_sampling_filter's alias
        answers = caller(config=self.config, group=group)
        if self._ds_filter is not None:
            answers.append(self._ds_filter(group))
        for a in answers:
            if a is not None and not a.keep:
                return False, a.reason or "filtered"
        return True, ""

    # -- one group -------------------------------------------------------------------------
    async def _run_group(self, group: list[Sample], params: SamplingParams, rollout_id: int,
                         evaluation: bool) -> list[Sample]:
        client = self.client_for(group[0].group_index)
        outs = await asyncio.gather(*(self.generate(s, params, client) for s in group))
        samples: list[Sample] = []
        for out in outs:
            samples.extend(out if isinstance(out, list) else [out])
        if any(s.status == Status.ABORTED for s in samples):
            return samples
        await self.score_group(samples, rollout_id, evaluation)
        return samples

    def after_generate(self, samples: list[Sample], rollout_id: int, evaluation: bool) -> None:
        for s in samples:
            self.manager.hook.slime_after_generate(
                config=self.config, sample=s, rollout_id=rollout_id, evaluation=evaluation
            )

    async def generate(self, sample: Sample, params: SamplingParams,
                       client: EngineClient) -> Sample | list[Sample]:
        """One sample through ``slime_generate`` (or an eval dataset's own ``generate``) on
        ``client``; an exception fails the sample (a lost engine stops the rollout)."""
        try:
            custom = self._eval_sets.generate_fn(sample)  # an eval dataset's own `generate`
            call = custom or self.manager.hook.slime_generate
            res = call(config=self.config, sample=sample, sampling_params=params, engine=client)
            res = await _maybe_await(res)
        except (asyncio.CancelledError, EngineLostError):
            raise  # a lost engine (no fault tolerance) stops the rollout, not just its samples
        except Exception as exc:  # noqa: BLE001 - one bad sample must not kill the step
            sample.status, sample.error = Status.FAILED, f"generate: {type(exc).__name__}: {exc}"
            return sample
        if res is None:
            raise RuntimeError("no slime_generate implementation returned a sample")
        for s in res if isinstance(res, list) else [res]:
            s.validate()
        return res

    async def reward(self, samples: list[Sample], evaluation: bool) -> None:
        """Score ``samples``; every value is checked (:mod:`slime_core.rewards.validate`) and a
        bad one or an exception fails its sample (or the group) with a reason that names the
        plugin, the hook or reward function, and the sample."""
        cfg = self.config
        todo = [s for s in samples if s.status != Status.FAILED]
        if not todo:
            return
        group_hook, sample_hook = self._reward_hooks()
        if group_hook:
            try:
                group_rewards, plugin = await group_hook(config=cfg, samples=todo)
                if group_rewards is not None:
                    source = f"plugin {plugin!r} hook slime_reward_group"
                    checked = self._check_group(group_rewards, source, todo)
            except Exception as exc:  # noqa: BLE001 - the group fails, the step goes on
                for s in todo:
                    s.status, s.error = Status.FAILED, f"reward_group: {_reason(exc)}"
                return
            if group_rewards is not None:
                for s, r in zip(todo, checked, strict=True):
                    s.reward = r
                return
        routed = [s for s in todo if row_reward_name(s) is not None]  # metadata.rm_type
        if routed:
            todo = [s for s in todo if row_reward_name(s) is None]
        fn, is_group, fn_source = self.reward_fn(evaluation)
        if is_group and todo:
            try:
                rewards = await _maybe_await(await self._on_caller(fn, todo))
                checked = self._check_group(rewards, fn_source, todo)
            except Exception as exc:  # noqa: BLE001
                for s in todo:
                    s.status, s.error = Status.FAILED, f"reward: {_reason(exc, fn_source)}"
            else:
                for s, r in zip(todo, checked, strict=True):
                    s.reward = r
            todo = []

        # a reward scored in worker processes gets the batch in one chunk per worker (not
        # without the deprecated per-sample hook, which answers first)
        sent: dict[int, Any] = {}
        if isinstance(fn, InProcesses) and todo and not sample_hook:
            sent = {id(s): f for s, f in zip(todo, fn.submit_many(todo), strict=True)}

        async def one(s: Sample, routed: bool) -> None:
            source = fn_source
            try:
                with span("reward", sample=s):  # the hook and the registry function alike
                    r, plugin = await sample_hook(config=cfg, sample=s) if sample_hook else (None, None)
                    if r is not None:
                        source = f"plugin {plugin!r} hook slime_reward"
                    elif not routed and id(s) in sent:
                        r = await _maybe_await(sent[id(s)])
                    elif routed:
                        source = f"metadata.rm_type {row_reward_name(s)!r}"
                        row_fn, row_group, source = self._rewards.for_row(s)  # type: ignore[misc]
                        r = await _maybe_await(await self._on_caller(row_fn, [s] if row_group else s))
                        r = self._check_group(r, source, [s])[0] if row_group else r
                    else:
                        r = await _maybe_await(await self._on_caller(fn, s))
                s.reward = check_reward(r, source, s, self._reward_bound)
            except Exception as exc:  # noqa: BLE001 - the sample fails, the step goes on
                s.status, s.error = Status.FAILED, f"reward: {_reason(exc, source)}"

        await asyncio.gather(*(one(s, False) for s in todo), *(one(s, True) for s in routed))

    @property
    def _reward_bound(self) -> float:
        return float(self.config.rollout.max_abs_reward)

    def _check_group(self, rewards: Any, source: str, samples: list[Sample]) -> list[Any]:
        bound = self._reward_bound
        if not isinstance(rewards, (list, tuple)):
            raise RewardValueError(
                f"{source} returned {type(rewards).__name__}, not a list of one reward per "
                f"sample (group={samples[0].group_index})"
            )
        if len(rewards) != len(samples):
            raise RewardValueError(
                f"{source} returned {len(rewards)} rewards for {len(samples)} samples "
                f"(group={samples[0].group_index})"
            )
        return [check_reward(r, source, s, bound) for s, r in zip(samples, rewards, strict=True)]


def _count(metrics: dict[str, float], rounds: int, everything: list[list[Sample]],
           dropped: dict[str, int]) -> None:
    metrics["rollout/sampling_rounds"] = float(rounds)
    metrics["rollout/groups_generated"] = float(len(everything))
    for reason, n in dropped.items():
        metrics[f"rollout/dropped/{reason}"] = float(n)


async def _cancel(tasks: set[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and collect their outcomes, so none is left unretrieved."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _reason(exc: Exception, source: str | None = None) -> str:
    """A failure reason that says who failed: validation and hook errors name it already."""
    if isinstance(exc, (RewardValueError, HookCallError)):
        return str(exc)
    prefix = f"{source} raised " if source else ""
    return f"{prefix}{type(exc).__name__}: {exc}"
