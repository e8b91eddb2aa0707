"""1D row partitions: which rank owns which contiguous range of rows (in the matrix's own order).

A :class:`RowPartition` over n rows and P ranks is the offsets array ``offsets[0] = 0 <= ... <=
offsets[P] = n``; rank p owns rows ``offsets[p] : offsets[p + 1]`` (possibly none).

For ``C = A @ B`` with A of shape n x m, the rows of A and C use the *row partition* and the rows
of B use the *column partition* (over m). For a square A both are the same partition, so the
diagonal block A(p, p) multiplies the rank's own rows of B; for a rectangular A the column
partition is built by the same rule over m, separately.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError

__all__ = ["RowPartition", "even_rows", "balanced_nnz", "split_in_order"]


@dataclass(frozen=True, eq=False)
class RowPartition:
    """Contiguous ownership of ``n`` rows by ``n_parts`` ranks.

    Attributes:
        offsets: int64 array of length ``n_parts + 1``, non-decreasing, from 0 to n.
    """

    offsets: np.ndarray

    def __post_init__(self) -> None:
        given = np.asarray(self.offsets)
        if given.dtype.kind not in "iu":
            # Whole numbers only: converting 2.5 to int64 would silently move a boundary.
            whole = given.dtype.kind == "f" and bool(np.all(np.isfinite(given))) and bool(np.all(given == np.round(given)))
            if not whole:
                shown = np.array2string(given.ravel()[:8], separator=", ")
                raise InputError(f"partition offsets must be whole numbers of rows (got {given.dtype} {shown}); give integers")
        offsets = given.astype(np.int64)
        if offsets.ndim != 1 or offsets.size < 2:
            raise InputError(f"partition offsets must be a 1-D array of length P + 1 >= 2 (got shape {offsets.shape})")
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise InputError("partition offsets must start at 0 and never decrease; build them with even_rows or balanced_nnz")
        offsets.setflags(write=False)
        object.__setattr__(self, "offsets", offsets)

    @property
    def n(self) -> int:
        """Number of rows partitioned."""
        return int(self.offsets[-1])

    @property
    def n_parts(self) -> int:
        """Number of ranks (parts)."""
        return int(self.offsets.size - 1)

    def counts(self) -> np.ndarray:
        """Not collective. Rows owned by each rank."""
        return np.diff(self.offsets)

    def range(self, part: int) -> tuple[int, int]:
        """Not collective. ``(start, stop)`` of the rows owned by ``part``."""
        return int(self.offsets[part]), int(self.offsets[part + 1])

    def owner(self, rows: np.ndarray | int) -> np.ndarray | int:
        """Not collective. Rank owning each row index (vectorised)."""
        owners = np.searchsorted(self.offsets, rows, side="right") - 1
        return int(owners) if np.ndim(owners) == 0 else owners

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowPartition) and np.array_equal(self.offsets, other.offsets)

    def __hash__(self) -> int:
        return hash(self.offsets.tobytes())

    def __repr__(self) -> str:
        return f"RowPartition(n={self.n}, n_parts={self.n_parts})"


def _check_parts(n: int, parts: int) -> None:
    if parts < 1:
        raise InputError(f"the number of ranks must be at least 1 (got {parts})")
    if n < 0:
        raise InputError(f"the number of rows must be non-negative (got {n})")


def even_rows(n: int, parts: int) -> RowPartition:
    """Not collective. Equal row counts: ``offsets[p] = floor(p * n / P)``."""
    _check_parts(n, parts)
    return RowPartition((np.arange(parts + 1, dtype=np.int64) * n) // parts)


def balanced_nnz(weights: np.ndarray, parts: int) -> RowPartition:
    """Not collective. Contiguous parts with about equal total weight (nonzeros per row).

    ``offsets[p]`` is the first row r whose prefix sum ``sum(weights[:r])`` reaches
    ``p * total / P``; an all-zero weight vector falls back to :func:`even_rows`.
    """
    weights = np.asarray(weights, dtype=np.int64)
    _check_parts(weights.size, parts)
    total = int(weights.sum())
    if total == 0:
        return even_rows(weights.size, parts)
    prefix = np.concatenate(([0], np.cumsum(weights)))
    targets = np.arange(parts + 1, dtype=np.float64) * (total / parts)
    offsets = np.searchsorted(prefix, targets, side="left").astype(np.int64)
    offsets[0], offsets[-1] = 0, weights.size
    return RowPartition(np.maximum.accumulate(offsets))


def split_in_order(matrix: sp.sparray, parts: int, method: str) -> tuple[RowPartition, RowPartition]:
    """Not collective. The row partition (rows of A and C) and column partition (rows of B) of
    ``matrix`` in its own order: ``even`` splits rows evenly, ``nnz`` balances nonzeros per rank.
    A square matrix uses one partition for both; a rectangular one applies the same rule to its
    columns separately (``nnz`` then balances nonzeros per column). The ``even`` and ``nnz``
    partitioners of :func:`sparsewire.partition.partition`."""
    n_rows, n_cols = matrix.shape
    if method == "even":
        rows = even_rows(n_rows, parts)
        cols = rows if n_cols == n_rows else even_rows(n_cols, parts)
    else:
        csr = sp.csr_array(matrix)
        rows = balanced_nnz(np.diff(csr.indptr), parts)
        cols = rows if n_cols == n_rows else balanced_nnz(np.bincount(csr.indices, minlength=n_cols), parts)
    return rows, cols
