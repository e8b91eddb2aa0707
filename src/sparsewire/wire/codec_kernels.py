"""The payload codecs' loops (:mod:`sparsewire.wire.codecs`), compiled by Numba at the first coded message:
one pass over a message's entries each way, no temporary arrays, no library call per entry: bf16 and
fp16 round from the float64 bits in integer arithmetic (fp16 decodes by a table of the 65536 bit
patterns; bf16 decodes as the top half of float32, in NumPy), int8 draws its rounding noise from
splitmix64 in the loop. Each function is plain Python on NumPy arrays and scalars,
so it also runs uncompiled (the tests compare both; uncompiled, ``math.ldexp`` raises where a value would
pass float64's range, and the compiled kernels give the infinity the callers test for)."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np

__all__ = ["compiled"]

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def bf16_encode(block, halves, full, wide, wide_bits):
    """Each entry of ``block`` rounded to the nearest bf16 value (ties to even) from its float64 bits, as bf16's
    bits (the top half of float32's) in ``halves`` (uint16); NaN and +-Inf kept, ``full[i]`` = 1 where row i holds
    an entry that would round past bf16's largest value. ``wide`` is a float64 row of k entries, ``wide_bits``
    its uint64 view."""
    rows, k = block.shape
    for i in range(rows):
        for j in range(k):
            wide[j] = np.float64(block[i, j])
        overflow = 0
        for j in range(k):
            d = wide_bits[j]
            sign = np.int64((d >> np.uint64(48)) & np.uint64(0x8000))
            biased = np.int64((d >> np.uint64(52)) & np.uint64(0x7FF))
            mantissa = np.int64(d & np.uint64(0xFFFFFFFFFFFFF))
            if biased == 0x7FF:
                q = 0x7FC0 if mantissa else 0x7F80  # NaN (quiet), +-Inf
            elif biased < 897:  # below bf16's smallest normal 2^-126: a multiple of 2^-133
                shift = 942 - biased  # 53-bit significand to units of 2^-133
                if biased == 0 or shift > 62:
                    q = 0  # under half of 2^-133 (float64 subnormals and zeros included)
                else:
                    significand = mantissa | (np.int64(1) << 52)
                    q = significand >> shift
                    rest, halfway = significand & ((np.int64(1) << shift) - 1), np.int64(1) << (shift - 1)
                    if rest > halfway or (rest == halfway and q & 1):
                        q += 1
            else:
                q = ((biased - 896) << 7) | (mantissa >> 45)  # exponent field and 7 mantissa bits
                rest, halfway = mantissa & ((np.int64(1) << 45) - 1), np.int64(1) << 44
                if rest > halfway or (rest == halfway and q & 1):
                    q += 1  # a carry out of the mantissa steps the exponent: still the right bits
                if q >= 0x7F80:  # past bf16's largest finite value (or its exponent's range)
                    overflow, q = 1, 0x7F80
            halves[i, j] = sign | q
        full[i] = overflow


def fp16_encode(block, halves, exponents, full, largest_allowed, scaled, scaled_bits):
    """Per row i: ``exponents[i] = s`` putting the row's largest magnitude in [2^14, 2^15), each entry times
    ``2^-s`` (exact) rounded to float16 (nearest, ties to even, from the float64 bits: no library call per
    entry) as its bits in ``halves`` (uint16); ``full[i]`` = 1 where the row holds NaN or Inf or a decoded
    entry would exceed ``largest_allowed``. ``scaled`` is a float64 row of k entries, ``scaled_bits`` its
    uint64 view."""
    rows, k = block.shape
    for i in range(rows):
        largest, finite = 0.0, True
        for j in range(k):
            x = np.float64(block[i, j])
            if x != x or math.isinf(x):
                finite = False
            elif abs(x) > largest:
                largest = abs(x)
        if not finite:
            exponents[i], full[i] = 0, 1
            for j in range(k):
                halves[i, j] = 0
            continue
        s = math.frexp(largest)[1] - 15 if largest > 0 else 0
        exponents[i] = s
        scale = math.ldexp(1.0, -s) if -1022 <= -s <= 1023 else 0.0  # 0: scaled entry by entry
        for j in range(k):
            scaled[j] = np.float64(block[i, j]) * scale if scale != 0.0 else math.ldexp(np.float64(block[i, j]), -s)
        top = 0
        for j in range(k):
            d = scaled_bits[j]
            sign = np.int64((d >> np.uint64(48)) & np.uint64(0x8000))
            biased = np.int64((d >> np.uint64(52)) & np.uint64(0x7FF))
            mantissa = np.int64(d & np.uint64(0xFFFFFFFFFFFFF))
            if biased < 1009:  # below float16's normal range (2^-14): a multiple of 2^-24
                shift = 1051 - biased  # 53-bit significand to units of 2^-24
                if biased == 0 or shift > 62:
                    q = 0  # under half of 2^-24 (float64 subnormals and zeros included)
                else:
                    significand = mantissa | (np.int64(1) << 52)
                    q = significand >> shift
                    rest, halfway = significand & ((np.int64(1) << shift) - 1), np.int64(1) << (shift - 1)
                    if rest > halfway or (rest == halfway and q & 1):
                        q += 1
            else:
                q = ((biased - 1008) << 10) | (mantissa >> 42)  # exponent field and 10 mantissa bits
                rest, halfway = mantissa & ((np.int64(1) << 42) - 1), np.int64(1) << 41
                if rest > halfway or (rest == halfway and q & 1):
                    q += 1  # a carry out of the mantissa steps the exponent: still the right bits
            top = max(top, q)
            halves[i, j] = sign | q
        # positive float16 bits order as their values: the largest decoded entry from the largest bits
        field = int(top >> 10)
        value = (top & 0x3FF) * 2.0**-24 if field == 0 else ((top & 0x3FF) | 0x400) * math.ldexp(1.0, field - 25)
        full[i] = 1 if math.ldexp(value, s) > largest_allowed else 0


def fp16_decode(halves, exponents, out, values):
    """``out[i, j] = half(halves[i, j]) 2^exponents[i]``, ``values`` the float64 value of every float16 bit
    pattern (a table of 65536; finite here: NaN and Inf rows go whole)."""
    rows, k = halves.shape
    for i in range(rows):
        s = int(exponents[i])
        scale = math.ldexp(1.0, s) if -1022 <= s <= 1023 else 0.0
        for j in range(k):
            value = values[halves[i, j]]
            out[i, j] = value * scale if scale != 0.0 else math.ldexp(value, s)


def int8_encode(block, codes, lo_step, full, single, seed):
    """Per row i: ``lo`` its minimum, ``step = (max - min) / 255`` rounded up to the data's dtype (``single``:
    float32), and each entry ``q = floor((x - lo) / step + u)`` clipped to [0, 255], ``u`` uniform in [0, 1)
    from splitmix64 seeded by ``seed``; ``lo`` and ``step`` into ``lo_step[i]``. ``full[i]`` = 1 (and lo =
    step = 0) where the row holds NaN or Inf or its range overflows."""
    rows, k = block.shape
    state = np.uint64(seed)
    for i in range(rows):
        lo, hi, finite = math.inf, -math.inf, True
        for j in range(k):
            x = np.float64(block[i, j])
            if x != x or math.isinf(x):
                finite = False
            else:
                lo, hi = min(lo, x), max(hi, x)
        if k == 0:
            lo = hi = 0.0
        exact = (hi - lo) / 255.0
        step = exact
        if single and finite:
            step = np.float64(np.float32(exact))
            if step < exact:  # up to the next float32: 255 steps still span the row
                step += math.ldexp(1.0, max(math.frexp(step)[1] - 24, -149))
            if step > 3.4028234663852886e38:
                finite = False
        if not finite or math.isinf(step):
            lo_step[i, 0], lo_step[i, 1], full[i] = 0.0, 0.0, 1
            for j in range(k):
                codes[i, j] = 0
            continue
        lo_step[i, 0], lo_step[i, 1], full[i] = lo, step, 0
        for j in range(k):
            if step > 0.0:  # u from splitmix64 (53 bits)
                state = (state + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
                z = ((state ^ (state >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
                z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
                u = np.float64((z ^ (z >> np.uint64(31))) >> np.uint64(11)) * 2.0**-53
                q = math.floor((np.float64(block[i, j]) - lo) / step + u)
                codes[i, j] = min(max(q, 0.0), 255.0)
            else:
                codes[i, j] = 0


def int8_decode(codes, lo_step, out):
    """``out[i, j] = lo_i + codes[i, j] step_i``, in float64, stored in ``out``'s dtype."""
    rows, k = codes.shape
    for i in range(rows):
        lo, step = np.float64(lo_step[i, 0]), np.float64(lo_step[i, 1])
        for j in range(k):
            out[i, j] = lo + np.float64(codes[i, j]) * step


@functools.cache
def compiled() -> SimpleNamespace:
    """The kernels compiled (Numba, ``nogil``, cached on disk); the options import the codecs without Numba."""
    from sparsewire._lib.jit import njit

    jit = njit(nogil=True, cache=True)
    kernels = (bf16_encode, fp16_encode, fp16_decode, int8_encode, int8_decode)
    return SimpleNamespace(**{function.__name__: jit(function) for function in kernels})
