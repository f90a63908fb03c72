"""Tool-call parsers: find the calls in one model turn.

A parser is ``parser(text) -> ParseResult(content, calls, errors)`` with a ``stop`` list (the
strings after which a turn should end so the tools can run); records of kind
``ToolParserRecord`` build them: ``factory(config, tokenizer) -> parser``.

``hermes`` reads the Hermes / Qwen format: each call is a JSON object
``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and ``</tool_call>``. The
arguments may also be given as a JSON string (OpenAI style) or under ``"parameters"``.
A block that is not such an object, and a ``<tool_call>`` that is never closed, are errors of
kind ``malformed``; they are reported with their position so the caller can answer them in
order with the calls.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass
class ToolCall:
    """One parsed call; ``position`` is its offset in the turn's text."""

    name: str
    arguments: dict[str, Any]
    id: str = ""
    raw: str = ""
    position: int = 0


@dataclass
class ToolCallError:
    """A call that could not be parsed (or run); ``kind`` names the error class."""

    kind: str
    message: str
    raw: str = ""
    position: int = 0
    name: str = ""


class ParseResult(NamedTuple):
    content: str  # the text outside the calls
    calls: list[ToolCall]
    errors: list[ToolCallError]


@dataclass
class HermesParser:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen 2.5/3)."""

    open_tag: str = "<tool_call>"
    close_tag: str = "</tool_call>"
    stop: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.stop:
            self.stop = [self.close_tag]
        self._block = re.compile(re.escape(self.open_tag) + r"(.*?)" + re.escape(self.close_tag),
                                 re.DOTALL)

    def __call__(self, text: str) -> ParseResult:
        calls: list[ToolCall] = []
        errors: list[ToolCallError] = []
        pieces: list[str] = []
        end = 0
        for m in self._block.finditer(text):
            pieces.append(text[end:m.start()])
            end = m.end()
            body = m.group(1).strip()
            parsed = _parse_call(body)
            if isinstance(parsed, str):
                errors.append(ToolCallError("malformed", parsed, raw=body, position=m.start()))
            else:
                name, args = parsed
                calls.append(ToolCall(name=name, arguments=args, id=f"call_{len(calls)}",
                                      raw=body, position=m.start()))
        rest = text[end:]
        dangling = rest.find(self.open_tag)
        if dangling >= 0:
            errors.append(ToolCallError(
                "malformed", f"{self.open_tag} is never closed by {self.close_tag}",
                raw=rest[dangling + len(self.open_tag):].strip(), position=end + dangling,
            ))
            rest = rest[:dangling]
        pieces.append(rest)
        return ParseResult("".join(pieces).strip(), calls, errors)


def _parse_call(body: str) -> tuple[str, dict[str, Any]] | str:
    """``(name, arguments)`` or an error message."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return f"the tool call is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(obj, dict):
        return f"the tool call must be a JSON object, got {type(obj).__name__}"
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return 'the tool call needs a "name" string'
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return f'"arguments" of {name!r} is a string but not JSON ({exc.msg})'
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f'"arguments" of {name!r} must be a JSON object, got {type(args).__name__}'
    return name, args


def make_hermes_parser(config: Any = None, tokenizer: Any = None) -> HermesParser:
    """The ``hermes`` record's factory; ``config`` and ``tokenizer`` are unused."""
    return HermesParser()
