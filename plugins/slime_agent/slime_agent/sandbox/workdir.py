"""Reading and writing files of a sandbox's work directory from the host.

The work directory is written by untrusted code, so every path is resolved one component at
a time relative to an open directory, never following a symbolic link (``O_NOFOLLOW``), and
only regular files are opened. A link the sandbox planted (``/work/x -> /etc/shadow``) can
therefore never make the host read or write outside the work directory, whatever races the
sandbox runs meanwhile.
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import stat
import sys

from slime_agent.sandbox.jail import WORK

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def split_sandbox_path(path: str) -> list[str]:
    """Components of ``path`` (relative, or absolute under ``/work``) below the work directory.

    Raises ValueError for anything that would leave the work directory.
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ValueError(f"sandbox path must be a non-empty string, got {path!r}")
    norm = posixpath.normpath(path)
    if posixpath.isabs(norm):
        if not (norm == WORK or norm.startswith(WORK + "/")):
            raise ValueError(
                f"sandbox path {path!r} is outside the work directory {WORK}; "
                f"use a relative path or one under {WORK}/"
            )
        norm = posixpath.relpath(norm, WORK)
    if norm == ".":
        raise ValueError(f"sandbox path {path!r} names the work directory itself, not a file")
    if norm == ".." or norm.startswith("../"):
        raise ValueError(f"sandbox path {path!r} escapes the work directory {WORK}")
    return norm.split("/")


def _link_error(path: str, exc: OSError) -> ValueError:
    return ValueError(
        f"sandbox path {path!r} goes through a symbolic link or a non-directory "
        f"({exc.strerror}); files of the work directory are accessed without following links"
    )


def _open_parent(root: str, path: str, parts: list[str], create: bool,
                 owner: tuple[int, int] | None) -> int:
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                if owner is not None:
                    os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _link_error(path, exc) from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_file(root: str, path: str, flags: int, create: bool,
               owner: tuple[int, int] | None) -> int:
    parts = split_sandbox_path(path)
    parent = _open_parent(root, path, parts, create, owner)
    try:
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                     dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _link_error(path, exc) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise ValueError(f"sandbox path {path!r} is not a regular file") from None
        raise
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"sandbox path {path!r} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def write_bytes(root: str, path: str, data: bytes, owner: tuple[int, int] | None) -> None:
    """Create or replace ``path`` under ``root``, making parent directories as needed."""
    fd = _open_file(root, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, True, owner)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def read_bytes(root: str, path: str) -> bytes:
    fd = _open_file(root, path, os.O_RDONLY, False, None)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def chown_tree(root: str, owner: tuple[int, int]) -> None:
    """Give ``root`` and everything below it to ``owner`` (links themselves, not targets)."""
    os.chown(root, *owner)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)


def remove_tree(path: str) -> None:
    """``rm -rf`` that also copes with directories the sandbox made unreadable (mode 000)."""

    def fix(func, failed, _exc):  # type: ignore[no-untyped-def]
        parent = os.path.dirname(failed)
        for p in (parent, failed):
            try:
                if stat.S_ISDIR(os.lstat(p).st_mode):  # never chmod through a link
                    os.chmod(p, 0o700)
            except OSError:
                pass
        try:
            func(failed)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            shutil.rmtree(failed, ignore_errors=True)

    if not os.path.lexists(path):
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=fix)
    else:
        shutil.rmtree(path, onerror=fix)
