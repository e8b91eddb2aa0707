"""The local CSR x dense kernel (exec/kernels.py): exact on integer data, the same bits with and
without B-row prefetching, on any number of threads, and row ranges that compose."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.exec import kernels


@pytest.fixture(autouse=True)
def _one_thread_afterwards():
    yield
    kernels.set_threads(1)


def _integer_matrix(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(-9, 10, matrix.nnz).astype(np.float64)
    return sp.csr_array(matrix)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [1, 3, 32])
def test_csr_product_exact_with_and_without_prefetch(k, dtype):
    rng = np.random.default_rng()
    matrix = _integer_matrix(rng, (300, 250), 0.05)
    x = rng.integers(-9, 10, (250, k)).astype(dtype)
    expected = (matrix @ x.astype(np.float64)).astype(dtype)
    for threads in (1, 2, 3):
        kernels.set_threads(threads)
        operand = kernels.CsrOperand.from_matrix(matrix, dtype, threads)
        results = []
        for prefetch in (False, True):
            out = np.full((300, k), np.nan, dtype)
            kernels.multiply(dataclasses.replace(operand, prefetch=prefetch), x, out)
            np.testing.assert_array_equal(out, expected)
            kernels.multiply(dataclasses.replace(operand, prefetch=prefetch), x, out, accumulate=True)
            np.testing.assert_array_equal(out, 2 * expected)
            results.append(out)
        assert results[0].tobytes() == results[1].tobytes()


def test_prefetch_leaves_random_products_bitwise_unchanged_and_row_ranges_compose():
    rng = np.random.default_rng()
    matrix = sp.csr_array(sp.random_array((500, 400), density=0.02, rng=rng, format="csr"))
    x = rng.standard_normal((400, 32))
    operand = kernels.CsrOperand.from_matrix(matrix, np.float64, 1)
    whole = np.empty((500, 32))
    kernels.multiply(operand, x, whole)
    np.testing.assert_allclose(whole, matrix @ x, rtol=1e-12, atol=1e-12)
    cut = int(rng.integers(1, 499))
    for prefetch in (False, True):
        pieces = np.empty((500, 32))
        flagged = dataclasses.replace(operand, prefetch=prefetch)
        kernels.multiply_rows(flagged, x, pieces, 0, cut)
        kernels.multiply_rows(flagged, x, pieces, cut, 500)
        assert pieces.tobytes() == whole.tobytes()


def test_prefetch_is_chosen_for_short_rows_only():
    rng = np.random.default_rng()
    short = sp.random_array((1000, 1000), density=4 / 1000, rng=rng, format="csr")
    long = sp.random_array((1000, 1000), density=40 / 1000, rng=rng, format="csr")
    assert kernels.CsrOperand.from_matrix(short, np.float64, 1).prefetch
    assert not kernels.CsrOperand.from_matrix(long, np.float64, 1).prefetch
    assert kernels.CsrOperand.from_matrix(sp.csr_array((0, 5)), np.float64, 1).prefetch
