"""Payload codecs of the wire path (issue 43): a message's rows sent in fewer bytes, each entry within a
stated error bound, decoded into the receive buffer before anything reads it.

``bf16`` (bfloat16: float32's 8-bit exponent, 8 significant bits): each finite entry is rounded to the
nearest bf16 value, ties to even, directly from the data's own precision (float64 data is not rounded
to float32 first, which would round twice). Per entry ``|decoded - x| <= max(2^-8 |x|, 2^-134)``:
half a unit in the last place of 8 significant bits where ``|x| >= 2^-126`` (bf16's smallest normal),
half the subnormal spacing 2^-133 below it. NaN stays NaN and +-Inf stays +-Inf. A row holding a
finite entry that would round past bf16's largest value (float64 data beyond about 3.39e38) is sent
at full width instead, so nothing overflows. ``none`` sends the rows as they are (bitwise).

A message on the wire, in bytes: ``rows`` and ``k`` (two int32, the sender's: the receiver counts the
payload from them, not from its own plan), one flag byte per row (1: sent at full width), padded to
8, the coded rows (``rows * k`` uint16, padded to 8), then the full-width rows in order, in the
data's dtype. So a message of float64 rows takes ``8 + pad8(rows) + pad8(2 rows k)`` bytes, about
a quarter of its payload, and at most :func:`max_message_bytes`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from sparsewire.errors import InputError

__all__ = ["CODECS", "max_message_bytes", "encode", "decode", "error_bound", "product_error_bound", "describe"]

#: The payload codecs, by name (``none``: the rows as they are).
CODECS = ("none", "bf16")
_HEADER = 8
_BF16_MAX = (2.0 - 2.0**-7) * 2.0**127
_SUBNORMAL_STEP = 2.0**-133


def describe(name: str, passes: int) -> str:
    """Not collective. The codec's error bound in words (``explain()``), and C's for a plan whose terms cross at most
    ``passes`` coded messages (:func:`product_error_bound`)."""
    if name == "bf16":
        return (
            "payloads bf16: each entry within max(2^-8 |x|, 2^-134) of its value (round to nearest, ties to even), NaN "
            f"and Inf kept, rows that would overflow sent at full width; so C_ij within ((1 + 2^-8)^{passes} - 1) "
            f"(|A| |B|)_ij + {passes} 2^-134 (sum_k |a_ik| + m_ij) of the uncompressed product"
        )
    return "payloads at full width (bitwise)"


def product_error_bound(name: str, passes: int, scale, operands, terms) -> np.ndarray:
    """Not collective. How far each entry of C may move when its terms cross at most ``passes`` coded messages (a B
    row, a partial sum, a relay each one; the plan's exchanges bound it): ``((1 + 2^-8)^passes - 1) scale +
    passes 2^-134 (operands + terms)``, with ``scale = (|A| |B|)_ij``, ``operands = sum_k |a_ik|`` (what multiplies
    a coded B entry's absolute error) and ``terms`` its nonzeros (a coded partial sum's). 0 for ``none``."""
    if name == "none":
        return np.zeros(np.broadcast(scale, operands, terms).shape)
    relative = (1.0 + 2.0**-8) ** passes - 1.0
    return relative * np.asarray(scale, np.float64) + passes * 2.0**-134 * (np.asarray(operands) + np.asarray(terms))


def _pad8(size: int) -> int:
    return (size + 7) // 8 * 8


def max_message_bytes(rows: int, k: int, itemsize: int) -> int:
    """Not collective. The most bytes a bf16 message of ``rows`` x ``k`` entries of ``itemsize`` bytes can take
    (every row at full width)."""
    return _HEADER + _pad8(rows) + _pad8(2 * rows * k) + rows * k * itemsize


@functools.cache
def _compiled():
    """The rounding kernel, compiled at the first message (the options import this module without Numba)."""
    from numba import njit

    return njit(nogil=True, cache=True)(_round_to_bf16)


def _round_to_bf16(block, rounded, full):
    """Each entry of ``block`` rounded to the nearest bf16 value (ties to even) into ``rounded`` (float32,
    exact there); ``full[i]`` = 1 where row i holds an entry that would overflow."""
    rows, k = block.shape
    for i in range(rows):
        overflow = 0
        for j in range(k):
            x = np.float64(block[i, j])
            if x != x or x == 0.0 or math.isinf(x):
                rounded[i, j] = x
                continue
            mantissa, exponent = math.frexp(x)  # x = mantissa 2^exponent, 0.5 <= |mantissa| < 1
            if exponent < -125:  # below bf16's smallest normal 2^-126: a multiple of the subnormal step
                y = np.rint(x / _SUBNORMAL_STEP) * _SUBNORMAL_STEP
            else:
                y = math.ldexp(np.rint(mantissa * 256.0), exponent - 8)
            if abs(y) > _BF16_MAX:
                overflow = 1
            rounded[i, j] = y
        full[i] = overflow


def encode(rows: np.ndarray, out: np.ndarray) -> int:
    """Not collective. Write the bf16 message of ``rows`` (C-contiguous, (n, k), float32 or float64) into ``out``
    (uint8, at least :func:`max_message_bytes`); returns its bytes."""
    n, k = rows.shape
    out[:_HEADER].view(np.int32)[:] = (n, k)
    flags = out[_HEADER : _HEADER + n]
    rounded = np.empty((n, k), np.float32)
    _compiled()(rows, rounded, flags)
    start = _HEADER + _pad8(n)
    coded = out[start : start + 2 * n * k].view(np.uint16).reshape(n, k)
    np.right_shift(rounded.view(np.uint32), 16, out=coded, casting="unsafe")
    end = start + _pad8(2 * n * k)
    wide = np.flatnonzero(flags)
    if len(wide):
        size = len(wide) * k * rows.itemsize
        out[end : end + size].view(rows.dtype).reshape(len(wide), k)[:] = rows[wide]
        end += size
    return end


def decode(message: np.ndarray, out: np.ndarray) -> tuple[int, int]:
    """Not collective. The rows of a bf16 ``message`` (uint8) written into ``out`` ((n, k), the data's dtype);
    returns the (rows, k) its sender wrote, checked against ``out``'s shape (InputError if they differ)."""
    n, k = (int(v) for v in message[:_HEADER].view(np.int32))
    if (n, k) != out.shape:
        raise InputError(f"a bf16 message holds {n} x {k} entries but its receive buffer is {out.shape[0]} x {out.shape[1]}")
    flags = message[_HEADER : _HEADER + n].view(bool)
    start = _HEADER + _pad8(n)
    coded = message[start : start + 2 * n * k].view(np.uint16).reshape(n, k)
    out[:] = (coded.astype(np.uint32) << 16).view(np.float32)
    wide = np.flatnonzero(flags)
    if len(wide):
        begin = start + _pad8(2 * n * k)
        out[wide] = message[begin : begin + len(wide) * k * out.itemsize].view(out.dtype).reshape(len(wide), k)
    return n, k


def error_bound(values: np.ndarray) -> np.ndarray:
    """Not collective. bf16's bound on ``|decoded - x|`` for each entry: ``max(2^-8 |x|, 2^-134)``, 0 for NaN and Inf
    (rows sent at full width have none; this bound covers them)."""
    magnitude = np.abs(np.asarray(values, np.float64))
    bound = np.maximum(magnitude * 2.0**-8, 2.0**-134)
    return np.where(np.isfinite(magnitude), bound, 0.0)
