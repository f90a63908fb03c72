"""Generate ``docs/config.md``: every configuration key of the core and the first-party plugins.

Regenerate with ``python tools/configdocs.py > docs/config.md``; ``tests/test_conformance.py``
fails when the checked-in file drifts from this output. Each key's line comes from its dataclass field (type
and default) and the comment written after it in the source.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from typing import Any

# the first-party plugins that contribute sections (load without their optional backends)
FIRST_PARTY = ["slime_grpo", "slime_ppo", "vllm_rollout", "sglang_rollout", "megatron_backend",
               "slime_compat", "rlve", "mcp_tools", "slime_agent", "sandbox_e2b", "slime_lora"]


def field_comments(cls: type) -> dict[str, str]:
    """``name -> comment`` for the fields of dataclass ``cls``: the comment on the field's own
    lines, else the comment lines right above it."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))  # fields at column 4
    except (OSError, TypeError):
        return {}
    names = {f.name for f in dataclasses.fields(cls)}
    out: dict[str, str] = {}
    above: list[str] = []  # comment lines since the last statement
    current: str | None = None  # the field whose statement is being read
    trailing: list[str] = []
    skip = (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if current is None:
            if tok.type == tokenize.COMMENT:
                above.append(tok.string.lstrip("#").strip())
            elif tok.type == tokenize.NAME and tok.string in names and tok.start[1] == 4:
                current, trailing = tok.string, []
            elif tok.type not in skip:
                above = []
        elif tok.type == tokenize.COMMENT:
            trailing.append(tok.string.lstrip("#").strip())
        elif tok.type == tokenize.NEWLINE:  # end of the field's statement
            note = " ".join(trailing) or " ".join(above)
            if note:
                out[current] = note
            current, above = None, []
    return out


def _kind(f: dataclasses.Field[Any]) -> str:
    """The type as written in the source (a merged section's fields hold the types)."""
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", None) or str(f.type)
    if not isinstance(f.type, str) and typing.get_origin(f.type) is not None:
        kind = str(f.type).replace("typing.", "")
    return str(kind).replace("|", "or")


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    return repr(value).replace("|", "\\|")


def render() -> str:
    from slime_core.config.schema import build_schema
    from slime_core.pluginmgr import PluginSelection, SlimePluginManager

    manager = SlimePluginManager(PluginSelection(plugins=FIRST_PARTY, autoload=False)).load()
    schema = build_schema(manager)
    out = [
        "# Configuration reference",
        "",
        "Every key of the core's sections and of the first-party plugins' sections, generated",
        "by `python tools/configdocs.py > docs/config.md`. Set keys in the run's TOML file",
        "(`[section]` tables) or with `-o section.key=value`; an unknown key fails naming the",
        "closest valid one. A plugin's section exists only when the plugin is loaded.",
        "",
    ]
    for name in schema.sections():
        sec = schema.get(name)
        owner = f" (plugin `{sec.owner}`)" if sec.owner and not sec.owner.startswith("core") else ""
        out += [f"## `[{name}]`{owner}", ""]
        if sec.summary:
            out += [sec.summary[0].upper() + sec.summary[1:] + ".", ""]
        comments: dict[str, str] = {}
        parts = schema.parts(name)
        for part in parts:
            comments.update(field_comments(part.schema))
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for f in dataclasses.fields(sec.schema):
            note = comments.get(f.name, "").replace("|", "\\|")
            by = schema.owner_of(name, f.name)
            if by != sec.owner:  # a key an extension adds: it exists with that plugin only
                note = f"(plugin `{by}`) {note}"
            giver = next((p.owner for p in parts[1:] if f.name in p.defaults), None)
            if giver is not None:  # the core's default is replaced while that plugin is active
                own = next(g for g in dataclasses.fields(parts[0].schema) if g.name == f.name)
                note = f"(default from plugin `{giver}`; without it `{_default(own)}`) {note}"
            out.append(f"| `{f.name}` | {_kind(f)} | `{_default(f)}` | {note} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
