"""The C heap's freed pages: given back to the operating system, or kept for the next allocations.

glibc's ``malloc`` serves allocations below its mmap threshold from the heap, and that threshold rises to the size of
each large block freed (up to 32 MiB). Training frees tensors of that size every step, so after the first steps
autograd's temporaries come from the heap, and the pages of the freed ones stay resident: the process holds memory
it does not use, which the operating system cannot give to anyone else. ``malloc_trim`` hands those pages back
(``madvise``); the next allocations that reuse them fault them in again.

Blocks above 32 MiB (a float32 tensor of 64 features on 131,072 nodes) always get a memory map of their own, which
``free`` unmaps: each step's temporaries of that size are faulted in page by page again. Where memory is not shared
with other ranks, :func:`keep_freed_heap` has glibc serve them from its heap too and keep what is freed, so the next
step reuses those pages as they are.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from collections.abc import Iterator

import numpy as np

__all__ = ["release_free_heap", "keep_freed_heap", "small_pages"]

#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


@functools.cache
def _glibc(name: str, *argtypes):
    """glibc's function ``name`` (returning int), or None where the C library has none (musl, macOS)."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = list(argtypes), ctypes.c_int
    return function


def release_free_heap() -> bool:
    """Not collective. Give the heap's free pages back to the operating system (glibc's ``malloc_trim(0)``); whether
    any were released (False where the C library has no ``malloc_trim``)."""
    trim = _glibc("malloc_trim", ctypes.c_size_t)
    return bool(trim(0)) if trim is not None else False


@functools.cache
def keep_freed_heap() -> bool:
    """Not collective; changes the whole process's allocator, once. glibc then serves every block from its heap, large
    ones too (``mallopt(M_MMAP_MAX, 0)``: no memory map per block, whose pages ``free`` would unmap), and keeps the
    freed pages for the next allocations (``M_TRIM_THRESHOLD`` at its largest, 2 GiB of free memory at the heap's top),
    as PyTorch's tuning guide's caching allocators (jemalloc, tcmalloc) keep them. :func:`release_free_heap` still
    gives them back when called. Whether glibc took both settings (False where the C library is not glibc)."""
    mallopt = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Not collective; changes the whole process's NumPy while it lasts. NumPy asks the kernel for huge pages on every
    array of 4 MiB or more (``madvise(MADV_HUGEPAGE)``); where memory is fragmented, each huge page's first touch
    then compacts memory first. Writing 100 MB of a product's output measured 0.08 s of system time one run and
    0.23 s the next that way, 0.03-0.05 s on ordinary pages. Arrays written once and handed on gain nothing from
    huge pages, so they are allocated inside this (a no-op where NumPy has no such switch)."""
    switch = getattr(getattr(np, "_core", None), "multiarray", None)
    switch = getattr(switch, "_set_madvise_hugepage", None)
    if switch is None:
        yield
        return
    was = switch(False)
    try:
        yield
    finally:
        switch(was)
