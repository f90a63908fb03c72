"""Rollout-side flags: each called with slime's signature at slime's point of the rollout.

Runs in the rollout manager's process. Samples are passed as slime views
(:mod:`slime_compat.samples`) and come back as the project's samples.
"""

from __future__ import annotations

from typing import Any

from slime_hookspecs import FilterResult, RolloutResult, Sample, SamplingParams, Status

from slime_compat.functions import accepted_kwargs, accepts, load_flag, maybe_await
from slime_compat.runtime import runtime
from slime_compat.samples import unwrap, unwrap_any, wrap, wrap_groups


def slime_sampling_params(args: Any, params: SamplingParams) -> dict[str, Any]:
    """slime's ``GenerateState.sampling_params`` dict for the project's params."""
    return dict(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
                max_new_tokens=params.max_new_tokens, stop=list(params.stop) or None,
                stop_token_ids=list(params.stop_token_ids) or None,
                skip_special_tokens=args.rollout_skip_special_tokens, no_stop_trim=True,
                spaces_between_special_tokens=False)


def is_evaluation(sample: Sample) -> bool:
    # the built-in rollout stamps training samples with the step; eval samples keep -1
    return sample.rollout_id < 0


async def generate(config: Any, sample: Sample, params: SamplingParams, engine: Any) -> Any:
    """``custom_generate_function_path`` (or the built-in single turn) then the sample hooks."""
    rt = runtime(config)
    sec = rt.section
    if rt.ensure_server() is not None:
        rt.server.bind(engine)
    evaluation = is_evaluation(sample)
    view = wrap(sample)
    if sec.custom_generate_function_path:
        fn = load_flag("custom_generate_function_path", sec.custom_generate_function_path)
        sp = slime_sampling_params(rt.args, params)
        kw = {"evaluation": evaluation} if accepts(fn, "evaluation") else {}
        result = await maybe_await(fn(rt.args, view, sp, **kw))
    else:
        result = await _builtin_generate(sample, params, engine)
    for i, path in enumerate(sec.rollout_sample_hook_path):
        result = await _apply_hook(f"rollout_sample_hook_path[{i}]", path, rt.args, result,
                                   {"rollout_id": sample.rollout_id, "evaluation": evaluation})
    if result is None:
        raise TypeError(f"[slime].custom_generate_function_path "
                        f"{sec.custom_generate_function_path!r} returned None, not a Sample")
    out = unwrap_any(result)
    for s in out if isinstance(out, list) else [out]:
        if s.status == Status.PENDING and s.response_length:
            s.status = Status.COMPLETED  # slime's older generate functions leave it to the caller
    return out


async def _builtin_generate(sample: Sample, params: SamplingParams, engine: Any) -> Any:
    if sample.response_length:
        params = params.replace(max_new_tokens=max(1, params.max_new_tokens - sample.response_length))
    out = await engine.generate(sample.tokens, params)
    sample.append_response_tokens(out.token_ids, out.log_probs, text=out.text,
                                  weight_version=out.weight_version)
    sample.status = {"stop": Status.COMPLETED, "length": Status.TRUNCATED,
                     "abort": Status.ABORTED}.get(out.finish_reason, Status.COMPLETED)
    return wrap(sample)


async def _apply_hook(key: str, path: str, args: Any, value: Any, kwargs: dict[str, Any]) -> Any:
    """slime's ``apply_rollout_sample_hooks``: every Sample leaf, list shape kept."""
    if isinstance(value, list):
        return [await _apply_hook(key, path, args, v, kwargs) for v in value]
    view = wrap(value) if isinstance(value, Sample) else value
    hook = load_flag(key, path)
    out = await maybe_await(hook(args, view, **accepted_kwargs(hook, kwargs)))
    return view if out is None else out


def _reward_value(value: Any) -> Any:
    if isinstance(value, dict):
        # slime keeps a reward dict as returned (retool's {"score", "acc", "pred"}) and reads
        # args.reward_key from it; the project's rewards hold numbers only, so booleans become
        # 0/1 and non-numeric entries ("pred": the extracted answer) are left out
        out = {}
        for key, v in value.items():
            v = v.item() if hasattr(v, "item") else v
            if isinstance(v, (bool, int, float)):
                out[key] = float(v)
        return out
    if hasattr(value, "item"):
        return value.item()  # a torch / numpy scalar
    return value


async def reward(config: Any, sample: Sample) -> Any:
    rt = runtime(config)
    fn = load_flag("custom_rm_path", rt.section.custom_rm_path)
    return _reward_value(await maybe_await(fn(rt.args, wrap(sample))))


async def reward_group(config: Any, samples: list[Sample]) -> list[Any]:
    rt = runtime(config)
    fn = load_flag("custom_rm_path", rt.section.custom_rm_path)
    rewards = await maybe_await(fn(rt.args, [wrap(s) for s in samples]))
    return [_reward_value(r) for r in (rewards.tolist() if hasattr(rewards, "tolist") else rewards)]


def dynamic_filter(config: Any, group: list[Sample]) -> FilterResult:
    rt = runtime(config)
    fn = load_flag("dynamic_sampling_filter_path", rt.section.dynamic_sampling_filter_path)
    # slime stops on a failed generate or reward; here the sample is marked failed (reward None,
    # masked out of training) and the run goes on. slime's filters read every reward, so they
    # see the group's other samples only.
    scored = [s for s in group if s.status != Status.FAILED]
    if not scored:
        return FilterResult(keep=True)
    out = fn(rt.args, [wrap(s) for s in scored])
    keep = getattr(out, "keep", out)  # slime accepts a bare bool (its "legacy version")
    reason = getattr(out, "reason", None)
    return FilterResult(keep=bool(keep), reason=str(reason) if reason else "slime_filter")


def buffer_filter(config: Any, rollout_id: int, buffer: list[list[Sample]],
                  num_groups: int) -> list[list[Sample]]:
    rt = runtime(config)
    fn = load_flag("buffer_filter_path", rt.section.buffer_filter_path)
    views = wrap_groups(buffer)
    picked = fn(rt.args, rollout_id, views, num_groups)
    # slime's filters remove what they return from the buffer list: mirror that on ours
    left = {id(v[0]) for v in views if v}
    buffer[:] = [g for g in buffer if g and id(wrap(g[0])) in left]
    return [[unwrap(s) for s in g] for g in picked]


def sample_filter(config: Any, groups: list[list[Sample]]) -> None:
    rt = runtime(config)
    fn = load_flag("rollout_sample_filter_path", rt.section.rollout_sample_filter_path)
    fn(rt.args, wrap_groups(groups))


class DataSourceView:
    """The project's data source as slime code sees one (``get_samples`` / ``add_samples``)."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def get_samples(self, num_samples: int) -> list[list[Any]]:
        return wrap_groups(self.source.get_samples(num_samples))

    def add_samples(self, samples: list[list[Any]]) -> None:
        self.source.add_samples([[unwrap(s) for s in g] for g in samples])

    def __len__(self) -> int:
        return len(self.source)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.source, name)


def all_samples(config: Any, groups: list[list[Sample]], data_source: Any) -> None:
    rt = runtime(config)
    fn = load_flag("rollout_all_samples_process_path", rt.section.rollout_all_samples_process_path)
    fn(rt.args, wrap_groups(groups), DataSourceView(data_source))


def rollout(config: Any, rollout_id: int, data_source: Any, evaluation: bool) -> RolloutResult | None:
    """``rollout_function_path`` / ``eval_function_path``: slime's rollout outputs converted."""
    rt = runtime(config)
    sec = rt.section
    key = "eval_function_path" if evaluation else "rollout_function_path"
    path = getattr(sec, key)
    if not path:
        return None
    rt.ensure_server()
    fn = load_flag(key, path)
    out = fn(rt.args, rollout_id, DataSourceView(data_source), evaluation=evaluation)
    if hasattr(out, "__await__"):
        from slime_compat.aio import run

        out = run(out)
    return to_result(out, evaluation, rollout_id)


def to_result(out: Any, evaluation: bool, rollout_id: int) -> RolloutResult:
    metrics = dict(getattr(out, "metrics", None) or {})
    if hasattr(out, "samples"):  # RolloutFnTrainOutput
        groups = out.samples
    elif hasattr(out, "data") or (evaluation and isinstance(out, dict)):  # RolloutFnEvalOutput
        data = out.data if hasattr(out, "data") else out
        flat = [s for d in data.values() for s in d.get("samples", [])]
        by_group: dict[int, list[Any]] = {}
        for s in flat:
            by_group.setdefault(wrap(unwrap(s)).group_index or 0, []).append(s)
        groups = list(by_group.values())
    else:
        groups = out
    result = []
    for g in groups:
        samples = unwrap_any(g if isinstance(g, list) else [g])
        flat_g = [s for x in samples for s in (x if isinstance(x, list) else [x])]
        for s in flat_g:
            if not evaluation and s.rollout_id < 0:
                s.rollout_id = rollout_id
        result.append(flat_g)
    clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
    return RolloutResult(groups=result, metrics=clean)
