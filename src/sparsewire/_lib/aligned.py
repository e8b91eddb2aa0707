"""Not collective. Dense blocks whose first element starts a cache line (64 bytes).

The CSR x dense kernel loads a B row one cache line per SIMD register
(:mod:`sparsewire.kernels.simd`). When B's rows start on cache lines every load touches one line;
otherwise every load straddles two, and the product is slower. Measured at k = 32 on 2 threads,
B from NumPy (16 or 48 bytes past a line) against B from :func:`empty_aligned`, time aligned over
time unaligned: stencil3d:40:27 0.63, soc-Slashdot0902 0.76, cit-HepTh 0.77, bcsstk25 0.83, mdual
0.85, luxembourg_osm 0.96. NumPy itself only promises 16 bytes. The library allocates its own
blocks (C, receive and send buffers, the generated B) here; a caller who allocates B with
:func:`empty_aligned` gets the same speed. The rows of a block start on cache lines too when
``k * itemsize`` is a multiple of 64 (k = 8, 16, 32, ... in float64).

NumPy only: importing this module loads neither Numba nor MPI.
"""

from __future__ import annotations

import numpy as np

#: Bytes of a cache line, the alignment of the arrays made here.
CACHE_LINE_BYTES = 64


def empty_aligned(shape: int | tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """Not collective. An uninitialised C-contiguous array of ``shape`` whose first element starts
    a cache line (a NumPy array over a buffer one line longer, cut at the first line boundary)."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + CACHE_LINE_BYTES, np.uint8)
    start = -raw.ctypes.data % CACHE_LINE_BYTES
    return raw[start : start + count * dtype.itemsize].view(dtype).reshape(shape)


def zeros_aligned(shape: int | tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """Not collective. :func:`empty_aligned` filled with zeros."""
    array = empty_aligned(shape, dtype)
    array.fill(0)
    return array
