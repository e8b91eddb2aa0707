"""Lossless coding of a sparse message's integers: delta plus bit-packing, bit-exact round trip.

A message's integer array (:func:`~sparsewire.spgemm.local.pack_row_ranges`) is ``[rows (listed), lengths
(listed), columns (entries)]``, rows ascending and each row's columns ascending (GraphBLAS keeps them
sorted). Coded: the rows as differences to the previous row (the first to 0), the lengths as they are, each
row's first column as it is and the others as differences to the previous column, so every value is a small
non-negative integer; then packed in blocks of :data:`BLOCK` values, each block at the bit width of its
largest value (:mod:`sparsewire._lib.bitpacking`, whose layout the message has). Halo id lists code to 0.17-0.29x
of int32 and random CSR columns to about 0.5x
(``../shared/research/compressed-messages.md``); what a message takes is measured by MPI, not assumed.
"""

from __future__ import annotations

import functools
import timeit

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.bitpacking import BLOCK, pack, unpack
from sparsewire.errors import PlanMismatchError

__all__ = ["BLOCK", "encode_indices", "decode_indices", "coding_cost"]


@functools.cache
def _kernels():
    from sparsewire._lib.jit import njit

    return tuple(njit(nogil=True, cache=True)(kernel) for kernel in (_deltas, _undo_deltas))


def _deltas(ints, listed, deltas):
    """Rows as differences to the previous row, lengths as they are, each row's columns as differences to the
    previous column of the row (its first to 0)."""
    if ints.shape[0] == 0:
        return
    zero = ints[0] - ints[0]  # of the integers' own type (0 would unify uint64 with int64 as float64)
    previous = zero
    for i in range(listed):
        deltas[i] = ints[i] - previous
        previous = ints[i]
        deltas[listed + i] = ints[listed + i]
    position = 2 * listed
    for row in range(listed):
        previous = zero
        for i in range(position, position + ints[listed + row]):
            deltas[i] = ints[i] - previous
            previous = ints[i]
        position += ints[listed + row]


def _undo_deltas(deltas, listed, ints):
    total = 0
    for i in range(listed):
        total += deltas[i]
        ints[i] = total
        ints[listed + i] = deltas[listed + i]
    position = 2 * listed
    for row in range(listed):
        total = 0
        for i in range(position, position + deltas[listed + row]):
            total += deltas[i]
            ints[i] = total
        position += deltas[listed + row]


def encode_indices(ints: np.ndarray, listed: int) -> np.ndarray:
    """Not collective. The coded bytes (uint8) of a message's integer array ``ints`` with ``listed`` rows."""
    values = np.ascontiguousarray(ints)
    deltas = np.empty(values.size, np.uint64)
    _kernels()[0](values, listed, deltas)
    return pack(deltas)


def decode_indices(message: np.ndarray, listed: int, itype, entries: int) -> np.ndarray:
    """Not collective. The integer array (``itype``) of a coded ``message`` with ``listed`` rows and ``entries``
    columns (the message header's), bit for bit; PlanMismatchError where the coded sizes disagree with them."""
    count = int(message[:8].view(np.int64)[0])
    if count != 2 * listed + entries:
        raise PlanMismatchError(f"a coded index array holds {count} integers, its header says {2 * listed + entries}")
    deltas = unpack(message)
    if int(deltas[listed : 2 * listed].sum()) != entries:  # the row lengths place the columns: checked before writing
        raise PlanMismatchError(f"a coded index array's row lengths add up to other than its {entries} entries")
    out = np.empty(count, itype)
    _kernels()[1](deltas.view(np.int64), listed, out)
    return out


def coding_cost(rows: sp.csr_array, itype, value_bytes: int, repeat: int = 5) -> tuple[float, float]:
    """Not collective. What coding costs and saves on messages like ``rows`` (a rank's own block of A, whose
    structure its messages share): the fewest seconds (another process's use of the core only adds) of one
    :func:`encode_indices` plus one :func:`decode_indices` of its integer array (``[rows, lengths, columns]`` in
    ``itype``) per byte of the message's payload (integers and ``value_bytes`` per entry), after one untimed round
    trip that compiles the kernels; and wire bytes over payload bytes. An empty block measures a one-entry message."""
    rows = sp.csr_array(rows)
    if rows.nnz == 0:
        rows = sp.csr_array(([1], [0], [0, 1]), shape=(1, 1))
    listed = rows.shape[0]
    ints = np.concatenate([np.arange(listed), np.diff(rows.indptr), rows.indices]).astype(itype)
    payload = ints.nbytes + value_bytes * rows.nnz
    coded = encode_indices(ints, listed)  # untimed: compiles the kernels, and gives the coded size
    decode_indices(coded, listed, ints.dtype, rows.nnz)

    def round_trip() -> None:
        decode_indices(encode_indices(ints, listed), listed, ints.dtype, rows.nnz)

    seconds = min(timeit.repeat(round_trip, repeat=repeat, number=1))
    return seconds / payload, (coded.nbytes + 8 + value_bytes * rows.nnz) / payload
