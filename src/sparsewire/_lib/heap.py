"""Returning the C heap's free pages to the operating system.

glibc's ``malloc`` serves allocations below its mmap threshold from the heap, and that threshold rises to the size of
each large block freed (up to 32 MiB). Training frees tensors of that size every step, so after the first steps
autograd's temporaries come from the heap, and the pages of the freed ones stay resident: the process holds memory
it does not use, which the operating system cannot give to anyone else. ``malloc_trim`` hands those pages back
(``madvise``); the next allocations that reuse them fault them in again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["release_free_heap"]


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        library = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = library.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Not collective. Give the heap's free pages back to the operating system (glibc's ``malloc_trim(0)``); whether
    any were released (False where the C library has no ``malloc_trim``)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
