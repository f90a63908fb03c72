"""Generate ``docs/hooks.md`` from the hookspec docstrings.

Regenerate with ``python tools/hookdocs.py > docs/hooks.md``; ``tests/test_conformance.py``
fails when the checked-in file drifts from this output.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pluggy
from slime_hookspecs import PROJECT_NAME
from slime_hookspecs.specs import FAMILIES, SPEC_MODULES


def render() -> str:
    pluggy_manager = pluggy.PluginManager(PROJECT_NAME)
    for mod in SPEC_MODULES:
        pluggy_manager.add_hookspecs(mod)
    out = [
        "# Hook reference",
        "",
        "Generated from the docstrings in `hookspecs/slime_hookspecs/specs/` by",
        "`python tools/hookdocs.py > docs/hooks.md`; `core hooks NAME` shows the same text",
        "plus the implementations active in your environment.",
        "",
    ]
    for family, mod in FAMILIES.items():
        out += [f"## {family.capitalize()} hooks", ""]
        mdoc = inspect.getdoc(mod)
        if mdoc:
            out += [mdoc, ""]
        for name in (n for n in vars(mod) if n.startswith("slime_")):
            spec = getattr(pluggy_manager.hook, name).spec
            flags = [f for f in ("firstresult", "historic") if spec.opts.get(f)]
            sig = str(inspect.signature(spec.function)).replace("'", "")
            out += [f"### `{name}`", "", f"```python\n{name}{sig}\n```", ""]
            if flags:
                out += [f"Flags: {', '.join(flags)}", ""]
            out += [inspect.getdoc(spec.function) or "(undocumented)", ""]
    out += _data_types() + _record_types()
    return "\n".join(out).rstrip() + "\n"


def _type_text(tp: Any) -> str:
    text = tp if isinstance(tp, str) else getattr(tp, "__name__", None) or str(tp)
    return text.replace("typing.", "").replace("|", "\\|")


def _fields_table(cls: type, skip: tuple[str, ...] = ()) -> list[str]:
    """``| field | type | default | meaning |`` from the dataclass and its field comments."""
    from configdocs import _default, field_comments

    notes = field_comments(cls)
    for base in cls.__mro__[1:]:  # comments of inherited fields live on the base class
        if dataclasses.is_dataclass(base):
            notes = {**field_comments(base), **notes}
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        note = notes.get(f.name, "").replace("|", "\\|")
        rows.append(f"| `{f.name}` | `{_type_text(f.type)}` | `{_default(f)}` | {note} |")
    return rows + [""]


def _data_types() -> list[str]:
    """What hooks receive and return: the fields of Sample, TrainBatch and FilterResult."""
    from slime_hookspecs import FilterResult, Sample, TrainBatch
    from slime_hookspecs import sample as sample_module

    out = ["## Data types", "",
           "The objects hooks receive and return (`slime_hookspecs`, torch-free).", ""]
    for cls, extra in ((Sample, inspect.getdoc(sample_module)), (TrainBatch, None),
                       (FilterResult, None)):
        out += [f"### `{cls.__name__}`", "", inspect.getdoc(cls) or "", ""]
        if extra:
            out += [extra, ""]
        out += _fields_table(cls)
    return out


def _record_types() -> list[str]:
    """Every record type: its registration hook, its factory contract, fields and an example."""
    from slime_hookspecs import Record, records
    from slime_hookspecs.records import RECORD_TYPES

    out = ["## Record types", "", inspect.getdoc(records) or "", "",
           "Fields every record has (`Record`):", "", *_fields_table(Record)]
    common = {f.name for f in dataclasses.fields(Record)}
    for rt in RECORD_TYPES:
        out += [f"### `{rt.__name__}`", "",
                f"Kind `{rt.kind}`, returned by `{rt.hook}`.", "", inspect.getdoc(rt) or "", ""]
        own = [f.name for f in dataclasses.fields(rt) if f.name not in common]
        if own:
            out += ["Fields besides the common ones:", "",
                    *_fields_table(rt, skip=tuple(common))]
    return out


if __name__ == "__main__":
    print(render(), end="")
