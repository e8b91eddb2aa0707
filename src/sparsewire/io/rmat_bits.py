"""The compiled steps of the R-MAT generator (:func:`sparsewire.io.generators.rmat`) for large graphs, in a
module of their own so that Numba is imported only when a large R-MAT matrix is made: the quadrant bits,
the permuted edge keys, and the CSR pattern of the sorted keys."""

from __future__ import annotations

import numpy as np

from sparsewire._lib.cores import map_on_threads
from sparsewire._lib.distinct import csr_index_type
from sparsewire._lib.jit import njit

__all__ = ["add_quadrant_bits", "permuted_keys", "pattern_of_sorted_keys"]


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


@njit(nogil=True, cache=True)
def _permuted_keys_into(rows: np.ndarray, cols: np.ndarray, permutation: np.ndarray, n: int, keys: np.ndarray) -> None:
    for e in range(rows.size):
        keys[e] = np.int64(permutation[rows[e]]) * n + permutation[cols[e]]


def permuted_keys(rows: np.ndarray, cols: np.ndarray, permutation: np.ndarray, n: int, threads: int = 1) -> np.ndarray:
    """Not collective. ``permutation[rows[e]] n + permutation[cols[e]]`` for every edge, in 64 bits, in one pass
    (NumPy makes three edge-sized temporaries), the edges cut into ``threads`` ranges done in threads (the
    compiled pass releases the GIL; its random reads of the permutation wait on memory, not on the core)."""
    keys = np.empty(rows.size, np.int64)
    cuts = np.linspace(0, rows.size, max(1, threads) + 1).astype(np.int64).tolist()

    def fill(part: int) -> None:
        first, last = cuts[part], cuts[part + 1]
        _permuted_keys_into(rows[first:last], cols[first:last], permutation, n, keys[first:last])

    map_on_threads(fill, range(max(1, threads)), threads)
    return keys


@njit(nogil=True, cache=True)
def _count_distinct(keys: np.ndarray) -> int:
    count = 0
    for e in range(keys.size):
        if e == 0 or keys[e] != keys[e - 1]:
            count += 1
    return count


@njit(nogil=True, cache=True)
def _fill_pattern(keys: np.ndarray, n_cols: int, indptr: np.ndarray, indices: np.ndarray) -> None:
    written = 0
    for e in range(keys.size):
        if e == 0 or keys[e] != keys[e - 1]:
            indices[written] = keys[e] % n_cols
            indptr[keys[e] // n_cols + 1] += 1
            written += 1
    for row in range(indptr.size - 1):
        indptr[row + 1] += indptr[row]


def pattern_of_sorted_keys(keys: np.ndarray, n_rows: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. ``(indptr, indices)`` of the distinct keys ``i n_cols + j`` of ascending ``keys``, as
    :func:`sparsewire._lib.distinct.pattern_of_keys` makes them: two passes (count, then fill), no temporary of
    the keys' size."""
    count = _count_distinct(keys)
    index = csr_index_type(n_rows, n_cols, count)
    indptr = np.zeros(n_rows + 1, index)
    indices = np.empty(count, index)
    _fill_pattern(keys, n_cols, indptr, indices)
    return indptr, indices
