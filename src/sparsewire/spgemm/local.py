"""Local pieces of distributed SpGEMM: SciPy <-> python-graphblas conversion, row counts and the
wire format.

Sparse blocks and sparse row sets travel as *hypersparse rows* (DCSR, the row-wise twin of the
DCSC that CombBLAS uses for hypersparse blocks, semiring SpGEMM paper sec. 2.5): only the rows that
hold entries are listed, so a block whose rows are mostly empty (a BFS frontier, a block of a
large grid) costs what it stores. One message is

* a header: number of listed rows and number of entries (2 x int64);
* one integer array ``[row positions | row lengths | column indices]`` (int32 when both
  dimensions fit, else int64);
* the values (``nnz x`` element size; 1 byte for bool).

:func:`wire_bytes` is that size exactly; the byte predictions use it, while the executors count
what MPI delivered (:mod:`sparsewire.spgemm.transfer`). Packing and unpacking hand GraphBLAS's own
hypersparse arrays over (``ss.unpack`` / ``import_hypercsr``) instead of exporting copies.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire.spgemm.graphblas_loader import graphblas as gb

__all__ = [
    "HEADER_BYTES",
    "to_graphblas",
    "to_scipy",
    "index_dtype",
    "row_counts",
    "pack_row_ranges",
    "import_messages",
    "wire_bytes",
    "empty",
    "discard",
    "full_values",
    "packable",
]

HEADER_BYTES = 16


def index_dtype(nrows: int, ncols: int) -> np.dtype:
    """Not collective. int32 when every row and column index fits in it, else int64."""
    return np.dtype(np.int32) if max(nrows, ncols) < 2**31 else np.dtype(np.int64)


def to_graphblas(matrix: sp.sparray, dtype: np.dtype) -> gb.Matrix:
    """Not collective. A python-graphblas copy of a SciPy matrix, every stored entry kept (explicit zeros too),
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
    """Not collective. A SciPy CSR copy of a python-graphblas matrix (every stored entry kept)."""
    exported = matrix.ss.export("csr", sort=True)
    values = full_values(exported, int(exported["indptr"][-1]))
    return sp.csr_array(
        (values, exported["col_indices"].astype(np.int64), exported["indptr"].astype(np.int64)),
        shape=(exported["nrows"], exported["ncols"]),
    )


def empty(nrows: int, ncols: int, dtype: np.dtype) -> gb.Matrix:
    """Not collective. An all-empty matrix (no stored entries)."""
    return gb.Matrix(gb.dtypes.lookup_dtype(np.dtype(dtype)), nrows, ncols)


def discard(*matrices: gb.Matrix | None, keep: tuple[gb.Matrix, ...] = ()) -> None:
    """Not collective. Free the entries of ``matrices`` now (``clear()``), skipping None and any matrix in ``keep``
    (by identity: the caller's operands, a plan's own blocks). python-graphblas frees a Matrix only at Python's cycle
    collector, since each holds a cycle through its ``.ss``; freed now, the next product reuses the memory
    (docs/spgemm.md, "Memory between multiplies")."""
    for matrix in matrices:
        if matrix is not None and not any(matrix is kept for kept in keep):
            matrix.clear()


def _numpy_type(matrix: gb.Matrix) -> np.dtype:
    return np.dtype(matrix.dtype.np_type)


def full_values(exported: dict, nnz: int) -> np.ndarray:
    """Not collective. The values of GraphBLAS's exported or unpacked arrays, one per entry (an iso matrix keeps one)."""
    values = exported["values"]
    if exported.get("is_iso") and nnz != values.size:  # iso matrices export one value
        values = np.full(nnz, values[0] if values.size else 0, dtype=values.dtype)
    return values


def packable(arrays: dict) -> dict:
    """Not collective. Unpacked arrays as ``ss.pack_*`` takes them back (without the shape and format keys)."""
    return {key: value for key, value in arrays.items() if key not in ("nrows", "ncols", "format")}


def row_counts(matrix: gb.Matrix) -> np.ndarray:
    """Not collective. Stored entries of every row (int64, length nrows), from GraphBLAS's row degrees (no copy of
    the matrix): the counts the byte predictions are made from."""
    counts = np.zeros(matrix.nrows, np.int64)
    rows, degrees = matrix.reduce_rowwise(gb.agg.count).new().to_coo()
    counts[rows] = degrees
    return counts


def pack_row_ranges(
    matrix: gb.Matrix, bounds: np.ndarray, itype: np.dtype, *, consume: bool = False
) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Not collective. One message ``(integer array, values, listed rows)`` per row range ``[bounds[d], bounds[d+1])``,
    row positions relative to the range start, integers of type ``itype`` (sender and receiver
    must agree: see :func:`index_dtype`).

    GraphBLAS hands its hypersparse arrays over without a copy (``unpack``, no re-sort: they are
    kept sorted); each message's integer array is written once, narrowed to ``itype``.
    ``consume``: the matrix is left empty and the arrays become the caller's, so the values are
    views (for a send buffer made only to be sent: no copy at all). Otherwise the arrays go back
    into the matrix (no copy) and each message's values are copied, because GraphBLAS may convert
    the matrix it takes back (hypersparse to bitmap) and free them."""
    if matrix.nvals == 0:  # (GraphBLAS refuses to take back the empty arrays of a 1-row matrix)
        return [(np.zeros(0, itype), np.zeros(0, _numpy_type(matrix)), 0) for _ in range(len(bounds) - 1)]
    arrays = matrix.ss.unpack("hypercsr", sort=True)
    try:
        rows, indptr, cols = arrays["rows"], arrays["indptr"], arrays["col_indices"]
        values = full_values(arrays, int(indptr[-1]))
        cuts = np.searchsorted(rows, np.asarray(bounds, np.uint64))
        messages = []
        for d in range(len(bounds) - 1):
            first, last = int(cuts[d]), int(cuts[d + 1])
            start, stop = int(indptr[first]), int(indptr[last])
            listed = last - first
            ints = np.empty(2 * listed + stop - start, itype)
            np.subtract(rows[first:last], np.uint64(bounds[d]), out=ints[:listed], casting="unsafe")
            np.subtract(indptr[first + 1 : last + 1], indptr[first:last], out=ints[listed : 2 * listed], casting="unsafe")
            ints[2 * listed :] = cols[start:stop]
            messages.append((ints, values[start:stop] if consume else values[start:stop].copy(), listed))
    finally:
        if not consume:
            matrix.ss.pack_hypercsr(**packable(arrays), take_ownership=True)
    return messages


def import_messages(
    pieces: list[tuple[np.ndarray, np.ndarray, int]],
    row_offsets: np.ndarray,
    nrows: int,
    ncols: int,
    dtype: np.dtype,
    values: np.ndarray | None = None,
) -> gb.Matrix:
    """Not collective. One hypersparse matrix from messages: piece d = (integer array, values, listed rows) holds
    rows starting at ``row_offsets[d]``, pieces in increasing row order. Costs O(listed rows +
    entries), not O(nrows): rows that received nothing are not touched. ``values``: all pieces'
    values already contiguous in piece order (one receive buffer), handed to GraphBLAS as they are."""
    listed_total = sum(listed for _, _, listed in pieces)
    entries_total = sum(ints.size - 2 * listed for ints, _, listed in pieces)
    if entries_total == 0:
        return empty(nrows, ncols, dtype)
    rows = np.empty(listed_total, np.uint64)
    lengths = np.empty(listed_total, np.uint64)
    cols = np.empty(entries_total, np.uint64)
    r = e = 0
    for (ints, _, listed), offset in zip(pieces, row_offsets):
        entries = ints.size - 2 * listed
        np.add(ints[:listed], int(offset), out=rows[r : r + listed], casting="unsafe")
        lengths[r : r + listed] = ints[listed : 2 * listed]
        cols[e : e + entries] = ints[2 * listed :]
        r, e = r + listed, e + entries
    if values is None:
        values = pieces[0][1] if len(pieces) == 1 else np.concatenate([piece[1] for piece in pieces]) if pieces else np.zeros(0)
    indptr = np.zeros(listed_total + 1, np.uint64)
    np.cumsum(lengths, out=indptr[1:])
    return gb.Matrix.ss.import_hypercsr(
        nrows=nrows,
        ncols=ncols,
        rows=rows,
        indptr=indptr,
        col_indices=cols,
        values=np.ascontiguousarray(values, dtype=dtype),
        nvec=listed_total,
        sorted_cols=True,
        take_ownership=True,
    )


def wire_bytes(listed_rows: int, entries: int, index_bytes: int, value_bytes: int) -> int:
    """Not collective. Bytes of one message: header + (2 * listed rows + entries) indices + entries values."""
    return HEADER_BYTES + index_bytes * (2 * listed_rows + entries) + value_bytes * entries
