"""Distinct values of integer arrays by sorting, and what is built on them by index arithmetic: the canonical
CSR pattern of distinct (row, column) keys, and the positions of concatenated ranges.

``np.unique`` without ``return_*`` flags takes a hash-table path since NumPy 2.3 that is orders of magnitude
slower than a sort on this project's int64 keys, so every plain distinct-values call goes through here.
The default sort, not the stable one: equal keys are indistinguishable, and it is the faster."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["sort_in_place", "distinct", "distinct_counts", "csr_index_type", "pattern_of_keys", "concatenated_ranges"]


#: Keys from which :func:`sort_in_place` sorts on all cores (below it, starting threads costs more than it saves).
PARALLEL_SORT_FROM = 1 << 22


def sort_in_place(values: np.ndarray) -> None:
    """Not collective. ``values.sort()`` (1-D): on all of this node's cores (:func:`sparsewire._lib.cores.node_cores`) from
    :data:`PARALLEL_SORT_FROM` keys (:func:`sparsewire._lib.parallel_sort.split_sort`; 100M random int64 keys on 2 cores:
    4.2 s against NumPy's 7.7 s, one script timing both), else NumPy's sort on one."""
    if values.size >= PARALLEL_SORT_FROM and np.issubdtype(values.dtype, np.integer):
        from sparsewire._lib.cores import node_cores

        if node_cores() > 1:
            from sparsewire._lib.parallel_sort import split_sort  # Numba, loaded for large arrays only

            split_sort(values, node_cores())
            return
    values.sort()


def distinct(values: np.ndarray, in_place: bool = False) -> np.ndarray:
    """Not collective. The distinct values of ``values`` (flattened), ascending: ``np.unique(values)`` for integers.
    ``in_place``: sort ``values`` (1-D) itself rather than a copy, for callers that hold the only large copy."""
    ordered = values if in_place and values.ndim == 1 else np.asarray(values).flatten()
    sort_in_place(ordered)
    return ordered[_first_of_each(ordered)]


def distinct_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. The distinct values of ``values`` (flattened), ascending, and how often each occurs:
    ``np.unique(values, return_counts=True)`` for integers."""
    ordered = np.asarray(values).flatten()
    sort_in_place(ordered)
    starts = np.flatnonzero(_first_of_each(ordered))
    return ordered[starts], np.diff(np.append(starts, ordered.size))


def _first_of_each(ordered: np.ndarray) -> np.ndarray:
    """True at the first of every run of equal values in sorted ``ordered``."""
    first = np.empty(ordered.size, bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def csr_index_type(n_rows: int, n_cols: int, nnz: int):
    """Not collective. 32-bit CSR indices where every row, column and nonzero count fits them, else 64-bit."""
    return np.int32 if max(n_rows, n_cols, nnz) < 2**31 else np.int64


def pattern_of_keys(keys: np.ndarray, shape: tuple[int, int], in_place: bool = False) -> sp.csr_array:
    """Not collective. The canonical CSR pattern (sorted columns, each (i, j) once, value 1) of the keys
    ``i n_cols + j``; ``in_place`` sorts ``keys`` itself. One sort (a third of the time of COO -> CSR and
    summing duplicates at 100M edges), and no per-edge temporaries beyond the distinct keys and the indices."""
    n_rows, n_cols = shape
    keys = distinct(keys, in_place=in_place)
    index = csr_index_type(n_rows, n_cols, keys.size)
    indptr = np.searchsorted(keys, np.arange(n_rows + 1, dtype=np.int64) * n_cols).astype(index)
    indices = np.empty(keys.size, index)
    np.remainder(keys, n_cols, out=indices, casting="unsafe")  # the cast is buffered: no int64 copy of every key
    return sp.csr_array((np.ones(indices.size), indices, indptr), shape=shape)


def concatenated_ranges(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Not collective. ``first[b], first[b] + 1, ..., first[b] + lengths[b] - 1`` for every range b, in order, as
    one int64 array (a gather of many slices at once)."""
    offsets = (np.cumsum(lengths) - lengths).astype(np.int64)
    return np.repeat(np.asarray(first, np.int64) - offsets, lengths) + np.arange(int(np.sum(lengths)), dtype=np.int64)
