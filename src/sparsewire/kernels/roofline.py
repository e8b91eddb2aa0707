"""The local kernel's ceiling: a loop that reads, per nonzero, the B row it names, in the CSR kernel's
order, chunks and prefetches, and does nothing else (no A values, no C).

No kernel that walks the rows in that order and reads each nonzero's B row can beat it, so its time
bounds what the kernel can reach (``bench/kernels/kernel_bandwidth.py``'s ``ceiling`` column). It
lives beside the kernel so that it follows the kernel's chunking and prefetches when they change.
"""

from __future__ import annotations

import numpy as np

from sparsewire._lib.jit import njit, prange
from sparsewire.kernels.compiled import CsrOperand
from sparsewire.kernels.numba_csr import PREFETCH_DISTANCE, PREFETCH_LINES, claim_chunk, reset_claims
from sparsewire.kernels.simd import LINE_BYTES, lanes_fma, lanes_in, lanes_load, lanes_store, lanes_zero, prefetch

__all__ = ["read_b_rows", "read_b_rows_scratch"]


@njit(nogil=True, cache=True)
def read_b_rows_range(indptr, indices, x, sink, row_start, row_stop, use_prefetch):
    """Read the B rows that the nonzeros of rows [row_start, row_stop) name, in the kernel's order,
    with the kernel's prefetches, and nothing else: no A values, no C. Four registers take turns
    (no chain of dependent adds holds the loads up); their sum goes to ``sink`` so that the loads
    are not optimised away."""
    k = x.shape[1]
    lanes = lanes_in(x)
    k4 = k - k % (4 * lanes)
    k1 = k - k % lanes
    lines = min(PREFETCH_LINES, (k * x.itemsize + LINE_BYTES - 1) // LINE_BYTES)
    base, row_bytes = x.ctypes.data, x.strides[0]
    last = indptr[row_stop]
    a0 = a1 = a2 = a3 = lanes_zero(x)
    rest = 0.0  # the columns after the last whole register
    for p in range(indptr[row_start], last):
        if use_prefetch and p + PREFETCH_DISTANCE < last:
            for line in range(lines):
                prefetch(base + indices[p + PREFETCH_DISTANCE] * row_bytes + LINE_BYTES * line)
        j = indices[p]
        for c in range(0, k4, 4 * lanes):
            a0 = lanes_fma(a0, 1.0, lanes_load(x, j, c))
            a1 = lanes_fma(a1, 1.0, lanes_load(x, j, c + lanes))
            a2 = lanes_fma(a2, 1.0, lanes_load(x, j, c + 2 * lanes))
            a3 = lanes_fma(a3, 1.0, lanes_load(x, j, c + 3 * lanes))
        for c in range(k4, k1, lanes):
            a0 = lanes_fma(a0, 1.0, lanes_load(x, j, c))
        for c in range(k1, k):
            rest += x[j, c]
    if row_stop > row_start:  # an empty chunk starts where the next one does
        lanes_store(sink, row_start, 0, lanes_fma(lanes_fma(lanes_fma(a0, 1.0, a1), 1.0, a2), 1.0, a3))
        sink[row_start, lanes] = rest


@njit(nogil=True, parallel=True, cache=True)
def read_b_rows_threads(indptr, indices, x, sink, chunks, claimed, use_prefetch):
    """:func:`read_b_rows_range` over the kernel's row chunks, handed out as
    :func:`~sparsewire.kernels.numba_csr.csr_dense_threads` hands them out (its counters, its order
    of shares), so the two differ only in what they do per nonzero. The loop is the kernel's, not
    shared with it: a Numba function passed as an argument is recompiled in every process."""
    threads, per_thread = reset_claims(claimed, chunks)
    for t in prange(threads):
        for offset in range(threads):
            share = (t + offset) % threads
            c = claim_chunk(claimed, share, per_thread)
            while c >= 0:
                read_b_rows_range(indptr, indices, x, sink, chunks[c], chunks[c + 1], use_prefetch)
                c = claim_chunk(claimed, share, per_thread)


def read_b_rows(operand: CsrOperand, b: np.ndarray, sink: np.ndarray, claimed: np.ndarray) -> None:
    """Not collective. What any kernel that reads, per nonzero, the B row it names must do, on the operand's
    threads (``claimed``: scratch counters shaped like ``operand.claimed``): the kernel's ceiling."""
    if operand.bounds.size == 2:
        read_b_rows_range(operand.indptr, operand.indices, b, sink, 0, operand.shape[0], operand.prefetch)
    else:
        read_b_rows_threads(operand.indptr, operand.indices, b, sink, operand.chunks, claimed, operand.prefetch)


def read_b_rows_scratch(operand: CsrOperand) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. The ``sink`` (one register and one scalar per row) and ``claimed`` counters that
    :func:`read_b_rows` writes for ``operand``."""
    return np.zeros((operand.shape[0] + 1, LINE_BYTES // 8 + 1)), np.zeros_like(operand.claimed)
