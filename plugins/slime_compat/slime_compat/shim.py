"""slime's import names without THUDM/slime: the ``slime`` package under ``_shim/``.

:func:`install` appends ``_shim`` to ``sys.path`` only when no ``slime`` package is importable
already, so a real install always wins (it is found first, and the shim directory is never put
in front of anything). The shim modules re-export this plugin's implementations; the list of
names is in plugins/slime_compat/README.md.
"""

from __future__ import annotations

import importlib.util
import os
import sys

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_shim")
_mode: str | None = None


def install() -> str:
    """``"shim"`` (the shim serves ``import slime``) or ``"real"`` (THUDM/slime is installed)."""
    global _mode
    if _mode is not None:
        return _mode
    if SHIM_DIR in sys.path:
        _mode = "shim"
        return _mode
    spec = importlib.util.find_spec("slime")
    if spec is not None:
        _mode = "real"
    else:
        sys.path.append(SHIM_DIR)
        _mode = "shim"
    return _mode


def mode() -> str:
    return install()


def real_location() -> str:
    spec = importlib.util.find_spec("slime")
    return str(spec.origin or list(spec.submodule_search_locations or [])) if spec else "?"


def adopt_real_status() -> None:
    """Report real ``slime.utils.types.Sample.Status`` members from the sample views."""
    from slime.utils.types import Sample  # the real package

    from slime_compat.samples import set_real_sample, set_real_status

    set_real_status(Sample.Status)
    set_real_sample(Sample)
