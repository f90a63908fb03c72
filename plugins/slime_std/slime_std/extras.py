"""Optional dependencies of slime-std, each installed with an extra of the distribution.

The task verifiers and the procedural data need packages the loop does not: math-verify
(``math``, ``boxed_math``) and reasoning-gym (the ``reasoning_gym`` reward and data source). A
record that needs one is unavailable without it, its probe naming the extra
(``pip install 'slime-std[math]'``), and code that imports one calls :func:`require` first.
``plugins/slime_std/pyproject.toml`` declares the same extras (a test keeps the two in step).
"""

from __future__ import annotations

from collections.abc import Callable

import slime_core.api as api

# import name -> (distribution, extra of slime-std that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "math_verify": ("math-verify", "math"),
    "reasoning_gym": ("reasoning-gym", "reasoning-gym"),
}


def _install(module: str, dist: str | None) -> tuple[str | None, str | None]:
    if module in EXTRAS:
        dist, extra = EXTRAS[module]
        return dist, f"slime-std[{extra}]"
    return dist, None


def probe(module: str, dist: str | None = None) -> Callable[[], str | None]:
    """A record's ``probe``: unavailable, naming what to install, while ``module`` is missing."""
    return api.probe(module, *_install(module, dist))


def require(module: str) -> None:
    """Raise ``MissingExtraError`` naming the extra when ``module`` is not installed."""
    api.require(module, *_install(module, None))
