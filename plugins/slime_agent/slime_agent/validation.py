"""Request parsing and validation shared by the agent API and the rollout buffer.

Both services take JSON from processes they do not control (agent frameworks, workers), and
what they accept ends up in a training batch. Everything goes through here:

* :func:`parse_json` -- the body as a JSON object: bad JSON, nesting deeper than
  :data:`MAX_DEPTH` (``json`` itself recurses; 100k levels raised ``RecursionError``) and the
  non-standard ``NaN`` / ``Infinity`` literals (Python's ``json`` accepts them, and
  ``json.dumps`` writes them), like ``1e999`` (read as infinity), and strings that are not
  Unicode (a lone surrogate escape such as ``"\\ud800"``: valid JSON syntax that tokenizers
  and ``str.encode`` refuse) are refused, naming where they are;
* :func:`query_values` -- query-string values read as JSON scalars, so ``?num_groups=2.7``
  and ``?wait=nan`` meet the same schema as a body;
* :func:`check` -- a JSON schema (draft 2020-12) with two deliberate tightenings: an
  ``integer`` is a Python ``int`` (not ``True``, not ``2.0``) and a ``number`` is a finite
  ``int`` or ``float`` (not a bool). The first violation is raised as :class:`RequestError`
  with the field's path (``samples[0].tokens[3]``).

Arrays of plain numbers (token ids, loss masks, log-probs) are checked by a fast path with
the same meaning as the schema's ``items`` (a 100k-token write costs milliseconds instead of
seconds on jsonschema's generic loop).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

MAX_DEPTH = 64  # deepest legitimate body: a tool's JSON-schema parameters inside a request


class RequestError(ValueError):
    """A refused request: HTTP ``status``, the offending field (``param``) and a ``code``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


class _NonFinite:
    """Stands in for a ``NaN`` / ``Infinity`` literal until the tree walk reports its path."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _float(text: str) -> Any:
    """``parse_float``: ``1e999`` is valid JSON that Python reads as ``inf``."""
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def field_path(parts: Any) -> str:
    """``["samples", 0, "tokens"]`` -> ``samples[0].tokens``."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def parse_json(raw: bytes, *, allow_empty: bool = False, value_status: int = 400) -> dict[str, Any]:
    """The body as a JSON object (see the module docstring); ``{}`` for an allowed empty body.

    :param value_status: the status of a non-finite number (a field's value, not the syntax):
        the buffer answers 422 for every field error, the agent API 400 as OpenAI does.
    """
    if not raw.strip():
        if allow_empty:
            return {}
        raise RequestError("the request body is empty; send a JSON object", code="invalid_json")
    try:
        text = raw.decode("utf-8")  # JSON is UTF-8 (RFC 8259); json.loads would pass lone
        body = json.loads(text, parse_constant=_NonFinite,  # surrogates on to tokenizers
                          parse_float=_float)
    except RecursionError:
        raise RequestError(f"the request body is nested deeper than {MAX_DEPTH} levels",
                           code="invalid_json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}",
                           code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    _walk(body, value_status)
    return body


def _not_unicode(text: str) -> bool:
    """True for a string holding a lone surrogate (``"\\ud800"`` escapes decode to one)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _surrogate_error(path: tuple[Any, ...], value_status: int) -> RequestError:
    where = field_path(path) or "body"
    return RequestError(f"{where}: not valid Unicode (a lone UTF-16 surrogate escape such as "
                        "\\ud800 that no text encoding can hold)", value_status, where,
                        "invalid_value")


def _walk(root: Any, value_status: int) -> None:
    """Depth limit, non-finite numbers and lone surrogates, iteratively (no recursion on
    hostile input)."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            items: Any = node.items()
        elif isinstance(node, list):
            if node and all(type(x) in (int, float) for x in node):
                continue  # the common flat list (ids, log-probs); NaN literals are not floats
            items = enumerate(node)
        elif isinstance(node, _NonFinite):
            raise RequestError(f"{field_path(path) or 'body'}: {node.literal} is not a finite "
                               "number (JSON has no NaN or Infinity)", value_status,
                               field_path(path), "invalid_value")
        else:
            continue
        if len(path) >= MAX_DEPTH:
            raise RequestError(f"{field_path(path)}: nested deeper than {MAX_DEPTH} levels",
                               400, field_path(path), "invalid_json")
        for key, value in items:
            if isinstance(key, str) and _not_unicode(key):
                raise _surrogate_error(path, value_status)
            if isinstance(value, str):
                if _not_unicode(value):
                    raise _surrogate_error((*path, key), value_status)
            elif isinstance(value, (dict, list, _NonFinite)):
                stack.append((value, (*path, key)))


def query_values(query: Mapping[str, str]) -> dict[str, Any]:
    """Query parameters as JSON scalars (``"2"`` -> 2, ``"2.7"`` -> 2.7, ``"nan"`` stays a
    string and fails a number schema); text that is not JSON stays text."""
    out: dict[str, Any] = {}
    for key, value in query.items():
        try:
            parsed = json.loads(value, parse_constant=str, parse_float=_query_float)
        except ValueError:
            parsed = value
        out[key] = parsed if isinstance(parsed, (int, float, str, bool)) else value
    return out


def _query_float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else text  # stays text: fails a number schema


# -- the schema validator ---------------------------------------------------------------------

def _is_int(checker: Any, x: Any) -> bool:
    return type(x) is int


def _is_number(checker: Any, x: Any) -> bool:
    return (type(x) is int) or (type(x) is float and math.isfinite(x))


_SIMPLE_ITEM_KEYS = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}


def _numeric_items(validator: Any, items: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """``items`` for arrays of bounded numbers without jsonschema's per-item overhead; other
    item schemas go to the standard implementation."""
    from jsonschema import Draft202012Validator, ValidationError

    if not (isinstance(items, dict) and isinstance(instance, list)
            and items.get("type") in ("integer", "number") and set(items) <= _SIMPLE_ITEM_KEYS):
        yield from Draft202012Validator.VALIDATORS["items"](validator, items, instance, schema)
        return
    ok = _is_int if items["type"] == "integer" else _is_number
    lo, hi = items.get("minimum", -math.inf), items.get("maximum", math.inf)
    xlo, xhi = items.get("exclusiveMinimum", -math.inf), items.get("exclusiveMaximum", math.inf)
    for i, x in enumerate(instance):
        if not ok(None, x):
            what = "a finite number" if items["type"] == "number" else "an integer"
            yield ValidationError(f"{x!r} is not {what}", path=[i])
            return
        if not (lo <= x <= hi and xlo < x < xhi):
            yield ValidationError(
                f"{x!r} is outside [{lo}, {hi}]" if math.isinf(xlo) and math.isinf(xhi)
                else f"{x!r} is out of range", path=[i])
            return


def _validator_class() -> Any:
    from jsonschema import Draft202012Validator, validators

    checker = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_int, "number": _is_number})
    return validators.extend(Draft202012Validator, {"items": _numeric_items},
                             type_checker=checker)


_VALIDATORS: dict[int, Any] = {}


def validator_for(schema: dict[str, Any]) -> Any:
    """A compiled validator of ``schema`` (cached: schemas here are module constants)."""
    v = _VALIDATORS.get(id(schema))
    if v is None:
        cls = _validator_class()
        cls.check_schema(schema)
        v = _VALIDATORS[id(schema)] = cls(schema)
    return v


def check(instance: Any, schema: dict[str, Any], *, status: int = 422, prefix: str = "") -> None:
    """Raise :class:`RequestError` (``status``) naming the field of the first violation."""
    from jsonschema.exceptions import best_match

    error = best_match(validator_for(schema).iter_errors(instance))
    if error is None:
        return
    path = field_path([*([prefix] if prefix else []), *error.absolute_path])
    message = error.message
    if error.validator == "additionalProperties":
        message = f"unknown field(s): {message}"
    if len(message) > 300:  # the offending value can be a whole sample
        message = message[:300] + "..."
    raise RequestError(f"{path or 'body'}: {message}", status, path or None,
                       "invalid_type" if error.validator == "type" else "invalid_value")


def check_reward_bound(reward: Any, bound: float, where: str, *, status: int = 422) -> None:
    """Raise :class:`RequestError` (``status``) naming ``where`` (or ``where.<key>`` for a dict
    reward) when a reward that passed its schema is beyond ``rollout.max_abs_reward = bound``
    (``slime_core.api.reward_bound_error``; 0: no bound). ``None`` passes: no reward yet."""
    from slime_core.api import reward_bound_error

    values = reward.items() if isinstance(reward, dict) else [(None, reward)]
    for key, value in values:
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # the schema judges types; this is the magnitude only
        try:
            why = reward_bound_error(float(value), bound)
        except OverflowError:  # a JSON integer of hundreds of digits
            why = f"an integer of {len(str(abs(value)))} digits is beyond any float"
        if why is not None:
            path = where if key is None else f"{where}.{key}"
            raise RequestError(f"{path}: {why} (the sample's reward would turn its group's "
                               "advantages into NaN)", status, path, "invalid_value")
