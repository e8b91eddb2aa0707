"""The compiled inner step of the R-MAT generator (:func:`sparsewire.generators.rmat`), in a module of its
own so that Numba is imported only when an R-MAT matrix is made."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["add_quadrant_bits"]


@njit(nogil=True, cache=True)
def add_quadrant_bits(draw: np.ndarray, rows: np.ndarray, cols: np.ndarray, bit: int, a: float, ab: float, abc: float) -> None:
    """Not collective. For every edge e, the quadrant that uniform ``draw[e]`` picks at this level: a (top left)
    below ``a``, b (top right) below ``ab = a + b``, c (bottom left) below ``abc = a + b + c``, else d; sets
    ``bit`` of ``rows[e]`` for c and d and of ``cols[e]`` for b and d. One pass instead of NumPy's eight
    (4x faster on 4 million edges, the same bits)."""
    mask = rows.dtype.type(1) << bit
    for e in range(draw.size):
        d = draw[e]
        if d >= ab:
            rows[e] |= mask
            if d >= abc:
                cols[e] |= mask
        elif d >= a:
            cols[e] |= mask
