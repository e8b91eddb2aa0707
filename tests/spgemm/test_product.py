"""The local SpGEMM product (spgemm/product.py over kernels/sparse_product.py): the same matrix as GraphBLAS's ``mxm``,
entry for entry (pattern, explicit zeros, values), for every semiring the kernel runs, on hand-made products with
known answers and fresh random ones (hypersparse, rectangular, empty, A x A), while C's arrays grow; the inputs are
left as they were; masks, user semirings and more than one thread go to GraphBLAS."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire._lib.heap import small_pages
from sparsewire.kernels.sparse_product import product_flops
from sparsewire.spgemm import product as product_module
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import to_graphblas, to_scipy
from sparsewire.spgemm.product import kernel_runs, local_multiply, multiply_into
from sparsewire.spgemm.semirings import SEMIRINGS, get_semiring, user_semiring


@pytest.fixture(autouse=True)
def _one_graphblas_thread():
    """The kernel runs where GraphBLAS would run one thread (a rank of a node whose cores its ranks share)."""
    threads = gb.ss.config["nthreads"]
    gb.ss.config["nthreads"] = 1
    yield
    gb.ss.config["nthreads"] = threads


def integer_matrix(rng, shape, density, low=-9, high=10):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(low, high, matrix.nnz).astype(np.float64)
    return sp.csr_array(matrix)


def same_matrix(got: gb.Matrix, want: gb.Matrix) -> None:
    got_csr, want_csr = to_scipy(got), to_scipy(want)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got_csr.indptr, want_csr.indptr)
    np.testing.assert_array_equal(got_csr.indices, want_csr.indices)
    np.testing.assert_array_equal(got_csr.data, want_csr.data)


def check_against_graphblas(a: sp.sparray, b: sp.sparray, name: str) -> None:
    semiring = get_semiring(name)
    left, right = to_graphblas(a, semiring.dtype), to_graphblas(b, semiring.dtype)
    before = (to_scipy(left), to_scipy(right))
    same_matrix(local_multiply(left, right, semiring.operator), left.mxm(right, semiring.operator).new())
    for kept, now in zip(before, (left, right)):  # the inputs went back as they were
        now = to_scipy(now)
        for field in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(now, field), getattr(kept, field))


def test_every_named_semiring_runs_in_the_kernel_on_one_thread():
    assert all(kernel_runs(get_semiring(name).operator) for name in SEMIRINGS)
    gb.ss.config["nthreads"] = 2
    assert not any(kernel_runs(get_semiring(name).operator) for name in SEMIRINGS)


def test_hand_made_products():
    a = sp.csr_array(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 4.0]]))
    b = sp.csr_array(np.array([[0.0, 5.0], [6.0, 0.0], [7.0, 8.0]]))
    cases = {
        "plus_times": [[12.0, 5.0], [None, None], [28.0, 47.0]],
        "min_plus": [[8.0, 6.0], [None, None], [11.0, 8.0]],
        "max_times": [[12.0, 5.0], [None, None], [28.0, 32.0]],
        "plus_pair": [[1, 1], [None, None], [1, 2]],
    }
    for name, rows in cases.items():
        semiring = get_semiring(name)
        got = to_scipy(local_multiply(to_graphblas(a, semiring.dtype), to_graphblas(b, semiring.dtype), semiring.operator))
        want = [[np.nan if value is None else value for value in row] for row in rows]
        dense = np.full((3, 2), np.nan)
        rows_of, cols_of = np.repeat(np.arange(3), np.diff(got.indptr)), got.indices
        dense[rows_of, cols_of] = got.data
        np.testing.assert_array_equal(dense, np.array(want, float), err_msg=name)


def test_a_product_that_sums_to_zero_is_stored():
    a = sp.csr_array(np.array([[1.0, -1.0]]))
    b = sp.csr_array(np.array([[2.0], [2.0]]))
    semiring = get_semiring("plus_times")
    got = local_multiply(to_graphblas(a, np.float64), to_graphblas(b, np.float64), semiring.operator)
    assert got.nvals == 1 and got[0, 0].new().value == 0.0


@pytest.mark.parametrize("name", SEMIRINGS)
def test_random_products_equal_graphblas(rng, name):
    for _ in range(12):
        m, k, n = (int(x) for x in rng.integers(1, 90, 3))
        a = integer_matrix(rng, (m, k), rng.uniform(0, 0.25))
        b = integer_matrix(rng, (k, n), rng.uniform(0, 0.25))
        check_against_graphblas(a, b, name)
    check_against_graphblas(integer_matrix(rng, (40, 30), 0.2), integer_matrix(rng, (30, 50), 0.2), "plus.minus")


def test_hypersparse_and_empty_operands(rng):
    a = sp.lil_array((5000, 300))
    for row in rng.choice(5000, 7, replace=False):
        a[row, rng.integers(0, 300, 3)] = rng.integers(1, 10, 3)
    b = integer_matrix(rng, (300, 4000), 0.01)
    for name in ("plus_times", "min_plus"):
        check_against_graphblas(sp.csr_array(a), b, name)
        check_against_graphblas(sp.csr_array((5000, 300)), b, name)
        check_against_graphblas(sp.csr_array(a), sp.csr_array((300, 4000)), name)
        # Both hold entries, but no column of A meets a row of B that holds one: C is empty.
        misses = sp.csr_array((np.ones(3), ([0, 1, 2], [0, 0, 0])), shape=(3, 2))
        check_against_graphblas(misses, sp.csr_array((np.ones(2), ([1, 1], [0, 1])), shape=(2, 2)), name)


def test_a_times_a_reads_one_matrix_twice(rng):
    a = integer_matrix(rng, (200, 200), 0.05)
    semiring = get_semiring("plus_times")
    left = to_graphblas(a, np.float64)
    same_matrix(local_multiply(left, left, semiring.operator), left.mxm(left, semiring.operator).new())
    assert to_scipy(left).nnz == a.nnz


def test_infinities_follow_graphblas(rng):
    # Positive numbers and +inf: no term is NaN (inf - inf, 0 x inf), where fmin and GraphBLAS part ways.
    a = integer_matrix(rng, (60, 50), 0.2, low=1)
    b = integer_matrix(rng, (50, 70), 0.2, low=1)
    a.data[rng.random(a.nnz) < 0.2] = np.inf
    b.data[rng.random(b.nnz) < 0.2] = np.inf
    for name in ("plus_times", "min_plus", "max_plus", "min_times", "plus_min"):
        check_against_graphblas(a, b, name)


def test_a_nan_term_loses_to_a_number():
    # min and max fold the terms with fmin/fmax: an entry is NaN only when every term is. (GraphBLAS agrees where one
    # term is NaN or some term is a number; where two or more terms are all NaN it gives the identity instead.)
    semiring = get_semiring("min_plus")
    a = sp.csr_array((np.array([np.nan, 1.0, np.nan, np.nan, np.nan]), ([0, 0, 1, 2, 2], [0, 1, 0, 0, 1])), shape=(3, 2))
    b = sp.csr_array((np.array([1.0, 5.0]), ([0, 1], [0, 0])), shape=(2, 1))
    got = to_scipy(local_multiply(to_graphblas(a, np.float64), to_graphblas(b, np.float64), semiring.operator))
    np.testing.assert_array_equal(got.indptr, [0, 1, 2, 3])
    assert got.data[0] == 6.0 and np.isnan(got.data[1]) and np.isnan(got.data[2])


def test_c_arrays_grow_past_their_start(rng, monkeypatch):
    # An outer product: n + n entries in, n^2 out, far past the start of twice the inputs.
    monkeypatch.setattr(product_module, "_START_ENTRIES", 1)
    column = sp.csr_array(rng.integers(1, 10, (300, 1)).astype(np.float64))
    row = sp.csr_array(rng.integers(1, 10, (1, 300)).astype(np.float64))
    check_against_graphblas(column, row, "plus_times")
    both = sp.csr_array(sp.vstack([integer_matrix(rng, (200, 1), 1.0), integer_matrix(rng, (400, 1), 0.1)]))
    check_against_graphblas(both, integer_matrix(rng, (1, 500), 0.9), "min_plus")


def test_on_two_threads_graphblas_runs(rng, monkeypatch):
    def not_here(*args):
        raise AssertionError("the kernel ran on two threads")

    monkeypatch.setattr(product_module, "product_rows", not_here)
    gb.ss.config["nthreads"] = 2
    a = integer_matrix(rng, (400, 300), 0.03)
    b = integer_matrix(rng, (300, 350), 0.03)
    for name in ("plus_times", "min_plus"):
        check_against_graphblas(a, b, name)


def test_flops_per_row(rng):
    a = integer_matrix(rng, (300, 200), 0.05)
    b = integer_matrix(rng, (200, 100), 0.05)
    flops = product_flops(a.indptr, a.indices, b.indptr)
    per_row = [np.diff(b.indptr)[a.indices[a.indptr[i] : a.indptr[i + 1]]].sum() for i in range(300)]
    np.testing.assert_array_equal(np.diff(flops), per_row)
    assert flops[0] == 0


def test_masks_and_user_semirings_go_to_graphblas(rng):
    a = integer_matrix(rng, (80, 80), 0.1)
    mask = to_graphblas(integer_matrix(rng, (80, 80), 0.2), np.bool_)
    semiring = get_semiring("plus_times")
    left = to_graphblas(a, np.float64)
    assert not kernel_runs(semiring.operator, mask.S)
    same_matrix(local_multiply(left, left, semiring.operator, mask.S), left.mxm(left, semiring.operator).new(mask=mask.S))
    assert kernel_runs(get_semiring("plus.minus").operator)  # a pair of built-in operators
    compiled = user_semiring("ten_a_minus_b", "plus", lambda x, y: 10 * x - y)
    assert not kernel_runs(compiled.operator)
    same_matrix(local_multiply(left, left, compiled.operator), left.mxm(left, compiled.operator).new())
    result = left.dup()
    multiply_into(result, left, left, semiring.operator, semiring.accumulate)
    want = left.dup()
    want(accum=semiring.accumulate) << left.mxm(left, semiring.operator)
    same_matrix(result, want)


def test_small_pages_restores_numpy_setting():
    switch = np._core.multiarray._set_madvise_hugepage
    was = switch(True)
    try:
        with small_pages():
            assert np._core.multiarray._get_madvise_hugepage() is False
        assert np._core.multiarray._get_madvise_hugepage() is True
    finally:
        switch(was)
