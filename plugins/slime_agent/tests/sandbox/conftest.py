"""Make ``slime_hookspecs`` and ``slime_core`` importable from the checkout without installing."""

from __future__ import annotations

import os
import sys

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
for _path in (os.path.join(_REPO, "core"), os.path.join(_REPO, "hookspecs")):
    if _path not in sys.path:
        sys.path.insert(0, _path)


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    config.addinivalue_line(
        "markers", "no_bwrap_needed: the test does not need a working bubblewrap"
    )
