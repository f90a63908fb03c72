"""A size-capped tmpfs as the sandbox's work directory: the disk limit of the whole sandbox.

``RLIMIT_FSIZE`` caps one file, not the sum, so a sandbox could fill the host's disk with many
files. When the host process may mount (root), the temporary work directory of a
:class:`~slime_agent.sandbox.local.LocalSandbox` is a tmpfs of ``disk_mb`` mounted on the host
(so the host side's ``write_file``/``read_file`` and every command see the same files) and
unmounted when the sandbox closes; writes past the size fail with ``ENOSPC``. Without that
privilege, or for a work directory the caller gives (it must outlive the sandbox), the total
is whatever the host's filesystem provides (a quota or a size-capped mount of its own).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_MS_NOSUID, _MS_NODEV = 2, 4
_MNT_DETACH = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_tmpfs(path: str, size_bytes: int, owner: tuple[int, int] | None) -> str | None:
    """Mount a tmpfs of ``size_bytes`` on ``path``; ``None`` on success, else the reason."""
    if os.geteuid() != 0:
        return f"mounting a size-capped /work needs root (uid {os.geteuid()})"
    uid, gid = owner if owner is not None else (os.geteuid(), os.getegid())
    data = f"size={size_bytes},mode=0755,uid={uid},gid={gid}".encode()
    rc = _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, data)
    if rc != 0:
        err = ctypes.get_errno()
        return f"cannot mount a tmpfs on {path}: {os.strerror(err)}"
    return None


def unmount(path: str) -> None:
    """Detach the tmpfs on ``path`` (its files go with it); errors are ignored."""
    _libc().umount2(os.fsencode(path), _MNT_DETACH)
