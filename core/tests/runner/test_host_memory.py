"""``run.retain_host_memory``: glibc's malloc keeps freed memory, so allocating again a block as
large as a training step's tensors reuses pages already touched (no page faults) where it
would otherwise map and zero-fill fresh ones. Measured in a child process: the setting lasts
for a process's lifetime and must not change the test process's allocator."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from slime_core.runtime import host_memory, process_settings
from slime_core.testing import build_test_config

CHILD = """
import resource, sys
import torch
from slime_core.runtime import process_settings
from slime_core.testing import build_test_config
process_settings.apply(build_test_config(run={"retain_host_memory": sys.argv[1] == "true"}))
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
n = 64 * 2**20 // 4  # 64 MiB of float32: past glibc's largest dynamic mmap threshold (32 MiB)
# The first allocations touch new pages either way; while the heap grows to hold the block
# beside the interpreter's small allocations (seen: 7 rounds) some more do. Counted: the last 4.
for i in range(16):
    if i == 12:
        f0 = faults()
    x = torch.empty(n)
    x.fill_(1.0)
    del x
print(faults() - f0)
"""


def _late_allocation_faults(retain: bool) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, str(retain).lower()], check=True,
                         capture_output=True, text=True, timeout=120)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not host_memory.can_retain(), reason="glibc's malloc only")
def test_a_freed_block_is_reused_without_page_faults():
    fresh = _late_allocation_faults(False)
    if fresh < 4 * 4096:  # 4 x 64 MiB are 65,536 small pages: this host maps huge ones
        pytest.skip(f"the default allocations took only {fresh} faults here: nothing to show")
    assert _late_allocation_faults(True) < 1024 < fresh


def test_only_true_acts_and_a_refusal_is_said(monkeypatch):
    calls: list[int] = []

    def refuse() -> str:
        calls.append(1)
        return "the C library of this process (darwin) is not glibc"

    monkeypatch.setattr(host_memory, "retain_freed_memory", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto (unresolved) and false say nothing
        for value in ("auto", False):
            process_settings.apply(build_test_config(run={"retain_host_memory": value}))
    assert calls == []
    with pytest.warns(UserWarning, match=r"run\.retain_host_memory: the C library of this process "
                                         r"\(darwin\) is not glibc; freed memory goes back"):
        process_settings.apply(build_test_config(run={"retain_host_memory": True}))
    assert calls == [1]


def test_a_wrong_value_names_the_key():
    with pytest.raises(ValueError, match=r"run\.retain_host_memory.*must be true, false or "
                                         r"\"auto\", got 'yes'"):
        build_test_config(run={"retain_host_memory": "yes"})
