"""Let a throwaway venv see the packages of the environment that made it.

``python -m venv --system-site-packages`` links a new venv to the *base interpreter's*
site-packages. Run from inside a virtual environment (the usual way to follow the README),
that is not the environment the packages were installed into, so the new venv cannot import
``slime_core``. This writes a ``.pth`` file into the new venv that adds each site-packages
directory of the parent Python with :func:`site.addsitedir` (so the parent's own ``.pth``
files, editable installs among them, are processed too), after the venv's own directory:
packages installed into the new venv still win.

Usage: ``python tests/inherit_site.py NEW_VENV_DIR`` (the parent is the Python running it),
or :func:`inherit` from a test.
"""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

PTH_NAME = "_slime_parent_env.pth"


def parent_site_dirs() -> list[str]:
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and Path(site.getusersitepackages()).is_dir():
        dirs.append(site.getusersitepackages())
    return dirs


def inherit(venv_dir: Path) -> Path:
    """Write the ``.pth`` file into ``venv_dir``; returns its path."""
    vpy = venv_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    pth = Path(purelib) / PTH_NAME
    pth.write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in parent_site_dirs()),
                   encoding="utf-8")
    return pth


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/inherit_site.py NEW_VENV_DIR")
    print(inherit(Path(sys.argv[1])))
