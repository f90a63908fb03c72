"""Loading and calling slime function paths.

slime's rule (``slime.utils.misc.load_function``): ``"a.b.c"`` imports module ``a.b`` and takes
attribute ``c``; nothing else (no ``file.py:func``). A path that fails to load says which
``[slime]`` key named it, so a typo fails before the first rollout (:func:`check_paths`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable


class SlimePathError(ImportError):
    """A ``[slime]`` function path that does not resolve."""


_cache: dict[str, Any] = {}


def load_function(path: str) -> Any:
    """slime's ``load_function``: import ``module`` of ``module.attr`` and return ``attr``."""
    if path in _cache:
        return _cache[path]
    module_path, _, attr = path.rpartition(".")
    module = importlib.import_module(module_path)
    value = getattr(module, attr)
    _cache[path] = value
    return value


def load_flag(key: str, path: str) -> Any:
    """:func:`load_function` whose errors name the ``[slime]`` key."""
    try:
        return load_function(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SlimePathError(
            f"[slime].{key} = {path!r}: cannot load it ({type(exc).__name__}: {exc}); write "
            "module.submodule.function, importable from the working directory or sys.path"
        ) from exc


def check_paths(paths: dict[str, str]) -> None:
    """Load every configured path now (the run fails before any model loads)."""
    for key, path in paths.items():
        obj = load_flag(key, path)
        if not callable(obj):
            raise SlimePathError(f"[slime].{key} = {path!r} is a {type(obj).__name__}, not callable")


def clear_cache() -> None:
    _cache.clear()


def accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes keyword ``name`` (or ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def accepted_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``kwargs`` that ``fn`` accepts (slime's sample-hook convention)."""
    return {k: v for k, v in kwargs.items() if accepts(fn, k)}


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
