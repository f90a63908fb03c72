"""Turn row values into JSON-ready values, so samples survive ``to_dict`` / ``json.dumps``.

Data rows come from JSONL (already JSON), parquet (dates, bytes, decimals) or procedural
generators (tuples, sets, numpy scalars). Sample metadata travels through checkpoints and
Ray, so it is normalised once, when the row is read.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
from typing import Any


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy of ``value``.

    Conversions: tuple / set / frozenset -> list (sets sorted when possible); dict keys -> str;
    numpy scalars and arrays -> Python numbers / lists (via ``.item()`` / ``.tolist()``);
    dates and times -> ISO strings; ``Decimal`` -> float; bytes -> UTF-8 text, or base64 when
    not valid UTF-8; non-finite floats are kept (``json`` writes them as NaN / Infinity);
    anything else -> ``str(value)``.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [json_safe(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy arrays and scalars
        return json_safe(value.tolist())
    if hasattr(value, "item") and callable(value.item):
        return json_safe(value.item())
    return str(value)
