"""``[[eval.datasets]]``: one table per benchmark, unset keys inherited (slime's --eval-config).

```toml
[eval]
interval = 5
pass_at = [1, 4]

[[eval.datasets]]
name = "heldout"                       # metrics eval/heldout/accuracy, eval/heldout/pass@4, ...
path = "examples/tiny_arith/eval.jsonl"
n_samples = 4
temperature = 1.0

[[eval.datasets]]
name = "chain_sum"
source = "reasoning_gym"               # any data source record
task = "chain_sum"
size = 50
reward = "reasoning_gym"
```

Defaults: ``reward`` from ``eval.reward`` (else ``rollout.reward``); ``n_samples`` from
``eval.n_samples_per_prompt``; ``temperature``, ``top_p``, ``top_k``, ``max_new_tokens`` and
``max_prompts`` from ``[eval]``; ``stop`` from ``rollout.stop``; ``source`` is ``jsonl`` when a
``path`` is given, else ``data.source``; the keys of the rows (``input_key``, ``label_key``,
``metadata_key``), ``apply_chat_template`` and ``prompt_template`` from ``[data]``.
``generate`` names a function ``"package.module:function"`` with the signature of
``slime_generate`` (``config, sample, sampling_params, engine``; may be async) that generates
this dataset's samples instead of the hook (slime's ``custom_generate_function_path``).
A dataset's ``reward`` is written into its rows' ``metadata.rm_type``, so it wins over a
row's own (as slime's dataset ``rm_type`` does).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from typing import Any

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclass
class EvalDatasetSpec:
    name: str
    path: str = ""
    source: str = ""
    task: str = ""
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    size: int | None = None
    seed: int | None = None
    reward: str = ""
    n_samples: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_new_tokens: int | None = None
    stop: list[str] | None = None
    max_prompts: int | None = None
    generate: str = ""
    input_key: str | None = None
    label_key: str | None = None
    metadata_key: str | None = None
    apply_chat_template: bool | None = None
    prompt_template: str | None = None


_TYPES = {f.name: f.type for f in dataclasses.fields(EvalDatasetSpec)}


def _check(where: str, key: str, value: Any) -> Any:
    want = _TYPES[key]
    ok = {
        "str": isinstance(value, str),
        "int | None": isinstance(value, int) and not isinstance(value, bool),
        "float | None": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool | None": isinstance(value, bool),
        "str | None": isinstance(value, str),
        "list[str] | None": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "dict[str, Any]": isinstance(value, dict),
    }[str(want)]
    if not ok:
        raise ValueError(f"{where}.{key}: expected {want}, got {value!r}")
    return float(value) if want == "float | None" else value


def parse_datasets(raw: list[dict[str, Any]]) -> list[EvalDatasetSpec]:
    """Checked specs of ``eval.datasets`` (unknown keys named with the nearest valid one)."""
    specs, seen = [], set()
    for i, table in enumerate(raw):
        where = f"eval.datasets[{i}]"
        if not isinstance(table, dict):
            raise ValueError(f"{where}: expected a table, got {table!r}")
        for key in table:
            if key not in _TYPES:
                close = difflib.get_close_matches(key, list(_TYPES), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{where}: unknown key {key!r}{hint} (valid: {', '.join(_TYPES)})")
        name = table.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"{where}.name: required, letters, digits, _ . - only (it becomes "
                             f"the metric prefix eval/<name>/); got {name!r}")
        if name in seen:
            raise ValueError(f"{where}.name: {name!r} is used by two datasets")
        seen.add(name)
        spec = EvalDatasetSpec(**{k: _check(f"eval.datasets.{name}", k, v) for k, v in table.items()})
        if spec.n_samples is not None and spec.n_samples < 1:
            raise ValueError(f"eval.datasets.{name}.n_samples: must be >= 1")
        if spec.top_p is not None and not 0 < spec.top_p <= 1:
            raise ValueError(f"eval.datasets.{name}.top_p: must be in (0, 1]")
        if spec.generate and ":" not in spec.generate:
            raise ValueError(f"eval.datasets.{name}.generate: expected 'package.module:function', "
                             f"got {spec.generate!r}")
        specs.append(spec)
    return specs


def resolved(config: Any) -> list[EvalDatasetSpec]:
    """The specs of ``config.eval.datasets`` with every inherited value filled in."""
    e, r, d = config.eval, config.rollout, config.data
    out = []
    for spec in parse_datasets(list(e.datasets)):
        out.append(dataclasses.replace(
            spec,
            source=spec.source or ("jsonl" if spec.path else d.source),
            reward=spec.reward or e.reward or r.reward,
            n_samples=spec.n_samples if spec.n_samples is not None else e.n_samples_per_prompt,
            temperature=spec.temperature if spec.temperature is not None else e.temperature,
            top_p=spec.top_p if spec.top_p is not None else e.top_p,
            top_k=spec.top_k if spec.top_k is not None else e.top_k,
            max_new_tokens=spec.max_new_tokens or e.max_new_tokens or r.max_new_tokens,
            stop=list(spec.stop) if spec.stop is not None else list(r.stop),
            max_prompts=spec.max_prompts if spec.max_prompts is not None else e.max_prompts,
        ))
    return out
