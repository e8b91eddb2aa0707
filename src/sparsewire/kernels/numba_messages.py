"""Numba kernels for messages, beside the CSR product of :mod:`sparsewire.kernels.numba_csr`:
the gather that packs B rows into a send buffer, element ranges (one partition of a partitioned
message, which may start or end inside a row), the CSC product of one received message, and a
threaded copy (the machine's copy bandwidth, for the benchmarks).

The same rules hold as there: outputs are preallocated, the GIL is released, and every
``c += a x`` is one fused multiply-add in stored order, so results are bitwise reproducible.
"""

from __future__ import annotations

from sparsewire._lib.jit import njit, prange
from sparsewire.kernels.simd import element, lanes_fma, lanes_in, lanes_load, lanes_store

_CONTRACT = {"contract"}


@njit(nogil=True, cache=True)
def gather_range(index, x, out, row_start, row_stop):
    """out[r] = x[index[r]] for r in [row_start, row_stop) (packing B rows into a send buffer)."""
    k = out.shape[1]
    for r in range(row_start, row_stop):
        j = element(index, r)
        for c in range(k):
            out[r, c] = x[j, c]


@njit(nogil=True, parallel=True, cache=True)
def gather_threads(index, x, out, bounds):
    """:func:`gather_range` on T threads."""
    for t in prange(bounds.size - 1):
        gather_range(index, x, out, bounds[t], bounds[t + 1])


@njit(nogil=True, cache=True, inline="always")
def _fragment(position, element_stop, k):
    """The row r holding flattened element ``position`` and the columns [c0, c1) of it that lie
    before ``element_stop`` (a partition may start or end inside a row)."""
    r = position // k
    c0 = position - r * k
    return r, c0, min(k, c0 + element_stop - position)


@njit(nogil=True, cache=True)
def gather_elements(index, x, out_flat, element_start, element_stop):
    """Elements [element_start, element_stop) of the flattened gathered block (one partition of a
    partitioned message; it may start or end inside a row).

    Loops run over views from 0: an index that starts at a run-time value may be negative to
    Numba, whose wraparound check then stops vectorisation (docs/design-decisions.md, "Local kernels")."""
    k = x.shape[1]
    e = element_start
    while e < element_stop:
        r, c0, c1 = _fragment(e, element_stop, k)
        target = out_flat[r * k + c0 : r * k + c1]
        source = x[element(index, r), c0:c1]
        for c in range(target.size):
            target[c] = source[c]
        e += c1 - c0


@njit(nogil=True, cache=True, fastmath=_CONTRACT)
def csr_elements(indptr, indices, data, x, out_flat, element_start, element_stop, accumulate):
    """Elements [element_start, element_stop) of the flattened ``A @ x`` (+= with ``accumulate``)."""
    k = x.shape[1]
    e = element_start
    while e < element_stop:
        r, c0, c1 = _fragment(e, element_stop, k)
        target = out_flat[r * k + c0 : r * k + c1]
        if not accumulate:
            for c in range(target.size):
                target[c] = 0.0
        for p in range(element(indptr, r), element(indptr, r + 1)):
            source = x[element(indices, p), c0:c1]
            v = element(data, p)
            for c in range(target.size):
                target[c] += v * source[c]
        e += c1 - c0


@njit(nogil=True, cache=True, inline="always")
def _add_scaled(out, i, c, v, register):
    """``out[i, c : c + lanes] += v * register`` as one load, fused multiply-add and store."""
    lanes_store(out, i, c, lanes_fma(lanes_load(out, i, c), v, register))


@njit(nogil=True, cache=True, inline="always")
def _columns_of_one_block(colptr, rows, data, buffer, out, col_start, col_stop, registers):
    """:func:`csc_columns_range` when a row is exactly ``registers`` (4, 2 or 1) registers (a
    constant at each call site): the received row stays in registers while it is added to every C
    row of its column, each C row loaded, fused-multiply-added and stored as whole registers
    (measured at k = 8, an even split in two: 0.68-0.78 of the scalar loop's time on
    delaunay_n16, mdual and cit-HepTh, the same bits)."""
    lanes = lanes_in(out)
    for j in range(col_start, col_stop):
        if registers == 1:
            b0 = lanes_load(buffer, j, 0)
            for p in range(element(colptr, j), element(colptr, j + 1)):
                _add_scaled(out, element(rows, p), 0, element(data, p), b0)
        elif registers == 2:
            b0, b1 = lanes_load(buffer, j, 0), lanes_load(buffer, j, lanes)
            for p in range(element(colptr, j), element(colptr, j + 1)):
                i, v = element(rows, p), element(data, p)
                _add_scaled(out, i, 0, v, b0)
                _add_scaled(out, i, lanes, v, b1)
        else:
            b0, b1 = lanes_load(buffer, j, 0), lanes_load(buffer, j, lanes)
            b2, b3 = lanes_load(buffer, j, 2 * lanes), lanes_load(buffer, j, 3 * lanes)
            for p in range(element(colptr, j), element(colptr, j + 1)):
                i, v = element(rows, p), element(data, p)
                _add_scaled(out, i, 0, v, b0)
                _add_scaled(out, i, lanes, v, b1)
                _add_scaled(out, i, 2 * lanes, v, b2)
                _add_scaled(out, i, 3 * lanes, v, b3)


@njit(nogil=True, cache=True, fastmath=_CONTRACT)
def csc_columns_range(colptr, rows, data, buffer, out, col_start, col_stop):
    """``out[rows] += A[:, col_start:col_stop] @ buffer[col_start:col_stop]`` with A in CSC
    (one received message: Collom & Bienz Alg. 1, ``mult_append_msg``)."""
    k = out.shape[1]
    lanes = lanes_in(out)
    if k == lanes:
        _columns_of_one_block(colptr, rows, data, buffer, out, col_start, col_stop, 1)
    elif k == 2 * lanes:
        _columns_of_one_block(colptr, rows, data, buffer, out, col_start, col_stop, 2)
    elif k == 4 * lanes:
        _columns_of_one_block(colptr, rows, data, buffer, out, col_start, col_stop, 4)
    else:
        for j in range(col_start, col_stop):
            for p in range(element(colptr, j), element(colptr, j + 1)):
                i = element(rows, p)
                v = element(data, p)
                for c in range(k):
                    out[i, c] += v * buffer[j, c]


@njit(nogil=True, parallel=True, cache=True)
def csc_columns_threads(colptrs, rows, data, buffer, out, col_start, col_stop):
    """:func:`csc_columns_range` on T threads; thread t holds the CSC of its own output rows
    (``colptrs[t]``), so no two threads write one C row and no atomics are needed."""
    for t in prange(colptrs.shape[0]):
        csc_columns_range(colptrs[t], rows, data, buffer, out, col_start, col_stop)


@njit(nogil=True, cache=True, fastmath=_CONTRACT)
def _csc_fragments(colptr, rows, data, buffer_flat, k, out, element_start, element_stop):
    """:func:`csc_elements` element by element (the row fragments a partition cuts)."""
    e = element_start
    while e < element_stop:
        j, c0, c1 = _fragment(e, element_stop, k)
        source = buffer_flat[j * k + c0 : j * k + c1]
        for p in range(element(colptr, j), element(colptr, j + 1)):
            target = out[element(rows, p), c0:c1]
            v = element(data, p)
            for c in range(source.size):
                target[c] += v * source[c]
        e += c1 - c0


@njit(nogil=True, cache=True, fastmath=_CONTRACT)
def csc_elements(colptr, rows, data, buffer_flat, k, out, element_start, element_stop):
    """Apply elements [element_start, element_stop) of a flattened receive buffer: whole B rows
    and the fragments of rows a partition cuts (Collom & Bienz Algs. 4 and 5). The whole rows go
    through :func:`csc_columns_range` (in registers where a row is 1, 2 or 4 of them), the
    fragments at either end element by element; B rows are applied in ascending order either way,
    so the bits do not depend on where the partitions cut."""
    first_whole = (element_start + k - 1) // k
    stop_whole = element_stop // k
    if first_whole >= stop_whole:
        _csc_fragments(colptr, rows, data, buffer_flat, k, out, element_start, element_stop)
        return
    _csc_fragments(colptr, rows, data, buffer_flat, k, out, element_start, first_whole * k)
    buffer = buffer_flat[: stop_whole * k].reshape((stop_whole, k))
    csc_columns_range(colptr, rows, data, buffer, out, first_whole, stop_whole)
    _csc_fragments(colptr, rows, data, buffer_flat, k, out, stop_whole * k, element_stop)


@njit(nogil=True, parallel=True, cache=True)
def copy_threads(source, target, bounds):
    """target[:] = source[:] on T threads (the copy-bandwidth reference of the benchmarks)."""
    for t in prange(bounds.size - 1):
        source_part = source[bounds[t] : bounds[t + 1]]
        target_part = target[bounds[t] : bounds[t + 1]]
        for e in range(source_part.size):
            target_part[e] = source_part[e]
