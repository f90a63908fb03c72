"""Puts the slime-style user modules (``slime_user``) on sys.path, as a slime user's own
package would be, and installs the shim ``slime`` package."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import slime_compat.plugin  # noqa: E402,F401 - installs the shim (plugin import does)
