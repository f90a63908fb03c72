"""Prompts from a file: JSONL (one JSON object a line), JSON (an array of objects) or parquet.

The file type follows the extension (``.parquet`` / ``.pq`` -> parquet via pyarrow, ``.json``
-> JSON array, anything else -> JSONL); the record name (``jsonl`` / ``parquet``) only picks
the type of a file with another extension. The train split reads ``data.path``, the eval split
``data.eval_path``. Every row is read and checked when the source is built, so a bad file
fails at start-up, naming the file and the line (or row):

* malformed JSON: ``ValueError: data.path file 'x.jsonl', line 3: invalid JSON (...)``;
* no ``data.input_key``: the key, the file, the line and the keys the row has;
* a missing file: the config key and the path.

Row to sample (keys from ``[data]``): ``input_key`` -> prompt (text, or a list of chat
messages); ``label_key`` -> label (``None`` when absent); ``metadata_key`` -> metadata (a dict,
or a JSON string holding one); the row's other keys go to ``metadata["raw"]`` (for rewards that
need more than the label); ``tools_key`` -> the chat template's ``tools`` and
``metadata["tools"]``. Values are made JSON-safe (see :mod:`slime_core.data.jsonsafe`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from slime_core.data.base import PromptDataSource, PromptRow
from slime_core.data.jsonsafe import json_safe

PARQUET_SUFFIXES = (".parquet", ".pq")


def file_type(path: str, default: str = "jsonl") -> str:
    """``"parquet"``, ``"json"`` or ``"jsonl"`` from the extension (``default`` otherwise)."""
    suffix = Path(path).suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix == ".json":
        return "json"
    if suffix == ".jsonl":
        return "jsonl"
    return default


def iter_records(path: str, key: str, kind: str = "jsonl") -> Iterator[tuple[str, Any]]:
    """``(location, record)`` pairs of a file; location is ``"line 3"`` / ``"row 3"`` / ``"item 3"``
    (1-based). ``key`` is the config key that named the file, for messages."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        raise FileNotFoundError(f"{key}: data file {path!r} {what}")
    ftype = file_type(path, default=kind)
    if ftype == "parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(p)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
            raise ValueError(f"{key}: cannot read parquet file {path!r}: {exc}") from exc
        for i, rec in enumerate(table.to_pylist(), start=1):
            yield f"row {i}", rec
    elif ftype == "json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{key} file {path!r}, line {exc.lineno}: invalid JSON ({exc.msg}, column {exc.colno})"
            ) from None
        if not isinstance(data, list):
            raise ValueError(
                f"{key} file {path!r}: a .json data file must hold an array of objects, "
                f"got {type(data).__name__} (use .jsonl for one object a line)"
            )
        for i, rec in enumerate(data, start=1):
            yield f"item {i}", rec
    else:
        with p.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{key} file {path!r}, line {lineno}: invalid JSON "
                        f"({exc.msg}, column {exc.colno}): {line.strip()[:120]!r}"
                    ) from None
                yield f"line {lineno}", rec


def row_from_record(rec: Any, data: Any, where: str) -> PromptRow:
    """One :class:`PromptRow` from a record; ``where`` (file and line) prefixes every error."""
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if data.input_key not in rec:
        raise ValueError(
            f"{where}: input key {data.input_key!r} (data.input_key) is missing; "
            f"keys present: {sorted(rec)}"
        )
    prompt = rec[data.input_key]
    if isinstance(prompt, list):
        if not all(isinstance(m, dict) and "role" in m for m in prompt):
            raise ValueError(
                f"{where}: {data.input_key!r} is a list but not of chat messages "
                "(dicts with 'role' and 'content')"
            )
        prompt = json_safe(prompt)
    elif not isinstance(prompt, str):
        raise ValueError(
            f"{where}: {data.input_key!r} must be text or a list of chat messages, "
            f"got {type(prompt).__name__}"
        )
    metadata = _dict_value(rec.get(data.metadata_key), where, data.metadata_key, "data.metadata_key")
    used = {data.input_key, data.label_key, data.metadata_key}
    tools = None
    if data.tools_key:
        used.add(data.tools_key)
        tools = rec.get(data.tools_key)
        if isinstance(tools, str):
            try:
                tools = json.loads(tools)
            except json.JSONDecodeError:
                raise ValueError(
                    f"{where}: {data.tools_key!r} (data.tools_key) is a string but not JSON"
                ) from None
        if tools is not None and not isinstance(tools, list):
            raise ValueError(
                f"{where}: {data.tools_key!r} (data.tools_key) must be a list of tool schemas"
            )
        tools = json_safe(tools) if tools else None
        if tools:
            metadata["tools"] = tools
    raw = {k: v for k, v in rec.items() if k not in used}
    if raw:
        metadata.setdefault("raw", json_safe(raw))
    return PromptRow(
        prompt=prompt, label=json_safe(rec.get(data.label_key)), metadata=metadata, tools=tools
    )


def _dict_value(value: Any, where: str, name: str, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(f"{where}: {name!r} ({key}) is a string but not JSON") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {name!r} ({key}) must be an object, got {type(value).__name__}")
    return json_safe(value)


class FileDataSource(PromptDataSource):
    """Prompts from ``data.path`` (train) or ``data.eval_path`` (eval); see the module docstring."""

    kind = "file"

    def __init__(self, config: Any, split: str, *, default_type: str = "jsonl",
                 tokenizer: Any = None) -> None:
        super().__init__(config, split, tokenizer=tokenizer)
        key = "data.eval_path" if split == "eval" else "data.path"
        path = config.data.eval_path if split == "eval" else config.data.path
        if not path:
            raise ValueError(
                f"{key} is empty: set it to a .jsonl, .json or .parquet file of prompts"
            )
        self.path = str(path)
        self.file_type = file_type(self.path, default=default_type)
        self.rows: list[PromptRow] = [
            row_from_record(rec, config.data, f"{key} file {self.path!r}, {loc}")
            for loc, rec in iter_records(self.path, key, default_type)
        ]
        if not self.rows:
            raise ValueError(f"{key} file {self.path!r} holds no prompts")

    def _num_rows(self) -> int:
        return len(self.rows)

    def _row(self, i: int) -> PromptRow:
        return self.rows[i]
