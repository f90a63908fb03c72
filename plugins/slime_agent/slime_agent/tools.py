"""Built-in tools (``calculator``, ``python``) and the per-episode :class:`ToolContext`.

A tool is ``ToolRecord.factory(config) -> fn``; ``fn(**arguments)`` returns the observation
(text, or anything JSON-serialisable) and may be a coroutine function. A tool that needs the
episode (its sandbox, the sample) declares a keyword parameter ``tool_context``: the executor
then passes the :class:`ToolContext`; that name is never part of the JSON arguments.

A tool signals a failure the model should see by raising :class:`ToolError` (kind
``tool_error``) or :class:`ToolTimeout` (kind ``timeout``); any other exception is reported
the same way as ``tool_error`` with its type and message.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from slime_hookspecs import ToolRecord

from slime_agent.calculator import CalculatorError, evaluate, format_number


class ToolError(RuntimeError):
    """The tool ran and failed; the message becomes the observation."""


class ToolTimeout(ToolError):
    """The tool did not finish in time."""


class ToolContext:
    """What one episode's tools share: the config, the sample, and a lazily opened sandbox.

    ``sandbox_factory()`` builds a sandbox (an async context manager); it is opened on first
    use and closed by :meth:`close` at the end of the episode. ``state`` is a dict where tools
    keep per-episode objects (a tool source's connection to its server); a coroutine function
    given to :meth:`on_close` runs at the end of the episode, before the sandbox closes.
    """

    def __init__(self, config: Any, sample: Any = None, *,
                 sandbox_factory: Callable[[], Any] | None = None, timeout: float = 30.0) -> None:
        self.config = config
        self.sample = sample
        self.timeout = float(timeout)
        self._sandbox_factory = sandbox_factory
        self._sandbox: Any = None
        self._lock = asyncio.Lock()
        self.state: dict[str, Any] = {}
        self._on_close: list[Callable[[], Any]] = []

    def on_close(self, fn: Callable[[], Any]) -> None:
        """Run ``await fn()`` at the end of the episode (last registered first)."""
        self._on_close.append(fn)

    async def sandbox(self) -> Any:
        async with self._lock:
            if self._sandbox is None:
                if self._sandbox_factory is None:
                    raise ToolError("no sandbox is configured for this episode (tools.sandbox)")
                box = self._sandbox_factory()
                self._sandbox = await box.__aenter__()
            return self._sandbox

    async def close(self) -> None:
        callbacks, self._on_close = self._on_close[::-1], []
        try:
            for fn in callbacks:
                await fn()
        finally:
            await self._close_sandbox()

    async def _close_sandbox(self) -> None:
        box, self._sandbox = self._sandbox, None
        if box is not None:
            await box.__aexit__(None, None, None)


# -- calculator -----------------------------------------------------------------------------


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression safely (see :mod:`slime_agent.calculator`)."""
    try:
        return format_number(evaluate(expression))
    except CalculatorError as exc:
        raise ToolError(str(exc)) from None


def make_calculator(config: Any = None) -> Callable[..., str]:
    return calculator


CALCULATOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "description": "an arithmetic expression, e.g. (1234 + 56) * 7 / 3; ** is power",
        },
    },
    "required": ["expression"],
    "additionalProperties": False,
}

# -- python ------------------------------------------------------------------------------------

PYTHON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "a Python 3 program; print() what you want to see",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}

_SNIPPET = "snippet.py"


async def python_tool(code: str, tool_context: ToolContext) -> str:
    """Run ``code`` with Python in the episode's sandbox; stdout (and stderr) come back.

    A non-zero exit raises :class:`ToolError` with the output (the traceback); a run past
    the tool timeout raises :class:`ToolTimeout`. Files in the work directory persist across
    calls of one episode, variables do not (each call is a fresh process).
    """
    box = await tool_context.sandbox()
    await box.write_file(_SNIPPET, code)
    res = await box.exec(["python", "-I", _SNIPPET], timeout=tool_context.timeout)
    out = res.stdout
    if res.stderr:
        out = f"{out}{'' if not out or out.endswith(chr(10)) else chr(10)}{res.stderr}"
    if res.truncated:
        out += "\n[output truncated]"
    if res.timed_out:
        raise ToolTimeout(f"the program ran longer than {tool_context.timeout:g} s and was killed"
                          + (f"; output so far:\n{out}" if out.strip() else ""))
    if res.exit_code != 0:
        raise ToolError(f"exit code {res.exit_code}\n{out}".rstrip())
    return out if out.strip() else "(no output; print() the values you want to see)"


def make_python_tool(config: Any = None) -> Callable[..., Any]:
    return python_tool


def tool_records() -> list[ToolRecord]:
    """Records for ``slime_register_tools``."""
    return [
        ToolRecord(
            name="calculator", factory=make_calculator,
            summary="safe arithmetic evaluation (+ - * / // % **, abs round min max sqrt ...)",
            description="Evaluate an arithmetic expression and return its value.",
            parameters=CALCULATOR_SCHEMA,
        ),
        ToolRecord(
            name="python", factory=make_python_tool,
            summary="run Python code in the configured sandbox (tools.sandbox); stdout/stderr back",
            description="Run a Python 3 program in a sandbox and return what it prints.",
            parameters=PYTHON_SCHEMA,
            extra={"needs_sandbox": True},
        ),
    ]
