"""The rollout dump format (``debug.save_rollouts``), read back by ``debug.replay_rollouts``.

One JSON Lines file per rollout, ``rollout_<id:06d>.jsonl`` for training steps and
``eval_<id:06d>.jsonl`` for evaluations, UTF-8, written atomically. Line 1 is the header::

    {"format": "slime.rollout_dump", "version": 1, "kind": "train", "rollout_id": 3,
     "group_sizes": [4, 4], "num_samples": 8, "metrics": {...}, "created_unix": 1.7e9}

and each following line is one ``Sample.to_dict()`` (``status`` as its string), groups one
after the other in order: ``group_sizes`` cuts the lines back into groups. ``metrics`` are the
rollout's own metrics (``RolloutResult.metrics``, ``perf/*`` timings left out). Metadata,
labels and prompts pass through :func:`slime_core.data.jsonsafe.json_safe` (tuples become
lists, unknown objects their ``str``); floats are written with Python's exact ``repr``, so
token log-probs and rewards read back bit for bit (non-finite values as ``NaN`` /
``Infinity``, which Python's ``json`` reads). The full description is ``docs/rollout_dumps.md``.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from slime_hookspecs import RolloutResult, Sample

FORMAT = "slime.rollout_dump"
VERSION = 1
_NAME = re.compile(r"^(rollout|eval)_(\d{6,})\.jsonl$")
_JSON_FIELDS = ("prompt", "label", "reward", "metadata", "train_metadata")


class DumpError(ValueError):
    """A dump file that is missing, malformed or of another format version."""


def dump_path(directory: str | Path, rollout_id: int, evaluation: bool) -> Path:
    kind = "eval" if evaluation else "rollout"
    return Path(directory) / f"{kind}_{rollout_id:06d}.jsonl"


def sample_line(sample: Sample) -> str:
    from slime_core.data.jsonsafe import json_safe

    d = sample.to_dict()
    for key in _JSON_FIELDS:
        d[key] = json_safe(d[key])
    return json.dumps(d, ensure_ascii=False)


def write_dump(directory: str | Path, rollout_id: int, result: RolloutResult,
               evaluation: bool = False) -> Path:
    """Write one rollout's groups; returns the file written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = dump_path(directory, rollout_id, evaluation)
    header = {
        "format": FORMAT, "version": VERSION, "kind": "eval" if evaluation else "train",
        "rollout_id": int(rollout_id), "group_sizes": [len(g) for g in result.groups],
        "num_samples": sum(len(g) for g in result.groups),
        "metrics": {k: float(v) for k, v in result.metrics.items() if not k.startswith("perf/")},
        "created_unix": time.time(),
    }
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(header) + "\n")
        for group in result.groups:
            for s in group:
                fh.write(sample_line(s) + "\n")
    os.replace(tmp, path)
    return path


def read_dump(path: str | Path) -> tuple[dict[str, Any], RolloutResult]:
    """Read a dump back into a :class:`RolloutResult`; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DumpError(f"rollout dump {path} does not exist")
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        raise DumpError(f"{path}: empty file, expected a header line")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise DumpError(f"{path}:1: header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise DumpError(f"{path}:1: header is not a JSON object")
    if header.get("format") != FORMAT:
        raise DumpError(f"{path}:1: not a slime rollout dump (format {header.get('format')!r}, "
                        f"expected {FORMAT!r})")
    if header.get("version") != VERSION:
        raise DumpError(f"{path}:1: dump format version {header.get('version')!r}; this slime "
                        f"reads version {VERSION}")
    sizes = header.get("group_sizes")
    if not isinstance(sizes, list) or not all(isinstance(n, int) and n > 0 for n in sizes):
        raise DumpError(f"{path}:1: group_sizes must be a list of positive integers, got {sizes!r}")
    body = [ln for ln in lines[1:] if ln.strip()]
    if len(body) != sum(sizes):
        raise DumpError(f"{path}: header announces {sum(sizes)} samples in {len(sizes)} groups, "
                        f"the file has {len(body)} sample lines (truncated dump?)")
    samples: list[Sample] = []
    for lineno, line in enumerate(body, start=2):
        try:
            s = Sample.from_dict(json.loads(line))
            s.validate()
        except (ValueError, TypeError) as exc:
            raise DumpError(f"{path}:{lineno}: bad sample: {exc}") from exc
        samples.append(s)
    groups, at = [], 0
    for n in sizes:
        groups.append(samples[at:at + n])
        at += n
    return header, RolloutResult(groups=groups, metrics=dict(header.get("metrics") or {}))


def list_dumps(directory: str | Path) -> dict[str, list[int]]:
    """``{"train": [ids], "eval": [ids]}`` of the dumps in ``directory``."""
    out: dict[str, list[int]] = {"train": [], "eval": []}
    d = Path(directory)
    if d.is_dir():
        for p in d.iterdir():
            m = _NAME.match(p.name)
            if m:
                out["eval" if m.group(1) == "eval" else "train"].append(int(m.group(2)))
    return {k: sorted(v) for k, v in out.items()}
