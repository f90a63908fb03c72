"""Run parsed tool calls: look the tool up, validate the arguments, call it with a timeout.

Every outcome is an observation for the model; a bad call never raises. Error kinds (they
become the metric keys ``rollout/tool_errors/<kind>``):

* ``malformed`` -- the parser could not read the call (not JSON, no name, never closed);
* ``unknown_tool`` -- the name is not among ``tools.enabled``;
* ``invalid_arguments`` -- the arguments fail the tool's JSON schema (jsonschema);
* ``timeout`` -- the call ran past ``tools.timeout`` seconds (or the tool said so);
* ``tool_error`` -- the tool raised;
* ``too_many_calls`` -- more than ``tools.max_calls_per_turn`` calls in one turn.

A synchronous tool runs in a worker thread so a slow one never stalls the other episodes;
at its timeout the episode moves on, but Python cannot kill the thread (tools that may hang
should be coroutines or run their work in the sandbox, as ``python`` does). A tool that takes
the ``tool_context`` gets ``context.timeout`` as its own limit and :data:`CONTEXT_GRACE_S`
more before it is cancelled, so it can stop its work itself (the sandbox kills the process
tree) and report what happened.

**Tool sources.** A :class:`~slime_hookspecs.ToolRecord` with ``extra["tool_source"] = True``
stands for a set of tools known only at run time (the tools of an MCP server). Its factory
returns a source instead of a callable: ``source.list_tools()`` (may be a coroutine function)
gives ``[{"name", "description", "parameters"}, ...]`` once, when the executor is built, and
``await source.call(name, arguments, tool_context)`` runs one. A source may also define
``async prepare(name, tool_context)``: awaited before each call, outside ``tools.timeout``,
for set-up that is not the tool's work (opening the episode's session to a server); it must
bound its own time, and its failure is the call's ``tool_error``. Naming the record in
``tools.enabled`` enables every tool it lists, under the listed names (validated against the
listed JSON schemas like any tool); a listed name that clashes with another enabled tool
fails the run, naming both.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slime_agent.parsers import ToolCall, ToolCallError
from slime_agent.tools import ToolContext, ToolTimeout

ERROR_KINDS = ("malformed", "unknown_tool", "invalid_arguments", "timeout", "tool_error",
               "too_many_calls")
_CONTEXT_PARAM = "tool_context"
CONTEXT_GRACE_S = 5.0


@dataclass
class ToolOutcome:
    """One call's result: ``text`` is what the model sees (after truncation)."""

    name: str
    text: str
    ok: bool
    kind: str = ""  # error kind when not ok
    call_id: str = ""


@dataclass
class _Tool:
    record: Any
    fn: Any
    validator: Any
    wants_context: bool
    is_async: bool
    prepare: Any = None  # a tool source's ``prepare(tool_context)``, run before the timed call


class ToolExecutor:
    """The enabled tools of a run, built once from their records.

    :param records: ``name -> ToolRecord`` of the enabled tools.
    :param timeout: seconds per call.
    """

    def __init__(self, config: Any, records: dict[str, Any], timeout: float) -> None:
        import jsonschema

        self.timeout = float(timeout)
        self.tools: dict[str, _Tool] = {}
        for name, rec in _expand_sources(config, records).items():
            try:
                cls = jsonschema.validators.validator_for(rec.parameters)
                cls.check_schema(rec.parameters)
            except jsonschema.SchemaError as exc:
                raise ValueError(
                    f"tool {name!r} (plugin {rec.owner}): its parameters are not a valid JSON "
                    f"schema: {exc.message}"
                ) from None
            fn = rec.factory(config)
            if not callable(fn):
                raise TypeError(f"tool {name!r} (plugin {rec.owner}): factory returned "
                                f"{type(fn).__name__}, not a callable")
            params: Mapping[str, inspect.Parameter]
            try:
                params = inspect.signature(fn).parameters
            except (TypeError, ValueError):
                params = {}
            self.tools[name] = _Tool(
                record=rec, fn=fn, validator=cls(rec.parameters),
                wants_context=_CONTEXT_PARAM in params,
                is_async=inspect.iscoroutinefunction(fn)
                or inspect.iscoroutinefunction(getattr(fn, "__call__", None)),
                prepare=getattr(fn, "prepare", None),
            )

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI / Hermes descriptions of the enabled tools (for the chat template)."""
        return [t.record.schema() for t in self.tools.values()]

    @staticmethod
    def parse_error(err: ToolCallError) -> ToolOutcome:
        return ToolOutcome(name=err.name, text=f"Error: {err.message}", ok=False, kind=err.kind)

    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            names = ", ".join(sorted(self.tools)) or "(none)"
            return self._error(call, "unknown_tool",
                               f"unknown tool {call.name!r}; available tools: {names}")
        if _CONTEXT_PARAM in call.arguments:
            return self._error(call, "invalid_arguments",
                               f"{_CONTEXT_PARAM!r} is not an argument of {call.name!r}")
        problems = sorted(tool.validator.iter_errors(call.arguments), key=lambda e: list(e.path))
        if problems:
            first = problems[0]
            where = "/".join(str(p) for p in first.path) or "arguments"
            return self._error(call, "invalid_arguments",
                               f"invalid arguments for {call.name!r} at {where}: {first.message}")
        if tool.prepare is not None:
            try:
                await tool.prepare(context)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - an observation, as a failing call is
                return self._error(call, "tool_error", f"{call.name!r} could not be prepared: "
                                   f"{type(exc).__name__}: {exc}")
        kwargs = dict(call.arguments)
        limit = self.timeout
        if tool.wants_context:
            kwargs[_CONTEXT_PARAM] = context
            limit += CONTEXT_GRACE_S
        try:
            if tool.is_async:
                value = await asyncio.wait_for(tool.fn(**kwargs), limit)
            else:
                value = await asyncio.wait_for(asyncio.to_thread(tool.fn, **kwargs), limit)
                if inspect.isawaitable(value):
                    value = await asyncio.wait_for(value, limit)
        except (asyncio.TimeoutError, ToolTimeout) as exc:
            msg = str(exc) if isinstance(exc, ToolTimeout) and str(exc) else (
                f"{call.name!r} did not finish within {self.timeout:g} s")
            return self._error(call, "timeout", msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing tool is an observation, not a crash
            from slime_agent.tools import ToolError

            msg = str(exc) if isinstance(exc, ToolError) else f"{type(exc).__name__}: {exc}"
            return self._error(call, "tool_error", f"{call.name!r} failed: {msg}")
        return ToolOutcome(name=call.name, text=_as_text(value), ok=True, call_id=call.id)

    @staticmethod
    def _error(call: ToolCall, kind: str, message: str) -> ToolOutcome:
        return ToolOutcome(name=call.name, text=f"Error: {message}", ok=False, kind=kind,
                           call_id=call.id)


def _expand_sources(config: Any, records: dict[str, Any]) -> dict[str, Any]:
    """``records`` with every tool-source record replaced by a record per listed tool."""
    from slime_hookspecs import ToolRecord

    out: dict[str, Any] = {}
    for name, rec in records.items():
        if not rec.extra.get("tool_source"):
            if name in out:
                raise ValueError(f"tool {name!r} is enabled twice ({out[name].owner}, {rec.owner})")
            out[name] = rec
            continue
        source = rec.factory(config)
        listed = _run_sync(source.list_tools)
        if not listed:
            raise ValueError(f"tool source {name!r} (plugin {rec.owner}) lists no tools")
        for spec in listed:
            tool = str(spec["name"])
            if tool in out:
                raise ValueError(f"tool {tool!r} of source {name!r} clashes with the tool of "
                                 f"the same name from {out[tool].extra.get('source', out[tool].owner)!r}")
            out[tool] = ToolRecord(
                name=tool, factory=_source_tool(source, tool), owner=rec.owner,
                summary=f"from tool source {name!r}", description=str(spec.get("description", "")),
                parameters=dict(spec.get("parameters") or {"type": "object", "properties": {}}),
                extra={"source": name},
            )
    return out


def _source_tool(source: Any, tool: str) -> Any:
    def factory(config: Any) -> Any:
        async def call(tool_context: ToolContext, **arguments: Any) -> Any:
            return await source.call(tool, arguments, tool_context)

        if hasattr(source, "prepare"):
            async def prepare(tool_context: ToolContext) -> None:
                await source.prepare(tool, tool_context)

            call.prepare = prepare  # type: ignore[attr-defined]
        return call

    return factory


def _run_sync(fn: Any) -> Any:
    """``fn()``, awaited on a private event loop in a thread when it is a coroutine function
    (the executor may be built inside a running loop, where ``asyncio.run`` is refused)."""
    if not inspect.iscoroutinefunction(fn):
        return fn()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, fn()).result()


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
