"""``@rollout_entrypoint``: an agent function becomes slime's rollout of one sample.

The function is ``async def`` (a plain ``def`` runs on a worker thread) and asks for what it
needs by parameter name; every parameter must be one of :data:`PARAMETERS`::

    @rollout_entrypoint
    async def rollout(client, prompt, label, sampling) -> float:
        r = await client.chat.completions.create(model="slime", messages=[...], **sampling)
        return float(r.choices[0].message.content.strip() == label)

It returns the reward (a number, a dict of numbers with ``rollout.reward_key`` choosing, or
``None`` to let ``rollout.reward`` score the recorded response). The run names it with
``[agent] entrypoint = "package.module:rollout"`` or ``"path/to/file.py:rollout"``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# what an entry point may ask for, by parameter name
PARAMETERS: dict[str, str] = {
    "client": "openai.AsyncOpenAI whose requests are recorded in this episode's session",
    "base_url": "the session's OpenAI base URL (ends in /v1), for agents configured by URL",
    "api_key": "the agent API's bearer token (the key to pass with base_url)",
    "model": "the model name the agent API answers to (agent_api.model_name)",
    "sampling": "OpenAI sampling arguments of this rollout (temperature, top_p, max_tokens)",
    "sample": "the slime_hookspecs.Sample being rolled out (prompt, label, metadata)",
    "prompt": "sample.prompt: the dataset's prompt (text, or a list of chat messages)",
    "label": "sample.label",
    "metadata": "sample.metadata",
    "session_id": "the id of this episode's session in the agent API",
}


@dataclass(frozen=True)
class EntryPoint:
    """A decorated agent function and the names of the arguments it takes."""

    fn: Callable[..., Any]
    wants: tuple[str, ...]
    name: str

    async def __call__(self, **available: Any) -> Any:
        kwargs = {k: available[k] for k in self.wants}
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**kwargs)
        # a synchronous agent (the blocking OpenAI client) must not stall the rollout's loop
        return await asyncio.to_thread(self.fn, **kwargs)


def _wants(fn: Callable[..., Any]) -> tuple[str, ...]:
    names = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"@rollout_entrypoint {fn.__qualname__}: *{p.name} / **{p.name} are "
                            "not supported; name the arguments you need: " + ", ".join(PARAMETERS))
        if p.name not in PARAMETERS:
            if p.default is not p.empty:
                continue  # the agent's own option, left at its default
            raise TypeError(f"@rollout_entrypoint {fn.__qualname__}: unknown parameter "
                            f"{p.name!r}; choose from: " + ", ".join(PARAMETERS))
        names.append(p.name)
    return tuple(names)


def rollout_entrypoint(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as a slime rollout (see the module docstring). ``fn`` is returned as it is
    (still callable directly, e.g. against another endpoint), with ``__slime_entrypoint__``."""
    fn.__slime_entrypoint__ = EntryPoint(  # type: ignore[attr-defined]
        fn, _wants(fn), f"{fn.__module__}:{fn.__qualname__}")
    return fn


def load_entrypoint(spec: str) -> EntryPoint:
    """``"pkg.module:fn"`` or ``"path/file.py:fn"`` -> the decorated function's :class:`EntryPoint`."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"agent.entrypoint {spec!r}: expected 'package.module:function' or "
                         "'path/to/file.py:function'")
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"agent.entrypoint {spec!r}: no file {path}")
        name = f"slime_agent_entry_{path.stem}"
        module = sys.modules.get(name)
        if module is None or getattr(module, "__file__", None) != str(path):
            loader_spec = importlib.util.spec_from_file_location(name, path)
            assert loader_spec is not None and loader_spec.loader is not None
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    fn = getattr(module, attr, None)
    if fn is None:
        raise AttributeError(f"agent.entrypoint {spec!r}: {target} has no {attr!r}")
    ep = getattr(fn, "__slime_entrypoint__", None)
    if not isinstance(ep, EntryPoint):
        raise TypeError(f"agent.entrypoint {spec!r}: {attr} is not decorated with "
                        "@slime_agent.rollout_entrypoint")
    return ep
