"""The hook tracer: ``--trace-hooks`` / ``SLIME_TRACE_HOOKS=1`` print every hook call with its
duration to stderr (not the Chrome trace of a run's phases: :mod:`slime_core.observe.trace`).

Tensors and arrays are shown as ``Tensor(shape=(2, 8), dtype=float32)`` so traces stay short.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Callable, TextIO

import pluggy

MAX_REPR = 80


def short_repr(value: Any) -> str:
    """A compact description: shape/dtype for tensors, truncated repr otherwise."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        kind = type(value).__name__
        return f"{kind}(shape={tuple(shape)}, dtype={str(dtype).replace('torch.', '')})"
    if isinstance(value, (list, tuple)) and value:
        inner = short_repr(value[0])
        return f"{type(value).__name__}[{len(value)}]({inner}, ...)"
    text = repr(value)
    return text if len(text) <= MAX_REPR else text[: MAX_REPR - 3] + "..."


def install_tracer(pluggy_manager: pluggy.PluginManager, stream: TextIO | None = None) -> Callable[[], None]:
    """Trace every hook call of ``pluggy_manager``; returns the function that removes the tracer."""
    out = stream or sys.stderr
    starts: list[float] = []

    def before(hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        starts.append(time.perf_counter())
        args = ", ".join(f"{k}={short_repr(v)}" for k, v in kwargs.items())
        who = ", ".join(i.plugin_name for i in impls)
        print(f"[hook] {hook_name}({args}) -> [{who}]", file=out, flush=True)

    def after(outcome: Any, hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        elapsed = (time.perf_counter() - starts.pop()) * 1000 if starts else 0.0
        try:
            result = short_repr(outcome.get_result())
        except BaseException as exc:  # noqa: BLE001 - the trace reports, pluggy re-raises
            result = f"raised {type(exc).__name__}: {exc}"
        print(f"[hook] {hook_name} done in {elapsed:.3f} ms: {result}", file=out, flush=True)

    return pluggy_manager.add_hookcall_monitoring(before, after)
