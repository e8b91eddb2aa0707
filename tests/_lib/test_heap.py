"""Giving the C heap's free pages back: the resident memory the operating system reports falls by what was freed."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from sparsewire._lib.heap import release_free_heap


def resident_mib() -> float:
    """This process's resident memory from the kernel (``VmRSS``), an independent measurement."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_heap_blocks_stay_resident_until_released():
    release_free_heap()
    blocks = [np.ones(12_500) for _ in range(640)]  # 100 kB each, below any mmap threshold: the heap; written: resident
    pin = blocks[-1]  # (the last block, above the others: the heap's top cannot simply shrink)
    before = resident_mib()
    del blocks
    freed = resident_mib()
    assert release_free_heap()
    after = resident_mib()
    assert freed > before - 8, "glibc gave the pages back by itself: this test no longer measures anything"
    assert after < freed - 40, f"resident {freed:.0f} MiB before the release and {after:.0f} MiB after, of 61 MiB freed"
    del pin
