"""Optional dependencies of ``slime-core``, each installed with an extra of the distribution.

The loop, the built-in engine and the trainer need none of them; TensorBoard event files and
``core report``'s plots do. A record that needs one is unavailable without it, its probe naming
the extra to install, and code that imports one calls :func:`require` first, so a missing
package fails saying ``pip install 'slime-core[report]'`` rather than with a bare
``ModuleNotFoundError``. ``core/pyproject.toml`` declares the same extras (a test keeps the two
in step). A plugin names its own extra with ``install`` (slime-std's task verifiers:
``probe("math_verify", "math-verify", "slime-std[math]")``), through ``slime_core.api``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

# import name -> (distribution, extra of slime-core that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "matplotlib": ("matplotlib", "report"),
}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def install_hint(module: str, dist: str | None = None, install: str | None = None) -> str:
    """What to install for ``module`` (distribution ``dist``): the extra when it is one of
    core's, else ``install`` (a requirement such as ``slime-std[math]``), else the package."""
    if module in EXTRAS:
        dist, extra = EXTRAS[module]
        return f"{dist} is not installed (pip install 'slime-core[{extra}]')"
    if install:
        return f"{dist or module} is not installed (pip install '{install}')"
    return f"{module} is not installed (pip install {dist or module})"


def missing(module: str, dist: str | None = None, install: str | None = None) -> str | None:
    """``None`` when ``module`` can be imported, else :func:`install_hint` (imports nothing)."""
    if importlib.util.find_spec(module) is not None:
        return None
    return install_hint(module, dist, install)


def probe(module: str, dist: str | None = None,
          install: str | None = None) -> Callable[[], str | None]:
    """A record's ``probe``: unavailable, with what to install, while ``module`` is missing."""
    return lambda: missing(module, dist, install)


def require(module: str, dist: str | None = None, install: str | None = None) -> None:
    """Raise :class:`MissingExtraError` naming what to install when ``module`` is missing."""
    reason = missing(module, dist, install)
    if reason is not None:
        raise MissingExtraError(reason)
