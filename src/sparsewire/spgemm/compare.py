"""Checking a SpGEMM result: the reference product over a semiring (SciPy on the global operands,
or the terms of every product for semirings SciPy lacks) and the comparison of a result with it,
exact where the semiring's arithmetic is, else within :mod:`sparsewire._lib.tolerance`'s bound."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.tolerance import allowed_error, within
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import to_graphblas, to_scipy
from sparsewire.spgemm.semirings import Semiring

__all__ = ["reference_product", "compare_exactly", "compare_products", "product_terms"]


def compare_exactly(result: sp.csr_array, reference: sp.csr_array) -> dict:
    """Not collective. Compare two sparse matrices entry by entry: the same stored pattern and equal values."""
    return _compare(result, reference, lambda ours, wanted: ours.data == wanted.data, exact=True)


def compare_products(
    result: sp.csr_array,
    reference: sp.csr_array,
    a: sp.sparray,
    b: sp.sparray,
    semiring: Semiring,
    codec: tuple[str, int] | None = None,
) -> dict:
    """Not collective. Compare a distributed ``A (+.x) B`` with the single-process reference: the same stored
    pattern, and values under the one rule of :mod:`sparsewire._lib.tolerance`:

    * ``any`` monoid: every value must be one of its terms ``A(i, k) (x) B(k, j)`` (any one is
      right, so equality with the reference's pick would be a false alarm);
    * ``plus`` over non-integer floats: ``|ours - ref| <= (gamma_{m+2} + gamma_m) sum_k |term_k|``
      with m the number of terms (another summation order is not an error);
    * ``times`` over non-integer floats: the same with ``|ref|`` as the scale (a product of m
      factors is exact to ``gamma_m`` relative);
    * otherwise (min, max, lor; integer values) exactly: those monoids only select or round nothing.

    ``codec``: (``bf16``, passes) when the values crossed at most that many bf16-coded messages (plus_times):
    the ``plus`` rule's bound plus :func:`~sparsewire.wire.codecs.product_error_bound`'s, for integer values too.
    """
    want = sp.csr_array(reference).data
    floats = want.dtype.kind == "f" and not np.all(~np.isfinite(want) | (want == np.round(want)))
    if semiring.add == "any":
        return _compare_membership(result, reference, a, b, semiring)
    coded = codec is not None and codec[1] > 0
    if semiring.add not in ("plus", "times") or not (floats or coded):
        return compare_exactly(result, reference)
    rows, cols, terms = product_terms(a, b, semiring)
    shape = (a.shape[0], b.shape[1])
    count = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=shape)
    magnitude = sp.csr_array((np.abs(terms.astype(np.float64)), (rows, cols)), shape=shape)
    for matrix in (count, magnitude):
        matrix.sum_duplicates()
        matrix.sort_indices()
    # count and magnitude have the reference's pattern (an entry exists iff it has a term).

    extra = 0.0
    if coded:  # the bf16 bound: (|A| |B|)_ij (the magnitude) and sum_k |a_ik| (operands) over the same terms
        from sparsewire.wire.codecs import product_error_bound

        a_coo = sp.csr_array(a).tocoo()  # (in product_terms' order: one term per (A entry, B row entry))
        per_entry = np.diff(sp.csr_array(b).indptr)[a_coo.col]
        operands = sp.csr_array((np.repeat(np.abs(a_coo.data.astype(np.float64)), per_entry), (rows, cols)), shape=shape)
        operands.sum_duplicates()
        operands.sort_indices()
        name, passes = codec
        extra = product_error_bound(name, passes, magnitude.data, magnitude.data, operands.data, count.data)

    def close(ours, wanted):
        if count.nnz != wanted.nnz:
            return np.zeros(wanted.nnz, bool)
        scale = magnitude.data if semiring.add == "plus" else np.abs(wanted.data)
        return within(ours.data, wanted.data, allowed_error(scale, count.data, np.float64) + extra)

    return _compare(result, reference, close, exact=False)


def _compare(result: sp.csr_array, reference: sp.csr_array, equal, exact: bool) -> dict:
    """Both in canonical CSR; the same pattern, then ``equal(result, reference)`` per stored entry."""
    result, reference = sp.csr_array(result), sp.csr_array(reference)
    result.sort_indices()
    reference.sort_indices()
    same_pattern = (
        result.shape == reference.shape
        and np.array_equal(result.indptr, reference.indptr)
        and np.array_equal(result.indices, reference.indices)
    )
    if not same_pattern:
        return {"check_passed": False, "pattern_equal": False, "mismatched_values": None}
    bad = ~np.asarray(equal(result, reference), bool)
    return {"check_passed": not bad.any(), "pattern_equal": True, "mismatched_values": int(bad.sum()), "exact": exact}


def product_terms(a: sp.sparray, b: sp.sparray, semiring: Semiring) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Not collective. Every term ``A(i, k) (x) B(k, j)`` of ``A (+.x) B`` as (i, j, value) arrays, the values
    computed by the semiring's own multiplication (GraphBLAS, elementwise): one per flop, so
    for checks, not for speed."""
    a, b = sp.csr_array(a), sp.csr_array(b)
    a_coo = sp.coo_array(a)
    per_entry = np.diff(b.indptr)[a_coo.col]
    total = int(per_entry.sum())
    rows = np.repeat(a_coo.row.astype(np.int64), per_entry)
    first = np.repeat(b.indptr[a_coo.col].astype(np.int64), per_entry)
    positions = first + np.arange(total) - np.repeat(np.cumsum(per_entry) - per_entry, per_entry)
    cols = b.indices[positions].astype(np.int64)
    if total == 0:
        return rows, cols, np.zeros(0, semiring.dtype)
    index = np.arange(total)
    left = gb.Vector.from_coo(index, np.repeat(a_coo.data, per_entry).astype(semiring.dtype), size=total)
    right = gb.Vector.from_coo(index, b.data[positions].astype(semiring.dtype), size=total)
    _, values = left.ewise_mult(right, semiring.operator.binaryop).new().to_coo()
    return rows, cols, values


def _compare_membership(result: sp.csr_array, reference: sp.csr_array, a, b, semiring: Semiring) -> dict:
    """The ``any`` monoid: the pattern of the reference, and each value one of its terms."""

    def keyed(i, j, values):
        # Rows (i, j, value bits); -0.0 and 0.0 are the same value.
        values = np.asarray(values, np.float64) + 0.0
        return np.stack([np.asarray(i, np.int64), np.asarray(j, np.int64), values.view(np.int64)], axis=1)

    def members(ours, wanted):
        known = np.unique(keyed(*product_terms(a, b, semiring)), axis=0)
        mine = keyed(np.repeat(np.arange(ours.shape[0]), np.diff(ours.indptr)), ours.indices, ours.data)
        # Each of ours is a member when its (i, j, value) occurs among the terms too.
        _, inverse, counts = np.unique(np.vstack([known, mine]), axis=0, return_inverse=True, return_counts=True)
        return counts[inverse.ravel()[known.shape[0] :]] >= 2

    return _compare(result, reference, members, exact=False)


def reference_product(a: sp.sparray, b: sp.sparray, semiring: Semiring, mask: sp.sparray | None = None) -> sp.csr_array:
    """Not collective. Single-process ``A (+.x) B`` (masked by the pattern of ``mask``) with SuiteSparse:GraphBLAS."""
    left, right = to_graphblas(a, semiring.dtype), to_graphblas(b, semiring.dtype)
    if mask is None:
        return to_scipy(left.mxm(right, semiring.operator).new())
    return to_scipy(left.mxm(right, semiring.operator).new(mask=to_graphblas(mask, np.bool_).S))
