"""CPU backend of :mod:`sparsewire.exec.kernels`: Numba kernels over row-major dense blocks.

Every kernel writes into arrays the caller allocated once (no allocation per call) and releases
the GIL. ``*_range`` kernels are serial over one range of rows or elements (one thread's share);
``*_threads`` kernels run the ranges of ``bounds`` (T + 1 offsets) on T threads of Numba's pool.

Accumulation order: a C row is summed nonzero by nonzero in the order its CSR row stores them,
``c = a_0 x_0; c += a_1 x_1; ...`` (eight, then four nonzeros per pass over the row, keeping that
order, so the row is loaded and stored once per eight nonzeros instead of once per nonzero; eight
rather than four measured 0.93 -> 0.68 ms on bcsstk25 and 4.80 -> 4.46 ms on stencil3d:40:27 at
k = 32, 2 threads, no prefetch, as each pass also pays run-time overlap checks of C and B). So results do not
depend on the number of threads. The products are compiled with floating-point contraction
(``fastmath={"contract"}``): each ``c += a x`` is one fused multiply-add where the CPU has one, a
single rounding, still in that order (no reassociation), so results stay bitwise reproducible.

With ``prefetch``, the CSR product prefetches the B rows of the nonzeros :data:`PREFETCH_DISTANCE`
ahead. The caller decides (:mod:`sparsewire.exec.kernels`): short rows wait on each B row in turn,
long rows already keep many loads in flight and the prefetches only add instructions.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, prange
from numba.core import cgutils, types
from numba.extending import intrinsic

#: Nonzeros ahead whose B rows the CSR product prefetches (16 and 32 measured alike; 8 less).
PREFETCH_DISTANCE = 16
#: Cache lines of a B row prefetched (the hardware's own prefetcher takes the rest of a long row).
PREFETCH_LINES = 4
_CONTRACT = {"contract"}


@intrinsic
def _prefetch(typingctx, address):
    """``llvm.prefetch`` (read, keep in all cache levels) of the byte at ``address``; a hint that
    never faults, so any address is safe."""
    signature = types.void(types.intp)

    def codegen(context, builder, sig, args):
        pointer_type = ir.PointerType(ir.IntType(8))
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [pointer_type, i32, i32, i32]), "llvm.prefetch.p0"
        )
        builder.call(function, [builder.inttoptr(args[0], pointer_type), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return signature, codegen


@njit(nogil=True, cache=True, fastmath=_CONTRACT)
def csr_dense_range(indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch):
    """Rows [row_start, row_stop) of ``out (+)= A @ x`` (A in CSR), each row summed in stored order;
    with ``prefetch``, the B rows of the nonzeros :data:`PREFETCH_DISTANCE` ahead are prefetched.

    The row loop is written out rather than calling a per-row helper: measured 20% faster on
    delaunay_n16 at k = 32 (the per-row call is not flattened as well)."""
    k = out.shape[1]
    base, row_bytes = x.ctypes.data, x.strides[0]
    lines = min(PREFETCH_LINES, (k * x.itemsize + 63) // 64)
    last = indptr[row_stop] if prefetch else 0
    for i in range(row_start, row_stop):
        p, stop = indptr[i], indptr[i + 1]
        # The B rows of this row's nonzeros shifted PREFETCH_DISTANCE ahead (none unless prefetch).
        for q in range(p + PREFETCH_DISTANCE, min(stop + PREFETCH_DISTANCE, last)):
            address = base + indices[q] * row_bytes
            for line in range(lines):
                _prefetch(address + 64 * line)
        if not accumulate:
            if p == stop:
                for c in range(k):
                    out[i, c] = 0.0
                continue
            j, v = indices[p], data[p]
            for c in range(k):
                out[i, c] = v * x[j, c]
            p += 1
        while p + 8 <= stop:
            j0, j1, j2, j3 = indices[p], indices[p + 1], indices[p + 2], indices[p + 3]
            j4, j5, j6, j7 = indices[p + 4], indices[p + 5], indices[p + 6], indices[p + 7]
            v0, v1, v2, v3 = data[p], data[p + 1], data[p + 2], data[p + 3]
            v4, v5, v6, v7 = data[p + 4], data[p + 5], data[p + 6], data[p + 7]
            for c in range(k):
                t = out[i, c]
                t += v0 * x[j0, c]
                t += v1 * x[j1, c]
                t += v2 * x[j2, c]
                t += v3 * x[j3, c]
                t += v4 * x[j4, c]
                t += v5 * x[j5, c]
                t += v6 * x[j6, c]
                t += v7 * x[j7, c]
                out[i, c] = t
            p += 8
        # Written out again for four: the 4-7 nonzeros an eight-pass leaves (most rows of a mesh
        # have fewer than eight) take one pass instead of one per nonzero.
        while p + 4 <= stop:
            j0, j1, j2, j3 = indices[p], indices[p + 1], indices[p + 2], indices[p + 3]
            v0, v1, v2, v3 = data[p], data[p + 1], data[p + 2], data[p + 3]
            for c in range(k):
                t = out[i, c]
                t += v0 * x[j0, c]
                t += v1 * x[j1, c]
                t += v2 * x[j2, c]
                t += v3 * x[j3, c]
                out[i, c] = t
            p += 4
        while p < stop:
            j, v = indices[p], data[p]
            for c in range(k):
                out[i, c] += v * x[j, c]
            p += 1


@njit(nogil=True, parallel=True, cache=True)
def csr_dense_threads(indptr, indices, data, x, out, bounds, accumulate, prefetch):
    """``out (+)= A @ x``, thread t computing rows [bounds[t], bounds[t+1])."""
    for t in prange(bounds.size - 1):
        csr_dense_range(indptr, indices, data, x, out, bounds[t], bounds[t + 1], accumulate, prefetch)


@njit(nogil=True, cache=True)
def gather_range(index, x, out, row_start, row_stop):
    """out[r] = x[index[r]] for r in [row_start, row_stop) (packing B rows into a send buffer)."""
    k = out.shape[1]
    for r in range(row_start, row_stop):
        j = index[r]
        for c in range(k):
            out[r, c] = x[j, c]


@njit(nogil=True, parallel=True, cache=True)
def gather_threads(index, x, out, bounds):
    """:func:`gather_range` on T threads."""
    for t in prange(bounds.size - 1):
        gather_range(index, x, out, bounds[t], bounds[t + 1])


@njit(nogil=True, cache=True, inline="always")
def _fragment(element, element_stop, k):
    """The row r holding flattened element ``element`` and the columns [c0, c1) of it that lie
    before ``element_stop`` (a partition may start or end inside a row)."""
    r = element // k
    c0 = element - r * k
    return r, c0, min(k, c0 + element_stop - element)


@njit(nogil=True, cache=True)
def gather_elements(index, x, out_flat, element_start, element_stop):
    """Elements [element_start, element_stop) of the flattened gathered block (one partition of a
    partitioned message; it may start or end inside a row).

    Loops run over views from 0: an index that starts at a run-time value may be negative to
    Numba, whose wraparound check then stops vectorisation (measured: a copy at 8 vs 25 GB/s)."""
    k = x.shape[1]
    e = element_start
    while e < element_stop:
        r, c0, c1 = _fragment(e, element_stop, k)
        target = out_flat[r * k + c0 : r * k + c1]
        source = x[index[r], c0:c1]
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
        for p in range(indptr[r], indptr[r + 1]):
            source = x[indices[p], c0:c1]
            v = data[p]
            for c in range(target.size):
                target[c] += v * source[c]
        e += c1 - c0


@njit(nogil=True, cache=True, fastmath=_CONTRACT)
def csc_columns_range(colptr, rows, data, buffer, out, col_start, col_stop):
    """``out[rows] += A[:, col_start:col_stop] @ buffer[col_start:col_stop]`` with A in CSC
    (one received message: Collom & Bienz Alg. 1, ``mult_append_msg``)."""
    k = out.shape[1]
    for j in range(col_start, col_stop):
        for p in range(colptr[j], colptr[j + 1]):
            i = rows[p]
            v = data[p]
            for c in range(k):
                out[i, c] += v * buffer[j, c]


@njit(nogil=True, parallel=True, cache=True)
def csc_columns_threads(colptrs, rows, data, buffer, out, col_start, col_stop):
    """:func:`csc_columns_range` on T threads; thread t holds the CSC of its own output rows
    (``colptrs[t]``), so no two threads write one C row and no atomics are needed."""
    for t in prange(colptrs.shape[0]):
        csc_columns_range(colptrs[t], rows, data, buffer, out, col_start, col_stop)


@njit(nogil=True, cache=True, fastmath=_CONTRACT)
def csc_elements(colptr, rows, data, buffer_flat, k, out, element_start, element_stop):
    """Apply elements [element_start, element_stop) of a flattened receive buffer: whole B rows
    and the fragments of rows a partition cuts (Collom & Bienz Algs. 4 and 5)."""
    e = element_start
    while e < element_stop:
        j, c0, c1 = _fragment(e, element_stop, k)
        source = buffer_flat[j * k + c0 : j * k + c1]
        for p in range(colptr[j], colptr[j + 1]):
            target = out[rows[p], c0:c1]
            v = data[p]
            for c in range(source.size):
                target[c] += v * source[c]
        e += c1 - c0


@njit(nogil=True, parallel=True, cache=True)
def copy_threads(source, target, bounds):
    """target[:] = source[:] on T threads (the copy-bandwidth reference of the benchmarks)."""
    for t in prange(bounds.size - 1):
        source_part = source[bounds[t] : bounds[t + 1]]
        target_part = target[bounds[t] : bounds[t + 1]]
        for e in range(source_part.size):
            target_part[e] = source_part[e]
