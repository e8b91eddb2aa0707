"""Local pieces of distributed SpGEMM: SciPy <-> python-graphblas conversion and the wire format.

Sparse blocks and sparse row sets travel as *hypersparse rows* (DCSR, the row-wise twin of the
DCSC that CombBLAS uses for hypersparse blocks, semiring SpGEMM paper sec. 2.5): only the rows that
hold entries are listed, so a block whose rows are mostly empty (a BFS frontier, a block of a
large grid) costs what it stores. One message is

* a header: number of listed rows and number of entries (2 x int64);
* one integer array ``[row positions | row lengths | column indices]`` (int32 when both
  dimensions fit, else int64);
* the values (``nnz x`` element size; 1 byte for bool).

:func:`wire_bytes` is that size exactly; the executors count the bytes they hand to MPI with it.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import scipy.sparse as sp

__all__ = [
    "HEADER_BYTES",
    "to_graphblas",
    "to_scipy",
    "index_dtype",
    "pack",
    "pack_row_ranges",
    "unpack",
    "wire_bytes",
    "empty",
]

HEADER_BYTES = 16


def index_dtype(nrows: int, ncols: int) -> np.dtype:
    """int32 when every row and column index fits in it, else int64."""
    return np.dtype(np.int32) if max(nrows, ncols) < 2**31 else np.dtype(np.int64)


def to_graphblas(matrix: sp.sparray, dtype: np.dtype) -> gb.Matrix:
    """A python-graphblas copy of a SciPy matrix, every stored entry kept (explicit zeros too),
    values cast to ``dtype`` (bool: nonzero is True)."""
    csr = sp.csr_array(matrix)
    csr.sort_indices()
    values = csr.data != 0 if np.dtype(dtype) == np.bool_ else csr.data.astype(dtype)
    return gb.Matrix.ss.import_csr(
        nrows=csr.shape[0],
        ncols=csr.shape[1],
        indptr=csr.indptr.astype(np.uint64),
        col_indices=csr.indices.astype(np.uint64),
        values=np.ascontiguousarray(values),
        sorted_cols=True,
        take_ownership=True,
    )


def to_scipy(matrix: gb.Matrix) -> sp.csr_array:
    """A SciPy CSR copy of a python-graphblas matrix (every stored entry kept)."""
    exported = matrix.ss.export("csr", sort=True)
    values = _full_values(exported, int(exported["indptr"][-1]))
    return sp.csr_array(
        (values, exported["col_indices"].astype(np.int64), exported["indptr"].astype(np.int64)),
        shape=(exported["nrows"], exported["ncols"]),
    )


def empty(nrows: int, ncols: int, dtype: np.dtype) -> gb.Matrix:
    """An all-empty matrix (no stored entries)."""
    return gb.Matrix(gb.dtypes.lookup_dtype(np.dtype(dtype)), nrows, ncols)


def _full_values(exported: dict, nnz: int) -> np.ndarray:
    values = exported["values"]
    if exported.get("is_iso") and nnz != values.size:  # iso matrices export one value
        values = np.full(nnz, values[0] if values.size else 0, dtype=values.dtype)
    return values


def pack(matrix: gb.Matrix) -> tuple[np.ndarray, np.ndarray, int]:
    """The message of ``matrix``: (integer array, values, listed rows). See the module docstring."""
    ints, values, listed, _ = pack_row_ranges(matrix, np.array([0, matrix.nrows], np.int64))
    return ints[0], values[0], int(listed[0])


def pack_row_ranges(matrix: gb.Matrix, bounds: np.ndarray) -> tuple[list, list, np.ndarray, np.ndarray]:
    """One message per row range ``[bounds[d], bounds[d + 1])`` (row positions relative to the
    range start): (integer arrays, value arrays, listed rows per range, entries per range)."""
    exported = matrix.ss.export("hypercsr", sort=True)
    rows = exported["rows"].astype(np.int64)
    indptr = exported["indptr"].astype(np.int64)
    values = _full_values(exported, int(indptr[-1]))
    cols = exported["col_indices"]
    itype = index_dtype(matrix.nrows, matrix.ncols)
    cuts = np.searchsorted(rows, bounds)
    ints, vals = [], []
    listed = np.diff(cuts)
    entries = indptr[cuts[1:]] - indptr[cuts[:-1]]
    for d in range(bounds.size - 1):
        first, last = cuts[d], cuts[d + 1]
        start, stop = indptr[first], indptr[last]
        ints.append(
            np.concatenate(
                [rows[first:last] - bounds[d], np.diff(indptr[first : last + 1]), cols[start:stop]]
            ).astype(itype)
        )
        vals.append(values[start:stop])
    return ints, vals, listed, entries


def unpack(
    pieces: list[tuple[np.ndarray, np.ndarray, int]], row_offsets: np.ndarray, nrows: int, ncols: int, dtype: np.dtype
) -> gb.Matrix:
    """Rebuild one matrix from messages: piece d = (integer array, values, listed rows) holds rows
    starting at ``row_offsets[d]``; pieces must come in increasing row order."""
    row_parts, length_parts, col_parts, value_parts = [], [], [], []
    for (ints, values, listed), offset in zip(pieces, row_offsets):
        row_parts.append(ints[:listed].astype(np.int64) + int(offset))
        length_parts.append(ints[listed : 2 * listed].astype(np.int64))
        col_parts.append(ints[2 * listed :])
        value_parts.append(values)
    rows = np.concatenate(row_parts) if row_parts else np.zeros(0, np.int64)
    lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, np.int64)
    cols = np.concatenate(col_parts).astype(np.uint64) if col_parts else np.zeros(0, np.uint64)
    values = np.concatenate(value_parts).astype(dtype) if value_parts else np.zeros(0, dtype)
    # Full row pointers (CSR, not hypersparse): GraphBLAS picks its fastest kernels for CSR operands.
    counts = np.zeros(nrows, np.int64)
    counts[rows] = lengths
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint64)
    return gb.Matrix.ss.import_csr(
        nrows=nrows,
        ncols=ncols,
        indptr=indptr,
        col_indices=cols,
        values=values,
        sorted_cols=True,
        take_ownership=True,
    )


def wire_bytes(listed_rows: int, entries: int, index_bytes: int, value_bytes: int) -> int:
    """Bytes of one message: header + (2 * listed rows + entries) indices + entries values."""
    return HEADER_BYTES + index_bytes * (2 * listed_rows + entries) + value_bytes * entries
