"""All hook specifications, by family (registration, configuration, per-call, lifecycle)."""

from __future__ import annotations

from types import ModuleType

from slime_hookspecs.specs import configuration, lifecycle, per_call, registration

SPEC_MODULES: tuple[ModuleType, ...] = (registration, configuration, per_call, lifecycle)

FAMILIES: dict[str, ModuleType] = {
    "registration": registration,
    "configuration": configuration,
    "per-call": per_call,
    "lifecycle": lifecycle,
}


def hook_names() -> list[str]:
    """Every hook name, in catalog order."""
    out: list[str] = []
    for mod in SPEC_MODULES:
        out.extend(n for n in vars(mod) if n.startswith("slime_"))
    return out


def family_of(name: str) -> str:
    for fam, mod in FAMILIES.items():
        if hasattr(mod, name):
            return fam
    raise KeyError(name)
