"""Sparse x sparse over a semiring on raw CSR arrays, Gustavson's row-by-row product, sorted CSR out, in one pass.

Row i of C is ``C(i, :) = (+)_k A(i, k) (x) B(k, :)`` (Gustavson 1978; semiring SpGEMM paper sec. 2.2). Each
row is gathered into a dense accumulator of C's width; a bitmap (one bit per column: 16 KiB for 131,072
columns, in the first-level cache) says which columns the row has touched. The row is then written in
column order, whichever way is cheaper:

* a row dense in its span (more than 32 columns, and at most 4 bitmap words per column) is read off the
  bitmap word by word, lowest bit first (a de Bruijn multiply finds the bit): the span's words plus one
  step per column, where a sort costs ``n log n`` unpredictable comparisons (R-MAT's heavy rows);
* a row of at most 32 columns is sorted by insertion, any other by NumPy's sort.

One pass: no symbolic pass counts C first. The caller's arrays for C hold what they hold; the kernel stops
at the first row that does not fit and the caller grows them (:mod:`sparsewire.spgemm.product`). What was
tried beside it is in docs/design-decisions.md, "The local SpGEMM kernel".

``min``/``max`` fold a row's terms with ``fmin``/``fmax`` (a NaN term loses to a number; docs/spgemm.md says
where GraphBLAS differs).
"""

from __future__ import annotations

import numpy as np

from sparsewire._lib.jit import njit

__all__ = ["ADD", "MULTIPLY", "product_flops", "product_rows", "scratch"]

#: The additive monoids the kernel has, by GraphBLAS name.
ADD = {"plus": 0, "min": 1, "max": 2, "lor": 3, "any": 4, "times": 5}
#: The multiplications the kernel has, by GraphBLAS name.
MULTIPLY = {"times": 0, "plus": 1, "minus": 2, "min": 3, "max": 4, "first": 5, "second": 6, "pair": 7, "land": 8}

_DEBRUIJN = 0x03F79D71B4CB0A89


def _debruijn_table() -> np.ndarray:
    table = np.zeros(64, np.int64)
    for bit in range(64):
        table[((1 << bit) * _DEBRUIJN & 0xFFFFFFFFFFFFFFFF) >> 58] = bit
    return table


_LOWEST_BIT = _debruijn_table()


@njit(nogil=True, cache=True, inline="always")
def _add(code, x, y):
    if code == 0:
        return x + y
    if code == 1:
        return y if (x != x or y < x) else x
    if code == 2:
        return y if (x != x or y > x) else x
    if code == 3:
        return x or y
    if code == 4:
        return x
    return x * y


@njit(nogil=True, cache=True, inline="always")
def _multiply(code, a, b, one):
    if code == 0:
        return a * b
    if code == 1:
        return a + b
    if code == 2:
        return a - b
    if code == 3:
        return b if (a != a or b < a) else a
    if code == 4:
        return b if (a != a or b > a) else a
    if code == 5:
        return a
    if code == 6:
        return b
    if code == 7:
        return one
    return a and b


@njit(nogil=True, cache=True)
def product_flops(a_indptr, a_indices, b_indptr):
    """Not collective. Prefix sums of the multiplications each row of A x B takes: ``flops[i + 1] - flops[i] =
    sum over A(i, k) of nnz(B(k, :))``. O(nnz(A))."""
    rows = a_indptr.size - 1
    flops = np.zeros(rows + 1, np.int64)
    for i in range(rows):
        total = 0
        for p in range(np.int64(a_indptr[i]), np.int64(a_indptr[i + 1])):
            k = np.int64(a_indices[p])
            total += np.int64(b_indptr[k + 1]) - np.int64(b_indptr[k])
        flops[i + 1] = flops[i] + total
    return flops


def scratch(ncols: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Not collective. What one thread of :func:`product_rows` works in: the accumulator, the bitmap (zeroed: the kernel
    leaves it zeroed) and the row's touched columns."""
    return np.empty(ncols, dtype), np.zeros((ncols + 63) // 64, np.uint64), np.empty(ncols, np.int64)


@njit(nogil=True, cache=True)
def product_rows(
    a_indptr, a_indices, a_values, b_indptr, b_indices, b_values, row_start, row_stop, add, multiply,
    accumulator, bits, touched, indices, values, n, counts,
):  # fmt: skip
    """Not collective. Rows [row_start, row_stop) of A x B (A's rows as its ``a_indptr`` lists them) over the
    semiring (``add``, ``multiply``: codes of :data:`ADD` and :data:`MULTIPLY`), C's values in ``values``'
    type, written from entry ``n`` of ``indices`` and ``values``, each row's columns ascending, and
    ``counts[i - row_start]`` its entries. Stops before the first row that would not fit: returns
    ``(next row, entries written)``, so the caller grows the arrays and calls again from that row.
    ``accumulator``, ``bits``, ``touched``: :func:`scratch`'s. Releases the GIL.

    The operators are run-time codes: a copy with them fixed measured no faster on R-MAT (the branch
    is the same every time, and predicted)."""
    one = np.ones(1, values.dtype)[0]
    lowest = _LOWEST_BIT
    capacity = indices.size
    unit = np.uint64(1)
    for i in range(row_start, row_stop):
        count = 0
        low = accumulator.size
        high = -1
        for p in range(np.int64(a_indptr[i]), np.int64(a_indptr[i + 1])):
            k = np.int64(a_indices[p])
            a = a_values[p]
            for q in range(np.int64(b_indptr[k]), np.int64(b_indptr[k + 1])):
                j = np.int64(b_indices[q])
                x = _multiply(multiply, a, b_values[q], one)
                word = j >> 6
                bit = unit << np.uint64(j & 63)
                if bits[word] & bit:
                    accumulator[j] = _add(add, accumulator[j], x)
                else:
                    bits[word] |= bit
                    accumulator[j] = x
                    touched[count] = j
                    count += 1
                    low = min(low, j)
                    high = max(high, j)
        if n + count > capacity:  # the row does not fit: clear its marks and hand back
            for m in range(count):
                bits[touched[m] >> 6] = np.uint64(0)
            return i, n
        if count > 32 and (high >> 6) - (low >> 6) + 1 <= 4 * count:
            m = n
            for word in range(low >> 6, (high >> 6) + 1):
                pending = bits[word]
                bits[word] = np.uint64(0)
                while pending:
                    lowest_bit = pending & (~pending + unit)
                    j = (word << 6) + lowest[(lowest_bit * np.uint64(_DEBRUIJN)) >> np.uint64(58)]
                    indices[m] = j
                    values[m] = accumulator[j]
                    m += 1
                    pending ^= lowest_bit
        else:
            if count <= 32:
                for m in range(1, count):
                    column = touched[m]
                    r = m - 1
                    while r >= 0 and touched[r] > column:
                        touched[r + 1] = touched[r]
                        r -= 1
                    touched[r + 1] = column
            else:
                touched[:count].sort()
            for m in range(count):
                j = touched[m]
                bits[j >> 6] = np.uint64(0)
                indices[n + m] = j
                values[n + m] = accumulator[j]
        n += count
        counts[i - row_start] = count
    return row_stop, n
