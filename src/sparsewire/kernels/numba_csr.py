"""CPU backend of :mod:`sparsewire.kernels.compiled`: Numba kernels over row-major dense blocks.

Every kernel writes into arrays the caller allocated once (no allocation per call) and releases
the GIL. The kernels for messages (gather, element ranges, CSC) are in
:mod:`sparsewire.kernels.numba_messages`, re-exported here so the backend is one namespace.
``*_range`` kernels are serial over one range of rows or elements (one thread's share);
``*_threads`` kernels run on T threads of Numba's pool, each its range of ``bounds`` (T + 1
offsets), except the CSR product, whose threads steal row chunks from each other.

Accumulation order: a C row is summed nonzero by nonzero in the order its CSR row stores them,
``c = a_0 x_0; c += a_1 x_1; ...``, whatever the number of threads. The CSR product keeps the row
in SIMD registers (:mod:`sparsewire.kernels.simd`) while it walks the row's nonzeros, so C is
stored once per row and never re-read. Each ``c += a x`` is one fused multiply-add where the CPU
has one (``fastmath={"contract"}`` in the scalar loops, ``llvm.fmuladd`` in the registers: the
same rounding), a single rounding, never reassociated, so results are bitwise reproducible.

With ``prefetch``, the CSR product prefetches the B rows of the nonzeros :data:`PREFETCH_DISTANCE`
ahead. With ``stream``, C rows are written with non-temporal stores (no read of C into the cache
first) when ``out`` is aligned to the cache line. The caller decides both
(:mod:`sparsewire.kernels.compiled`).

Compile time: the pieces run once per row (a block of registers, a pair of rows, a prefetch) are
inlined into the loop over rows that calls them, and each loop over rows (whole registers, half a
register, any width) is a function of its own, called once per range: Numba inlines by copying IR
into the caller and analysing the caller again, which costs more the larger the caller
(docs/design-decisions.md, "Local kernels").
"""

from __future__ import annotations

from sparsewire._lib.jit import literally, njit, prange
from sparsewire.kernels.atomics import fetch_add
from sparsewire.kernels.simd import (
    LINE_BYTES,
    element,
    half_load,
    half_zero,
    lanes_fma,
    lanes_in,
    lanes_load,
    lanes_put,
    lanes_scale,
    lanes_store,
    lanes_zero,
    store_fence,
)
from sparsewire.kernels.simd import (
    prefetch as _prefetch,
)

#: Nonzeros ahead whose B rows the CSR product prefetches (16 and 32 measured alike; 8 less).
PREFETCH_DISTANCE = 16
#: Cache lines of a B row prefetched (the hardware's own prefetcher takes the rest of a long row).
PREFETCH_LINES = 4
_CONTRACT = {"contract"}


@njit(nogil=True, cache=True, inline="always")
def _row_block4(indices, data, x, out, i, p, stop, c, lanes, accumulate, stream):
    """Columns [c, c + 4 lanes) of C row i in four registers, over nonzeros [p, stop). Written
    out once per width (4, 2, 1): the registers are variables, so their count is fixed when Numba
    compiles."""
    c1, c2, c3 = c + lanes, c + 2 * lanes, c + 3 * lanes
    if accumulate:
        t0, t1, t2, t3 = lanes_load(out, i, c), lanes_load(out, i, c1), lanes_load(out, i, c2), lanes_load(out, i, c3)
    elif p < stop:
        j, v = element(indices, p), element(data, p)
        t0, t1 = lanes_scale(v, lanes_load(x, j, c)), lanes_scale(v, lanes_load(x, j, c1))
        t2, t3 = lanes_scale(v, lanes_load(x, j, c2)), lanes_scale(v, lanes_load(x, j, c3))
        p += 1
    else:
        t0 = t1 = t2 = t3 = lanes_zero(out)
    while p < stop:
        j, v = element(indices, p), element(data, p)
        t0, t1 = lanes_fma(t0, v, lanes_load(x, j, c)), lanes_fma(t1, v, lanes_load(x, j, c1))
        t2, t3 = lanes_fma(t2, v, lanes_load(x, j, c2)), lanes_fma(t3, v, lanes_load(x, j, c3))
        p += 1
    lanes_put(out, i, c, t0, stream)
    lanes_put(out, i, c1, t1, stream)
    lanes_put(out, i, c2, t2, stream)
    lanes_put(out, i, c3, t3, stream)


@njit(nogil=True, cache=True, inline="always")
def _row_block2(indices, data, x, out, i, p, stop, c, lanes, accumulate, stream):
    """Columns [c, c + 2 lanes) of C row i in two registers."""
    c1 = c + lanes
    if accumulate:
        t0, t1 = lanes_load(out, i, c), lanes_load(out, i, c1)
    elif p < stop:
        j, v = element(indices, p), element(data, p)
        t0, t1 = lanes_scale(v, lanes_load(x, j, c)), lanes_scale(v, lanes_load(x, j, c1))
        p += 1
    else:
        t0 = t1 = lanes_zero(out)
    while p < stop:
        j, v = element(indices, p), element(data, p)
        t0, t1 = lanes_fma(t0, v, lanes_load(x, j, c)), lanes_fma(t1, v, lanes_load(x, j, c1))
        p += 1
    lanes_put(out, i, c, t0, stream)
    lanes_put(out, i, c1, t1, stream)


@njit(nogil=True, cache=True, inline="always")
def _row_block1(indices, data, x, out, i, p, stop, c, accumulate, stream):
    """Columns [c, c + lanes) of C row i in one register."""
    if accumulate:
        t0 = lanes_load(out, i, c)
    elif p < stop:
        t0 = lanes_scale(element(data, p), lanes_load(x, element(indices, p), c))
        p += 1
    else:
        t0 = lanes_zero(out)
    while p < stop:
        t0 = lanes_fma(t0, element(data, p), lanes_load(x, element(indices, p), c))
        p += 1
    lanes_put(out, i, c, t0, stream)


@njit(nogil=True, cache=True, inline="always")
def _row_half(indices, data, x, out, i, p, stop, c, accumulate):
    """Columns [c, c + lanes / 2) of C row i in one half register (8 float32 or 4 float64)."""
    if accumulate:
        t0 = half_load(out, i, c)
    elif p < stop:
        t0 = lanes_scale(element(data, p), half_load(x, element(indices, p), c))
        p += 1
    else:
        t0 = half_zero(out)
    while p < stop:
        t0 = lanes_fma(t0, element(data, p), half_load(x, element(indices, p), c))
        p += 1
    lanes_store(out, i, c, t0)


@njit(nogil=True, cache=True, inline="always")
def _two_rows_block1(indices, data, x, out, i, p0, s0, p1, s1, stream):
    """C rows i and i + 1, one register each (not accumulating): the two rows' chains of
    fused multiply-adds interleaved, so one row's FMA latency hides behind the other's (each row
    still sums its nonzeros in stored order: the same bits as one row at a time)."""
    t0 = lanes_zero(out)
    t1 = lanes_zero(out)
    if p0 < s0:
        t0 = lanes_scale(element(data, p0), lanes_load(x, element(indices, p0), 0))
        p0 += 1
    if p1 < s1:
        t1 = lanes_scale(element(data, p1), lanes_load(x, element(indices, p1), 0))
        p1 += 1
    for _ in range(min(s0 - p0, s1 - p1)):
        t0 = lanes_fma(t0, element(data, p0), lanes_load(x, element(indices, p0), 0))
        t1 = lanes_fma(t1, element(data, p1), lanes_load(x, element(indices, p1), 0))
        p0 += 1
        p1 += 1
    while p0 < s0:
        t0 = lanes_fma(t0, element(data, p0), lanes_load(x, element(indices, p0), 0))
        p0 += 1
    while p1 < s1:
        t1 = lanes_fma(t1, element(data, p1), lanes_load(x, element(indices, p1), 0))
        p1 += 1
    lanes_put(out, i, 0, t0, stream)
    lanes_put(out, i + 1, 0, t1, stream)


@njit(nogil=True, cache=True, inline="always")
def _two_rows_half(indices, data, x, out, i, p0, s0, p1, s1):
    """C rows i and i + 1 of half a register each (not accumulating), chains interleaved as in
    :func:`_two_rows_block1`."""
    t0 = half_zero(out)
    t1 = half_zero(out)
    if p0 < s0:
        t0 = lanes_scale(element(data, p0), half_load(x, element(indices, p0), 0))
        p0 += 1
    if p1 < s1:
        t1 = lanes_scale(element(data, p1), half_load(x, element(indices, p1), 0))
        p1 += 1
    for _ in range(min(s0 - p0, s1 - p1)):
        t0 = lanes_fma(t0, element(data, p0), half_load(x, element(indices, p0), 0))
        t1 = lanes_fma(t1, element(data, p1), half_load(x, element(indices, p1), 0))
        p0 += 1
        p1 += 1
    while p0 < s0:
        t0 = lanes_fma(t0, element(data, p0), half_load(x, element(indices, p0), 0))
        p0 += 1
    while p1 < s1:
        t1 = lanes_fma(t1, element(data, p1), half_load(x, element(indices, p1), 0))
        p1 += 1
    lanes_store(out, i, 0, t0)
    lanes_store(out, i + 1, 0, t1)


@njit(nogil=True, cache=True, inline="always")
def _prefetch_ahead(indices, p, stop, last, base, row_bytes, lines):
    """Prefetch ``lines`` cache lines of the B rows of nonzeros [p, stop) shifted
    :data:`PREFETCH_DISTANCE` ahead (not past ``last``)."""
    for q in range(p + PREFETCH_DISTANCE, min(stop + PREFETCH_DISTANCE, last)):
        address = base + element(indices, q) * row_bytes
        for line in range(lines):
            _prefetch(address + LINE_BYTES * line)


@njit(nogil=True, cache=True, fastmath=_CONTRACT, no_cpython_wrapper=True)
def _rows_of_one_block(
    indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, stream, registers, last, base, row_bytes
):
    """Rows [row_start, row_stop) when a C row is exactly ``registers`` (4, 2 or 1) registers:
    ``registers`` is a compile-time constant (``literally``: one compiled copy per count), so the
    block and the prefetch of that many lines compile without loops over blocks or lines (a copy of
    this loop timed at k = 32 on 2 threads took 0.76-0.98 of the time of :func:`_rows_of_any_width`,
    which works out each row's blocks at run time)."""
    literally(registers)
    lanes = lanes_in(out)
    i = row_start
    if registers == 1 and not accumulate:  # rows in pairs: one register is one FMA chain, too short alone
        while i + 1 < row_stop:
            p, middle, stop = element(indptr, i), element(indptr, i + 1), element(indptr, i + 2)
            if prefetch:
                _prefetch_ahead(indices, p, stop, last, base, row_bytes, 1)
            _two_rows_block1(indices, data, x, out, i, p, middle, middle, stop, stream)
            i += 2
    for i in range(i, row_stop):  # noqa: B020 - goes on from the row the pairs stopped at
        p, stop = element(indptr, i), element(indptr, i + 1)
        if accumulate and p == stop:
            continue  # nothing to add: C's row is not touched (an off-diagonal block is mostly empty rows)
        if prefetch:
            _prefetch_ahead(indices, p, stop, last, base, row_bytes, registers)
        if registers == 4:
            _row_block4(indices, data, x, out, i, p, stop, 0, lanes, accumulate, stream)
        elif registers == 2:
            _row_block2(indices, data, x, out, i, p, stop, 0, lanes, accumulate, stream)
        else:
            _row_block1(indices, data, x, out, i, p, stop, 0, accumulate, stream)


@njit(nogil=True, cache=True, fastmath=_CONTRACT, no_cpython_wrapper=True)
def _rows_of_half(indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, last, base, row_bytes):
    """Rows [row_start, row_stop) when a C row is half a register (k = 8 in float32, 4 in float64):
    the general loop would take each of the row's columns in turn (7x MKL's time at k = 8 in
    float32)."""
    i = row_start
    if not accumulate:  # rows in pairs, as for one register
        while i + 1 < row_stop:
            p, middle, stop = element(indptr, i), element(indptr, i + 1), element(indptr, i + 2)
            if prefetch:
                _prefetch_ahead(indices, p, stop, last, base, row_bytes, 1)
            _two_rows_half(indices, data, x, out, i, p, middle, middle, stop)
            i += 2
    for i in range(i, row_stop):  # noqa: B020 - goes on from the row the pairs stopped at
        p, stop = element(indptr, i), element(indptr, i + 1)
        if accumulate and p == stop:
            continue
        if prefetch:
            _prefetch_ahead(indices, p, stop, last, base, row_bytes, 1)
        _row_half(indices, data, x, out, i, p, stop, 0, accumulate)


@njit(nogil=True, cache=True, fastmath=_CONTRACT, no_cpython_wrapper=True)
def _rows_of_any_width(indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, stream, last, base, row_bytes):
    """Rows [row_start, row_stop) for any k: each row cut into blocks of 4, 2 and 1 registers, a
    half register, then one scalar loop per column left."""
    k = out.shape[1]
    lanes = lanes_in(out)
    k4 = k - k % (4 * lanes)
    k2 = k - k % (2 * lanes)
    k1 = k - k % lanes
    kh = k - k % (lanes // 2)  # one half register after the whole ones when half a register is left
    lines = min(PREFETCH_LINES, (k * x.itemsize + LINE_BYTES - 1) // LINE_BYTES)
    for i in range(row_start, row_stop):
        p, stop = element(indptr, i), element(indptr, i + 1)
        if accumulate and p == stop:
            continue
        if prefetch:
            _prefetch_ahead(indices, p, stop, last, base, row_bytes, lines)
        for c in range(0, k4, 4 * lanes):
            _row_block4(indices, data, x, out, i, p, stop, c, lanes, accumulate, stream)
        for c in range(k4, k2, 2 * lanes):
            _row_block2(indices, data, x, out, i, p, stop, c, lanes, accumulate, stream)
        for c in range(k2, k1, lanes):
            _row_block1(indices, data, x, out, i, p, stop, c, accumulate, stream)
        for c in range(k1, kh, lanes // 2):
            _row_half(indices, data, x, out, i, p, stop, c, accumulate)
        for c in range(kh, k):
            q = p
            if accumulate:
                t = out[i, c]
            elif q < stop:
                t = element(data, q) * x[element(indices, q), c]
                q += 1
            else:
                out[i, c] = 0.0
                continue
            while q < stop:  # t keeps out's dtype: float32 sums round in float32
                t += element(data, q) * x[element(indices, q), c]
                q += 1
            out[i, c] = t


@njit(nogil=True, cache=True)
def csr_dense_range(indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, stream):
    """Rows [row_start, row_stop) of ``out (+)= A @ x`` (A in CSR), each row summed in stored order.

    A C row is cut into blocks of 4, 2 or 1 registers of :data:`~sparsewire.kernels.simd.LINE_BYTES`
    bytes (k = 32 in float64: one block of four, one pass over the row's nonzeros), the columns
    after the last whole register one scalar loop each. With ``prefetch``, the B rows of the
    nonzeros :data:`PREFETCH_DISTANCE` ahead are prefetched. With ``stream`` (ignored when
    accumulating or when ``out``'s rows do not start on cache lines), registers go to memory with
    non-temporal stores, fenced before returning."""
    k = out.shape[1]
    lanes = lanes_in(out)
    stream = stream and not accumulate and out.ctypes.data % LINE_BYTES == 0 and out.strides[0] % LINE_BYTES == 0
    base, row_bytes = x.ctypes.data, x.strides[0]
    last = element(indptr, row_stop) if prefetch else 0
    if k == 4 * lanes:
        _rows_of_one_block(
            indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, stream, 4, last, base, row_bytes
        )
    elif k == 2 * lanes:
        _rows_of_one_block(
            indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, stream, 2, last, base, row_bytes
        )
    elif k == lanes:
        _rows_of_one_block(
            indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, stream, 1, last, base, row_bytes
        )
    elif 2 * k == lanes:
        _rows_of_half(indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, last, base, row_bytes)
    else:
        _rows_of_any_width(
            indptr, indices, data, x, out, row_start, row_stop, accumulate, prefetch, stream, last, base, row_bytes
        )
    if stream:
        store_fence()


#: int64 slots between two threads' counters in ``claimed`` (one cache line: no false sharing).
COUNTER_STRIDE = 8


@njit(nogil=True, cache=True, inline="always")
def reset_claims(claimed, chunks):
    """Zero the counters of a work-stealing run over ``chunks`` (T x m chunks, thread t's own share
    being chunks [t m, (t + 1) m)); returns T and m."""
    threads = claimed.size // COUNTER_STRIDE
    for t in range(threads):
        claimed[t * COUNTER_STRIDE] = 0
    return threads, (chunks.size - 1) // threads


@njit(nogil=True, cache=True, inline="always")
def claim_chunk(claimed, share, per_thread):
    """The next chunk of thread ``share``'s share not yet handed out (``claimed[share *
    COUNTER_STRIDE]`` counts them, one :func:`fetch_add` each): its index, or -1 when none is left."""
    c = fetch_add(claimed, share * COUNTER_STRIDE, 1)
    return share * per_thread + c if c < per_thread else -1


@njit(nogil=True, parallel=True, cache=True)
def csr_dense_threads(indptr, indices, data, x, out, chunks, claimed, accumulate, prefetch, stream):
    """``out (+)= A @ x`` on T threads with work stealing over the row ``chunks``: each thread
    takes its own share's chunks in order, then what is left of the other shares, one
    :func:`claim_chunk` each (``claimed`` is scratch, reset here), so a thread slowed by its data
    or by a busy core no longer holds the others up. A row is summed by whichever thread takes it
    in the same order, so the bits do not depend on who does. (A helper that also walked the
    shares, returning a tuple, made bcsstk25's warm product 3% slower.)"""
    threads, per_thread = reset_claims(claimed, chunks)
    for t in prange(threads):
        for offset in range(threads):  # its own share first, then the others' leftovers
            share = (t + offset) % threads
            c = claim_chunk(claimed, share, per_thread)
            while c >= 0:
                csr_dense_range(indptr, indices, data, x, out, chunks[c], chunks[c + 1], accumulate, prefetch, stream)
                c = claim_chunk(claimed, share, per_thread)


from sparsewire.kernels.numba_messages import (  # noqa: E402 - the backend's other half
    copy_threads,
    csc_columns_range,
    csc_columns_threads,
    csc_elements,
    csr_elements,
    gather_elements,
    gather_range,
    gather_threads,
)

__all__ = [
    "csr_dense_range",
    "csr_dense_threads",
    "reset_claims",
    "claim_chunk",
    "gather_range",
    "gather_threads",
    "gather_elements",
    "csr_elements",
    "csc_columns_range",
    "csc_columns_threads",
    "csc_elements",
    "copy_threads",
]
