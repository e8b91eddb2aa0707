"""Lossless coding of a sparse message's integers (issue 43): delta plus bit-packing, bit-exact round trip.

A message's integer array (:func:`~sparsewire.spgemm.local.pack_row_ranges`) is ``[rows (listed), lengths
(listed), columns (entries)]``, rows ascending and each row's columns ascending (GraphBLAS keeps them
sorted). Coded: the rows as differences to the previous row (the first to 0), the lengths as they are, each
row's first column as it is and the others as differences to the previous column, so every value is a small
non-negative integer; then in blocks of :data:`BLOCK` values, each block at the bit width of its largest
value (Lemire and Boytsov's binary packing, the scheme of SIMD-BP128 without the SIMD layout).

Layout (bytes): the value count (int64), one width byte per block (padded to 8), the packed bits as
little-endian 64-bit words. Halo id lists code to 0.17-0.29x of int32 and random CSR columns to about 0.5x
(``../shared/research/compressed-messages.md``); what a message takes is measured by MPI, not assumed.
"""

from __future__ import annotations

import functools

import numpy as np

from sparsewire.errors import PlanMismatchError

__all__ = ["BLOCK", "encode_indices", "decode_indices"]

#: Values per bit width.
BLOCK = 128


@functools.cache
def _kernels():
    from numba import njit

    return tuple(njit(nogil=True, cache=True)(kernel) for kernel in (_deltas, _widths, _pack, _unpack, _undo_deltas))


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


def _widths(values, widths):
    """Per block of BLOCK values the bits of its largest value (0 for an all-zero block); returns the total bits."""
    total = 0
    for block in range(widths.shape[0]):
        largest = np.uint64(0)
        stop = min(values.shape[0], (block + 1) * BLOCK)
        for i in range(block * BLOCK, stop):
            largest |= values[i]
        width = 0
        while largest:
            largest >>= np.uint64(1)
            width += 1
        widths[block] = width
        total += width * (stop - block * BLOCK)
    return total


def _pack(values, widths, words):
    bit = 0
    for block in range(widths.shape[0]):
        width = np.uint64(widths[block])
        if width == 0:
            continue
        for i in range(block * BLOCK, min(values.shape[0], (block + 1) * BLOCK)):
            word, offset = bit >> 6, np.uint64(bit & 63)
            words[word] |= values[i] << offset
            if offset + width > 64:
                words[word + 1] |= values[i] >> (np.uint64(64) - offset)
            bit += widths[block]


def _unpack(words, widths, values):
    bit = 0
    for block in range(widths.shape[0]):
        width = np.uint64(widths[block])
        stop = min(values.shape[0], (block + 1) * BLOCK)
        if width == 0:
            values[block * BLOCK : stop] = 0
            continue
        mask = np.uint64(0xFFFFFFFFFFFFFFFF) if width == 64 else (np.uint64(1) << width) - np.uint64(1)
        for i in range(block * BLOCK, stop):
            word, offset = bit >> 6, np.uint64(bit & 63)
            value = words[word] >> offset
            if offset + width > 64:
                value |= words[word + 1] << (np.uint64(64) - offset)
            values[i] = value & mask
            bit += widths[block]


def _pad8(size: int) -> int:
    return (size + 7) // 8 * 8


def encode_indices(ints: np.ndarray, listed: int) -> np.ndarray:
    """Not collective. The coded bytes (uint8) of a message's integer array ``ints`` with ``listed`` rows."""
    deltas_kernel, widths_kernel, pack, _, _ = _kernels()
    values = np.ascontiguousarray(ints)
    deltas = np.empty(values.size, np.uint64)
    deltas_kernel(values, listed, deltas)
    widths = np.zeros(-(-values.size // BLOCK), np.uint8)
    total_bits = widths_kernel(deltas, widths)
    head = 8 + _pad8(widths.size)
    message = np.zeros(head + 8 * (-(-total_bits // 64) + 1), np.uint8)  # one spare word for a straddling value
    message[:8].view(np.int64)[0] = values.size
    message[8 : 8 + widths.size] = widths
    pack(deltas, widths, message[head:].view(np.uint64))
    return message


def decode_indices(message: np.ndarray, listed: int, itype, entries: int) -> np.ndarray:
    """Not collective. The integer array (``itype``) of a coded ``message`` with ``listed`` rows and ``entries``
    columns (the message header's), bit for bit; PlanMismatchError where the coded sizes disagree with them."""
    count = int(message[:8].view(np.int64)[0])
    if count != 2 * listed + entries:
        raise PlanMismatchError(f"a coded index array holds {count} integers, its header says {2 * listed + entries}")
    blocks = -(-count // BLOCK)
    widths = np.ascontiguousarray(message[8 : 8 + blocks])
    head = 8 + _pad8(blocks)
    deltas = np.empty(count, np.uint64)
    *_, unpack, undo = _kernels()
    unpack(message[head:].view(np.uint64), widths, deltas)
    if int(deltas[listed : 2 * listed].sum()) != entries:  # the row lengths place the columns: checked before writing
        raise PlanMismatchError(f"a coded index array's row lengths add up to other than its {entries} entries")
    out = np.empty(count, itype)
    undo(deltas.view(np.int64), listed, out)
    return out
