"""Freed host memory kept in the process (``run.retain_host_memory``).

glibc's malloc serves large blocks (from 128 KiB, rising to 32 MiB as such blocks are freed)
with their own ``mmap`` and unmaps them when they are freed, and hands the top of its heap back
to the operating system once enough of it is free. A training step on the CPU allocates and
frees gigabytes of activations and gradients, so every step writes into fresh pages, and each
first write is a page fault that zero-fills 4 KiB: SmolLM2-135M's step on 2 cores took ~340,000
faults and 5.3-5.7 s at its steady state, 4.6-4.8 s with none (``bench/README.md``). Told to
map nothing of its own and to trim only past 2 GiB, malloc reuses the pages the previous step
touched. The price: the process's resident memory stays at its peak instead of falling
between steps. Process-wide and for the process's lifetime (glibc has no way back to its
dynamic thresholds), so it is a run setting, applied where the run's components run.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import cast

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int: the largest free top of heap kept, 2 GiB


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``, or None where the C library is not glibc (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # this process's own symbols: its C library
    except OSError:
        return None
    # glibc alone has gnu_get_libc_version (musl's mallopt accepts and ignores everything)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    fn = libc.mallopt
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int], int], fn)


def can_retain() -> bool:
    """Whether this process's allocator can be told to keep freed memory (glibc)."""
    return _mallopt() is not None


def retain_freed_memory() -> str | None:
    """Tell glibc's malloc to keep freed memory in the process: no block gets a mapping of its
    own (so none is unmapped when freed) and the heap's top goes back only past 2 GiB free.
    None when done; otherwise why not (not glibc, or glibc refused a parameter)."""
    mallopt = _mallopt()
    if mallopt is None:
        return f"the C library of this process ({sys.platform}) is not glibc"
    for name, param, value in (("M_MMAP_MAX", M_MMAP_MAX, 0),
                               ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        if mallopt(param, value) != 1:
            return f"glibc refused mallopt({name}, {value})"
    return None
