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


REUSE = """
import ctypes, ctypes.util, resource, sys
from sparsewire._lib.heap import keep_freed_heap
if sys.argv[1] == "keep":
    assert keep_freed_heap()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
size = int(sys.argv[2]) << 20

def write_and_free():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)

write_and_free()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
write_and_free()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's settings are glibc's")
def test_a_kept_heap_serves_a_large_block_again_without_faulting_its_pages_in(rng):
    """The page faults the kernel counts (``ru_minflt``) for writing a freshly allocated block, above glibc's largest
    mmap threshold (48 MiB, and a random size up to 128 MiB), right after one of the same size was written and freed:
    each of its 4 kB pages again by default (a new memory map), none once the process keeps its freed heap (the same
    pages)."""
    import subprocess
    import sys
    from pathlib import Path

    huge_pages = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if huge_pages.exists() and "[always]" in huge_pages.read_text():
        pytest.skip("transparent huge pages are always on: a new map faults in 2 MB at a time, not each 4 kB page")

    def faults(mode: str, mib: int) -> int:
        run = subprocess.run([sys.executable, "-c", REUSE, mode, str(mib)], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    for mib in (48, int(rng.integers(33, 129))):
        pages = (mib << 20) // 4096
        assert faults("default", mib) >= pages * 0.9, f"{mib} MiB: glibc reused the freed map, the test measures nothing"
        assert faults("keep", mib) < pages * 0.01, f"{mib} MiB: the kept heap's pages were faulted in again"
