"""Prompts from a file: JSONL (one JSON object a line), JSON (an array of objects) or parquet.

The file type follows the extension (``.parquet`` / ``.pq`` -> parquet via pyarrow, ``.json``
-> JSON array, anything else -> JSONL); the record name (``jsonl`` / ``parquet``) only picks
the type of a file with another extension. The train split reads ``data.path``, the eval split
``data.eval_path``. Every row is read and checked when the source is built, so a bad file
fails at start-up with one error that counts every bad row and quotes the first few as
``x.jsonl:3: why`` (see :func:`slime_core.api.row_problem`); ``data.skip_bad_rows = true`` keeps
the good rows instead and logs how many were skipped. A row is bad when it is:

* not UTF-8 or not JSON (a JSONL line);
* missing ``data.input_key`` (the message lists the keys the row has), or its prompt is empty;
* without a usable label when the configured reward needs one (``exact``, ``math``);
* a prompt that fills the context: at least ``rollout.max_context_len`` (or the model's
  ``max_position_embeddings``) tokens after templating, so no response fits
  (the core's :class:`~slime_core.api.PromptDataSource`).

A missing file fails naming the config key and the path.

Row to sample (keys from ``[data]``): ``input_key`` -> prompt (text, or a list of chat
messages); ``label_key`` -> label (``None`` when absent); ``metadata_key`` -> metadata (a dict,
or a JSON string holding one); the row's other keys go to ``metadata["raw"]`` (for rewards that
need more than the label); ``tools_key`` -> the chat template's ``tools`` and
``metadata["tools"]``. Values are made JSON-safe (see :func:`slime_core.api.json_safe`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slime_core.api import BadRows, PromptDataSource, PromptRow, json_safe, row_problem

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


class BadRecord:
    """A record that could not be read (bad JSON, bad UTF-8): :func:`iter_records` yields it
    in the record's place, so every bad line of a file is reported, not only the first."""

    def __init__(self, why: str) -> None:
        self.why = why


def iter_records(path: str, key: str, kind: str = "jsonl") -> Iterator[tuple[str, Any]]:
    """``(reference, record)`` pairs of a file; the reference is ``"x.jsonl:3"`` (line 3),
    ``"x.parquet row 3"`` or ``"x.json item 3"`` (1-based). A JSONL line that is not UTF-8 or
    not JSON gives a :class:`BadRecord`. ``key`` is the config key that named the file."""
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
            yield f"{path} row {i}", rec
    elif ftype == "json":
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise ValueError(
                f"{key} file {path!r}, line {line}: invalid UTF-8 ({exc.reason} at byte "
                f"{exc.start} of the file)"
            ) from None
        try:
            data = json.loads(text)
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
            yield f"{path} item {i}", rec
    else:
        with p.open("rb") as fh:
            for lineno, raw_line in enumerate(fh, start=1):
                ref = f"{path}:{lineno}"
                try:
                    text = raw_line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    yield ref, BadRecord(f"invalid UTF-8 ({exc.reason} at byte {exc.start} of the line)")
                    continue
                if not text.strip():
                    continue
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as exc:
                    yield ref, BadRecord(
                        f"invalid JSON ({exc.msg}, column {exc.colno}): {text.strip()[:120]!r}"
                    )
                    continue
                yield ref, rec


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
        self.rows: list[PromptRow] = []
        self.refs: list[str] = []  # where each row is in the file (``x.jsonl:3``)
        bad = BadRows(key, self.path)
        total = 0
        for ref, rec in iter_records(self.path, key, default_type):
            total += 1
            if isinstance(rec, BadRecord):
                bad.add(ref, rec.why)
                continue
            try:
                row = row_from_record(rec, config.data, ref)
            except ValueError as exc:
                bad.add(ref, str(exc).removeprefix(f"{ref}: "))
                continue
            why = row_problem(row.prompt, row.label, config.data.label_key)
            if why is not None:
                bad.add(ref, why)
                continue
            self.rows.append(row)
            self.refs.append(ref)
        if bad:
            if not config.data.skip_bad_rows:
                raise bad.error(total)
            bad.warn(total)
        self.skipped_rows = len(bad)
        if not self.rows:
            raise ValueError(f"{key} file {self.path!r} holds no prompts")
        # data.max_prompt_len and the context: fails now (before a model loads) if it must
        self.apply_max_prompt_len()

    def _num_rows(self) -> int:
        return len(self.rows)

    def _row(self, i: int) -> PromptRow:
        return self.rows[i]

    def _row_ref(self, i: int) -> str:
        return self.refs[i]
