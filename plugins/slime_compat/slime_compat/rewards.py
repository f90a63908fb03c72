"""Behind the shim's ``slime.rollout.rm_hub``: ``async_rm`` / ``batched_async_rm``.

As slime: a sample's own ``custom_rm_path``, else ``args.custom_rm_path``, else
``args.rm_type``, scored by the project's reward record of that name (the core registers
slime's rule-based names: ``math``, ``dapo``, ``deepscaler``, ``f1``, ``gpqa``, their ``boxed_``
variants, ``random``); with no ``rm_type`` the run's ``rollout.reward`` scores the sample.
"""

from __future__ import annotations

from typing import Any

from slime_compat.functions import load_function, maybe_await

async def async_rm(args: Any, sample: Any, **kwargs: Any) -> Any:
    path = getattr(sample, "custom_rm_path", None) or args.custom_rm_path
    if path:
        return await maybe_await(load_function(path)(args, sample, **kwargs))
    rm_type = ((sample.metadata or {}).get("rm_type") or args.rm_type or "").strip()
    return await _project_reward(rm_type or None, sample)


async def batched_async_rm(args: Any, samples: list[Any], **kwargs: Any) -> list[Any]:
    if args.custom_rm_path:
        return await maybe_await(load_function(args.custom_rm_path)(args, samples, **kwargs))
    import asyncio

    return list(await asyncio.gather(*(async_rm(args, s, **kwargs) for s in samples)))


async def _project_reward(name: str | None, sample: Any) -> Any:
    from slime_core.api import get_registries

    from slime_compat.runtime import current
    from slime_compat.samples import unwrap

    config = current().config
    rec = get_registries().reward_function.get(name or config.rollout.reward)
    fn = rec.factory(config)
    core = unwrap(sample)
    if rec.group:
        return (await maybe_await(fn([core])))[0]
    return await maybe_await(fn(core))
