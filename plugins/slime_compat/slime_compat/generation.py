"""Behind the shim's ``slime.rollout.sglang_rollout``: ``GenerateState``, ``generate``,
``generate_and_rm(_group)``, ``get_model_url`` and a training ``generate_rollout``.

They talk to the /generate endpoint at ``args.sglang_router_ip:port`` exactly as slime's do
(token ids in, ``meta_info.output_token_logprobs`` out), so custom rollout and generate
functions that call them behave as under slime. Written from slime's documented behaviour
(``slime/rollout/sglang_rollout.py``), not copied.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from typing import Any, Iterator

from slime_compat.aio import post, run
from slime_compat.functions import load_function, maybe_await
from slime_compat.misc import SingletonMeta, load_processor, load_tokenizer
from slime_compat.rewards import async_rm, batched_async_rm


def get_model_url(args: Any, model_name: str, endpoint: str = "/generate") -> str:
    routers = getattr(args, "sglang_model_routers", None)
    if routers and model_name in routers:
        ip, port = routers[model_name]
        return f"http://{ip}:{port}{endpoint}"
    return f"http://{args.sglang_router_ip}:{args.sglang_router_port}{endpoint}"


class GenerateState(metaclass=SingletonMeta):
    """slime's per-process generation state: tokenizer, default sampling params, concurrency."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.tokenizer = load_tokenizer(args.hf_checkpoint, trust_remote_code=True)
        self.processor = load_processor(args.hf_checkpoint, trust_remote_code=True)
        self._semaphores: dict[int, asyncio.Semaphore] = {}
        self.sampling_params: dict[str, Any] = dict(
            temperature=args.rollout_temperature, top_p=args.rollout_top_p,
            top_k=args.rollout_top_k, max_new_tokens=args.rollout_max_response_len,
            stop=args.rollout_stop, stop_token_ids=args.rollout_stop_token_ids,
            skip_special_tokens=args.rollout_skip_special_tokens, no_stop_trim=True,
            spaces_between_special_tokens=False)
        self.dp_counts = [0]
        self.dp_rank = 0
        self.reset()

    @property
    def semaphore(self) -> asyncio.Semaphore:
        # one per event loop: the project runs each rollout on a fresh loop
        loop = asyncio.get_running_loop()
        key = id(loop)
        if key not in self._semaphores:
            n = self.args.sglang_server_concurrency * max(1, self.args.rollout_num_engines or 1)
            self._semaphores[key] = asyncio.Semaphore(n)
        return self._semaphores[key]

    @contextlib.contextmanager
    def dp_rank_context(self) -> Iterator[int]:
        yield 0

    def reset(self) -> None:
        self.remaining_batch_size = 0
        self.pendings: set[asyncio.Task[Any]] = set()
        self.aborted = False

    def submit_generate_tasks(self, samples: list[list[Any]]) -> None:
        for group in samples:
            self.pendings.add(asyncio.ensure_future(generate_and_rm_group(
                self.args, group, sampling_params=self.sampling_params.copy(), evaluation=False)))
        self.remaining_batch_size += len(samples)


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any]) -> Any:
    """One /generate call for ``sample`` (prompt ids, or its prompt text tokenized)."""
    state = GenerateState(args)
    prompt_ids = list(sample.tokens) if sample.tokens else state.tokenizer.encode(
        sample.prompt, add_special_tokens=False)
    params = dict(sampling_params)
    params["max_new_tokens"] -= sample.response_length
    if params["max_new_tokens"] <= 0:
        sample.status = sample.Status.TRUNCATED
        return sample
    if not sample.tokens:
        sample.tokens = prompt_ids
    out = await post(get_model_url(args, "default"), {
        "input_ids": prompt_ids, "sampling_params": params, "return_logprob": True})
    pairs = out["meta_info"].get("output_token_logprobs") or []
    sample.append_response_tokens(args, tokens=[p[1] for p in pairs], log_probs=[p[0] for p in pairs],
                                  trainable=True, meta_info=out["meta_info"], text=out["text"])
    return sample


async def generate_and_rm(args: Any, sample: Any, sampling_params: dict[str, Any],
                          evaluation: bool = False) -> Any:
    if sample.status in (sample.Status.COMPLETED, sample.Status.TRUNCATED):
        return sample
    state = GenerateState(args)
    async with state.semaphore:
        if state.aborted:
            sample.status = sample.Status.ABORTED
            return sample
        path = getattr(sample, "generate_function_path", None) or args.custom_generate_function_path
        if path:
            fn = load_function(path)
            kw = {"evaluation": evaluation} if "evaluation" in inspect.signature(fn).parameters else {}
            sample = await fn(args, sample, sampling_params, **kw)
        else:
            sample = await generate(args, sample, sampling_params)
    for p in args.rollout_sample_hook_path or []:
        hook = load_function(p)
        res = await maybe_await(hook(args, sample))
        sample = sample if res is None else res
    if args.group_rm:
        return sample
    items = sample if isinstance(sample, list) else [sample]
    if any(s.status == s.Status.ABORTED for s in items):
        return sample
    todo = [s for s in items if s.reward is None]
    if isinstance(sample, list):
        for s, r in zip(todo, await batched_async_rm(args, todo)):
            s.reward = r
    elif todo:
        sample.reward = await async_rm(args, sample)
    return sample


async def generate_and_rm_group(args: Any, group: list[Any], sampling_params: dict[str, Any],
                                evaluation: bool = False) -> list[Any]:
    state = GenerateState(args)
    if state.aborted:
        return group
    for s in group:
        if s.session_id is None:
            s.session_id = str(uuid.uuid4())
    group = list(await asyncio.gather(*(generate_and_rm(args, s, dict(sampling_params),
                                                        evaluation=evaluation) for s in group)))
    if not state.aborted and args.group_rm:
        for s, r in zip(group, await batched_async_rm(args, group)):
            s.reward = r
    return group


async def _rollout_async(args: Any, rollout_id: int, data_source: Any) -> Any:
    from slime_compat.filters import DynamicFilterOutput, call_dynamic_filter
    from slime_compat.rollout_types import RolloutFnTrainOutput

    state = GenerateState(args)
    state.reset()
    dyn = load_function(args.dynamic_sampling_filter_path) if args.dynamic_sampling_filter_path else None
    data: list[Any] = []
    dropped: dict[Any, Any] = {}
    target = args.rollout_batch_size
    while len(data) < target:
        while state.remaining_batch_size < target:
            state.submit_generate_tasks(data_source.get_samples(args.over_sampling_batch_size))
        done, state.pendings = await asyncio.wait(state.pendings, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            group = task.result()
            out = call_dynamic_filter(dyn, args, group) if dyn else DynamicFilterOutput(keep=True)
            if not out.keep:
                state.remaining_batch_size -= 1
                dropped[out.reason or "filtered"] = dropped.get(out.reason or "filtered", 0) + 1
                continue
            if len(data) < target:
                data.append(group)
    state.aborted = True  # the surplus: stop, and hand the prompts back unfinished
    back = []
    for group in await asyncio.gather(*state.pendings):
        back.append(group)
    state.reset()
    if back:
        data_source.add_samples([[_fresh(s) for s in g] for g in back])
    metrics = {f"rollout/dynamic_filter/drop_{k}": float(v) for k, v in dropped.items()}
    data.sort(key=lambda g: g[0].index)
    return RolloutFnTrainOutput(samples=data, metrics=metrics)


def _fresh(sample: Any) -> Any:
    from slime_compat.samples import unwrap

    core = unwrap(sample)
    core.tokens = core.prompt_tokens
    core.response, core.response_length, core.reward = "", 0, None
    core.loss_mask, core.rollout_log_probs, core.weight_versions = [], [], []
    core.status = type(core.status).PENDING
    return sample


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    """slime's default rollout for training (over-sampling + dynamic filter) over /generate.
    Evaluation: slime reads ``args.eval_datasets``; here the project's own eval rollout runs
    when ``eval_function_path`` is unset, so this raises for ``evaluation=True``."""
    if evaluation:
        raise NotImplementedError(
            "slime_compat: the shim's generate_rollout serves training rollouts; evaluation runs "
            "the project's eval rollout (leave [slime].eval_function_path unset, or set it to a "
            "function of your own)")
    return run(_rollout_async(args, rollout_id, data_source))
