"""The local product of every SpGEMM algorithm: ``A (+).(x) B`` on one rank, on python-graphblas matrices.

:func:`local_multiply` runs the built-in semirings without a mask in :mod:`sparsewire.kernels.sparse_product`
(Gustavson, one pass, sorted rows out) on the matrices' own arrays (``unpack``/``pack``, no copy), and
everything else (a mask, a user semiring, a type the kernel lacks) in SuiteSparse:GraphBLAS's ``mxm``.
Both give the same entries, explicit zeros included (docs/spgemm.md, "The local product"; measured side by side
by ``bench/peers/spgemm_kernel.py``).
"""

from __future__ import annotations

import numpy as np

from sparsewire._lib.heap import small_pages
from sparsewire.kernels.sparse_product import ADD, MULTIPLY, product_flops, product_rows, scratch
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import discard, full_values, packable

__all__ = ["local_multiply", "multiply_into", "kernel_runs"]

#: Entries C's arrays start at when the flops bound more (pages not yet written cost no memory).
_START_ENTRIES = 1 << 25


def kernel_runs(operator, mask=None) -> bool:
    """Not collective. Whether :func:`local_multiply` runs ``operator`` (a typed python-graphblas semiring) in the compiled
    kernel rather than GraphBLAS: on one thread (GraphBLAS's ``nthreads``: the ranks of a node share its cores), a
    built-in semiring the kernel has, on numbers (``lor``/``land`` on bool only), without a mask. On two threads
    a split of the kernel's rows measured 0.66-2.3x GraphBLAS's time, so GraphBLAS runs there."""
    if mask is not None or int(gb.ss.config["nthreads"]) != 1:
        return False
    if not isinstance(operator, gb.core.operator.semiring.TypedBuiltinSemiring):
        return False
    add, times = operator.monoid.name, operator.binaryop.name
    if add not in ADD or times not in MULTIPLY:
        return False
    dtype = np.dtype(operator.type.np_type)
    if dtype == np.bool_:
        return add in ("lor", "any") and times in ("land", "pair", "first", "second")
    return add != "lor" and times != "land" and dtype.kind in "iuf"


def local_multiply(a: gb.Matrix, b: gb.Matrix, operator, mask=None) -> gb.Matrix:
    """Not collective. ``C = A (+).(x) B`` over ``operator`` (a typed python-graphblas semiring), ``C<mask>`` with a
    mask (its structure): a new matrix, every product that was formed stored (explicit zeros too), as
    ``a.mxm(b, operator).new(mask=mask)``, which runs it where :func:`kernel_runs` says no."""
    if not kernel_runs(operator, mask):
        return a.mxm(b, operator).new(**({} if mask is None else {"mask": mask}))
    dtype = np.dtype(operator.type.np_type)
    if a.nvals == 0 or b.nvals == 0:
        return gb.Matrix(operator.type, a.nrows, b.ncols)
    b_arrays = b.ss.export("csr") if b is a else b.ss.unpack("csr")  # (A x A: read one, copy the other)
    a_arrays = a.ss.unpack("hypercsr")
    try:
        times = MULTIPLY[operator.binaryop.name]
        a_values = _values(a_arrays, dtype if times not in (MULTIPLY["second"], MULTIPLY["pair"]) else None)
        b_values = _values(b_arrays, dtype)
        rows, a_indptr, a_indices = a_arrays["rows"], a_arrays["indptr"], a_arrays["col_indices"]
        b_indptr, b_indices = b_arrays["indptr"], b_arrays["col_indices"]
        flops = product_flops(a_indptr, a_indices, b_indptr)
        listed = rows.size
        work = int(flops[-1])  # an upper bound on C's entries
        capacity = min(work, max(_START_ENTRIES, 2 * (a.nvals + b.nvals)))
        with small_pages():
            indices, values = np.empty(capacity, np.uint64), np.empty(capacity, dtype)
            counts = np.zeros(listed, np.int64)
            accumulator, bits, touched = scratch(b.ncols, dtype)
            row, n = 0, 0
            while True:
                row, n = product_rows(
                    a_indptr, a_indices, a_values, b_indptr, b_indices, b_values, row, listed, ADD[operator.monoid.name],
                    times, accumulator, bits, touched, indices, values, n, counts[row:],
                )  # fmt: skip
                if row == listed:
                    break
                # Grow to what the flops done so far forecast (at least double, at most the flops), in place:
                # realloc remaps large buffers rather than copying them.
                forecast = int(1.1 * n * work / max(int(flops[row]), 1))
                capacity = min(work, max(2 * capacity, forecast, n + int(flops[row + 1] - flops[row])))
                indices.resize(capacity, refcheck=False)
                values.resize(capacity, refcheck=False)
    finally:
        a.ss.pack_hypercsr(**packable(a_arrays), take_ownership=True)
        if b is not a:
            b.ss.pack_csr(**packable(b_arrays), take_ownership=True)
    if n == 0:  # (GraphBLAS refuses empty arrays)
        return gb.Matrix(operator.type, a.nrows, b.ncols)
    indices.resize(n, refcheck=False)  # (the trimmed arrays own their memory: GraphBLAS takes them)
    values.resize(n, refcheck=False)
    kept = counts > 0
    indptr = np.zeros(int(kept.sum()) + 1, np.uint64)
    np.cumsum(counts[kept], out=indptr[1:])
    return gb.Matrix.ss.import_hypercsr(
        nrows=a.nrows,
        ncols=b.ncols,
        rows=np.ascontiguousarray(rows[kept], np.uint64),
        indptr=indptr,
        col_indices=indices,
        values=values,
        nvec=indptr.size - 1,
        sorted_cols=True,
        take_ownership=True,
    )


def multiply_into(result: gb.Matrix, a: gb.Matrix, b: gb.Matrix, operator, accumulate, mask=None) -> None:
    """Not collective. ``C (+)= A (+).(x) B`` in place (``C<mask>`` with a mask): ``accumulate`` is the monoid's binary
    operator; a product the kernel runs is formed first and then added (GraphBLAS's ``eWiseAdd``)."""
    if kernel_runs(operator, mask):
        product = local_multiply(a, b, operator)
        result(accum=accumulate) << product
        discard(product)
    else:
        result(accum=accumulate, **({} if mask is None else {"mask": mask})) << a.mxm(b, operator)


def _values(arrays: dict, dtype: np.dtype | None) -> np.ndarray:
    """The stored values, one per entry, in ``dtype`` (None: as stored)."""
    values = full_values(arrays, int(arrays["indptr"][-1]))
    return values if dtype is None or values.dtype == dtype else values.astype(dtype)
