"""Sampled dot products, SDDMM's local kernel: ``out[e] = <x[rows[e]], y[cols[e]]>`` for a list of entries, in chunks
so that the gathered rows never take more than a bounded slice of memory (a whole ``nnz x d`` gather is what makes
PyG's attention run out of memory on large graphs)."""

from __future__ import annotations

import numpy as np

__all__ = ["sampled_dots", "CHUNK_ENTRIES"]

#: Entries gathered at once: 2 x 65,536 rows of x and y, 64 MiB at d = 64 in float64.
CHUNK_ENTRIES = 1 << 16


def sampled_dots(x: np.ndarray, y: np.ndarray, rows: np.ndarray, cols: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Not collective. ``out[e] = sum_c x[rows[e], c] * y[cols[e], c]`` for every e (each sum in the order of c, in
    ``out``'s dtype); returns ``out``."""
    for start in range(0, rows.size, CHUNK_ENTRIES):
        stop = min(rows.size, start + CHUNK_ENTRIES)
        np.einsum("ec,ec->e", x[rows[start:stop]], y[cols[start:stop]], out=out[start:stop])
    return out
