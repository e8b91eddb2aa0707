"""Binary packing of non-negative 64-bit integers (Lemire and Boytsov's scheme, the layout of SIMD-BP128 without
the SIMD): in blocks of :data:`BLOCK` values, each block at the bit width of its largest value, so small
values take few bits and one large value costs only its own block. Lossless, bit for bit.

Layout of a packed message (bytes): the value count (int64), one width byte per block (padded to 8), the
packed bits as little-endian 64-bit words (one spare word, for a value that straddles the last).

:func:`pack_words` codes any int64 array by first replacing each value by the zigzag of its difference to the
previous one (``(d << 1) ^ (d >> 63)``, wrapping: small steps either way become small values), which suits
arrays of sorted or repeated fields, as the planner's setup boxes are; the SpGEMM messages' integers use
their own row-aware differences (:mod:`sparsewire.spgemm.index_coding`) and :func:`pack` directly.
"""

from __future__ import annotations

import functools

import numpy as np

from sparsewire.errors import PlanMismatchError

__all__ = ["BLOCK", "pack", "unpack", "pack_words", "unpack_words"]

#: Values per bit width.
BLOCK = 128


@functools.cache
def _kernels():
    from sparsewire._lib.jit import njit

    return tuple(njit(nogil=True, cache=True)(kernel) for kernel in (_widths, _pack, _unpack, _zigzag_steps, _undo_zigzag))


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


def _zigzag_steps(words, out):
    previous = np.int64(0)
    for i in range(words.shape[0]):
        step = words[i] - previous  # (wraps: the int64 difference of any two words is exact modulo 2^64)
        previous = words[i]
        out[i] = np.uint64((step << np.int64(1)) ^ (step >> np.int64(63)))


def _undo_zigzag(values, out):
    previous = np.int64(0)
    for i in range(values.shape[0]):
        value = values[i]
        step = np.int64(value >> np.uint64(1)) ^ -np.int64(value & np.uint64(1))
        previous += step
        out[i] = previous


def _pad8(size: int) -> int:
    return (size + 7) // 8 * 8


def pack(values: np.ndarray) -> np.ndarray:
    """Not collective. The packed bytes (uint8, the module's layout) of ``values`` (uint64)."""
    widths_kernel, pack_kernel, *_ = _kernels()
    values = np.ascontiguousarray(values, np.uint64)
    widths = np.zeros(-(-values.size // BLOCK), np.uint8)
    total_bits = widths_kernel(values, widths)
    head = 8 + _pad8(widths.size)
    message = np.zeros(head + 8 * (-(-total_bits // 64) + 1), np.uint8)
    message[:8].view(np.int64)[0] = values.size
    message[8 : 8 + widths.size] = widths
    pack_kernel(values, widths, message[head:].view(np.uint64))
    return message


def unpack(message: np.ndarray) -> np.ndarray:
    """Not collective. The uint64 values of a packed ``message`` (uint8); PlanMismatchError where its sizes do not
    hold together (a message cut short or not packed)."""
    message = np.ascontiguousarray(message, np.uint8)
    count = int(message[:8].view(np.int64)[0]) if message.size >= 8 else -1
    blocks = -(-count // BLOCK)
    head = 8 + _pad8(blocks)
    if count < 0 or message.size < head or message.size % 8:
        raise PlanMismatchError(f"a packed message of {message.size} bytes does not hold its header (a coding bug)")
    widths = np.ascontiguousarray(message[8 : 8 + blocks])
    bits = int((widths.astype(np.int64) * np.diff(np.minimum(np.arange(blocks + 1) * BLOCK, count))).sum())
    if message.size < head + 8 * (-(-bits // 64) + 1) or widths.max(initial=0) > 64:
        raise PlanMismatchError(f"a packed message of {message.size} bytes is shorter than its {count} values need")
    values = np.empty(count, np.uint64)
    _kernels()[2](message[head:].view(np.uint64), widths, values)
    return values


def pack_words(words: np.ndarray) -> np.ndarray:
    """Not collective. ``words`` (int64) packed as the zigzag of each one's difference to the previous (module
    docstring): lossless for any int64 values, the float64 bits of values included."""
    words = np.ascontiguousarray(words, np.int64)
    steps = np.empty(words.size, np.uint64)
    _kernels()[3](words, steps)
    return pack(steps)


def unpack_words(message: np.ndarray) -> np.ndarray:
    """Not collective. The int64 words of a :func:`pack_words` message, bit for bit."""
    steps = unpack(message)
    words = np.empty(steps.size, np.int64)
    _kernels()[4](steps, words)
    return words
