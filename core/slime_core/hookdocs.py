"""Generate ``docs/hooks.md`` from the hookspec docstrings.

Regenerate with ``python -m slime_core.hookdocs > docs/hooks.md``; a test fails when the
checked-in file drifts from this output.
"""

from __future__ import annotations

import inspect

import pluggy

from slime_hookspecs import PROJECT_NAME
from slime_hookspecs.specs import FAMILIES, SPEC_MODULES


def render() -> str:
    pm = pluggy.PluginManager(PROJECT_NAME)
    for mod in SPEC_MODULES:
        pm.add_hookspecs(mod)
    out = [
        "# Hook reference",
        "",
        "Generated from the docstrings in `hookspecs/slime_hookspecs/specs/` by",
        "`python -m slime_core.hookdocs > docs/hooks.md`; `core hooks NAME` shows the same text",
        "plus the implementations active in your environment.",
        "",
    ]
    for family, mod in FAMILIES.items():
        out += [f"## {family.capitalize()} hooks", ""]
        mdoc = inspect.getdoc(mod)
        if mdoc:
            out += [mdoc, ""]
        for name in (n for n in vars(mod) if n.startswith("slime_")):
            spec = getattr(pm.hook, name).spec
            flags = [f for f in ("firstresult", "historic") if spec.opts.get(f)]
            sig = str(inspect.signature(spec.function)).replace("'", "")
            out += [f"### `{name}`", "", f"```python\n{name}{sig}\n```", ""]
            if flags:
                out += [f"Flags: {', '.join(flags)}", ""]
            out += [inspect.getdoc(spec.function) or "(undocumented)", ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
