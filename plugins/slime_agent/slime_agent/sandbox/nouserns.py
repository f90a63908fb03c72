"""A seccomp filter that refuses new user namespaces, for the root path of the jail.

bwrap's ``--disable-userns`` cannot be combined with ``--userns-block-fd``, which the jail
needs when the host process is root (see :mod:`slime_agent.sandbox.jail`). There this filter,
given to bwrap with ``--seccomp FD`` and applied right before the command starts, makes
``unshare`` and ``clone`` with ``CLONE_NEWUSER`` fail with ``EPERM`` and ``clone3`` (whose
flags a classic BPF filter cannot read) fail with ``ENOSYS``, so libc falls back to ``clone``.
Syscalls of another ABI (i386, x32) fail with ``EPERM``: they would bypass the numbers checked.
"""

from __future__ import annotations

import errno
import platform
import struct

CLONE_NEWUSER = 0x10000000
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
# machine -> (AUDIT_ARCH, unshare, clone, clone3)
_ARCHES = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


def userns_filter() -> bytes | None:
    """The compiled filter (``struct sock_filter[]``) for this machine; ``None`` on an
    architecture it does not know (the caller reports user namespaces as not blocked)."""
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit, unshare, clone, clone3 = arch
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    prog = [
        (_LD_ABS, 0, 0, 4),            # 0: A = arch
        (_JEQ, 1, 0, audit),           # 1: native ABI -> 3
        (_RET, 0, 0, eperm),           # 2: other ABI
        (_LD_ABS, 0, 0, 0),            # 3: A = syscall number
        (_JGE, 8, 0, _X32_BIT),        # 4: x32 -> 13
        (_JEQ, 8, 0, clone3),          # 5: -> 14
        (_JEQ, 2, 0, unshare),         # 6: -> 9
        (_JEQ, 1, 0, clone),           # 7: -> 9
        (_RET, 0, 0, _ALLOW),          # 8
        (_LD_ABS, 0, 0, 16),           # 9: A = low 32 bits of the first argument (flags)
        (_JSET, 0, 1, CLONE_NEWUSER),  # 10: CLONE_NEWUSER set -> 11, else -> 12
        (_RET, 0, 0, eperm),           # 11
        (_RET, 0, 0, _ALLOW),          # 12
        (_RET, 0, 0, eperm),           # 13: x32
        (_RET, 0, 0, enosys),          # 14: clone3
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)
