"""The one tolerance rule of ``--check`` (sparsewire._lib.tolerance): no false alarm on results that
are right to roundoff (values near 1e12, sums of N(0, 1) terms that cancel, another pick of the
``any`` monoid), and a failure on a planted error just above roundoff. The commands' ``--check`` on such values
under mpiexec are collective cases (tests/mpi/test_spmm_command.py, tests/mpi/test_spgemm_command.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire._lib.tolerance import allowed_error, eigenvalues_allowed, gamma, within
from sparsewire.spgemm.compare import compare_products, reference_product
from sparsewire.spgemm.semirings import get_semiring


def test_gamma_and_allowed_error_by_hand():
    u = 2.0**-53
    assert gamma(2, np.float64) == pytest.approx(2 * u / (1 - 2 * u), rel=1e-15)
    assert gamma(0, np.float32) == 0.0
    # one term of scale 4 in float64: (gamma_3 + gamma_1) * 4
    assert allowed_error(4.0, 1, np.float64) == pytest.approx((3 * u + u) * 4, rel=1e-12)
    assert within([1.0, np.inf, np.nan], [1.0 + 1e-17, np.inf, np.nan], 1e-16).tolist() == [True, True, False]
    allowed = eigenvalues_allowed([10.0, 0.0], 50)
    assert allowed[0] == pytest.approx(1e-5 + allowed[1]) and 0 < allowed[1] < 1e-9


def _normal(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.standard_normal(matrix.nnz)
    return matrix


def test_plus_times_accepts_another_summation_order_and_refuses_a_planted_error(rng):
    a, b = _normal(rng, (60, 60), 0.2), _normal(rng, (60, 50), 0.2)
    semiring = get_semiring("plus_times")
    reference = reference_product(a, b, semiring)
    # Summed in reverse order of k: differs from GraphBLAS by roundoff only.
    reversed_order = sp.csr_array(a[:, ::-1] @ b[::-1, :])
    assert compare_products(reversed_order, reference, a, b, semiring)["check_passed"]
    for scale in (1e12, 1e-12):
        big_a = sp.csr_array(a * scale)
        assert compare_products(
            sp.csr_array(big_a[:, ::-1] @ b[::-1, :]), reference_product(big_a, b, semiring), big_a, b, semiring
        )["check_passed"]
    planted = reference.copy()
    planted.data[planted.data.size // 2] *= 1 + 1e-12
    outcome = compare_products(planted, reference, a, b, semiring)
    assert not outcome["check_passed"] and outcome["mismatched_values"] == 1


def test_a_sum_that_cancels_passes_in_either_order():
    """0.1 + 0.2 - 0.3 is 5.55e-17 summed left to right and 2.78e-17 summed from the right: both
    are right to roundoff (the old relative 1e-12 failed whichever differed from the reference)."""
    a = sp.csr_array(np.array([[0.1, 0.2, -0.3]]))
    b = sp.csr_array(np.ones((3, 1)))
    semiring = get_semiring("plus_times")
    reference = reference_product(a, b, semiring)
    for value in ((0.1 + 0.2) - 0.3, 0.1 + (0.2 - 0.3)):
        assert compare_products(sp.csr_array(np.array([[value]])), reference, a, b, semiring)["check_passed"]
    assert (0.1 + 0.2) - 0.3 != 0.1 + (0.2 - 0.3)  # so one of them differs from the reference
    assert not compare_products(sp.csr_array(np.array([[1e-15]])), reference, a, b, semiring)["check_passed"]


def test_any_monoid_is_checked_by_membership(rng):
    a, b = _normal(rng, (40, 40), 0.25), _normal(rng, (40, 30), 0.25)
    semiring = get_semiring("any.times")
    reference = reference_product(a, b, semiring)
    other_pick = reference_product(a, b, get_semiring("max.times"))  # another term, as right as any
    assert compare_products(other_pick, reference, a, b, semiring)["check_passed"]
    planted = other_pick.copy()
    planted.data[0] = 12345.0  # no term has this value
    assert compare_products(planted, reference, a, b, semiring)["mismatched_values"] == 1


def test_min_plus_is_compared_exactly(rng):
    a, b = _normal(rng, (30, 30), 0.2), _normal(rng, (30, 30), 0.2)
    semiring = get_semiring("min_plus")
    reference = reference_product(a, b, semiring)
    assert compare_products(reference.copy(), reference, a, b, semiring)["exact"]
    planted = reference.copy()
    planted.data[0] = np.nextafter(planted.data[0], np.inf)
    assert not compare_products(planted, reference, a, b, semiring)["check_passed"]


def test_float32_products_in_the_subnormal_range_pass_and_a_planted_error_fails(rng):
    """Values near float32's smallest subnormal (1.4e-45) round absolutely, not relatively: the
    underflow term admits what float32 computes and still refuses an error of a few subnormals more."""
    a = sp.random_array((80, 80), density=0.1, rng=rng, format="csr")
    a.data = rng.uniform(1e-44, 1e-41, a.nnz)  # deep in the subnormal range: the relative rule alone fails
    b = rng.uniform(-0.5, 0.5, (80, 6))
    ours = (sp.csr_array(a.astype(np.float32)) @ b.astype(np.float32)).astype(np.float64)
    reference = a @ b
    magnitude, pattern = abs(a), a.astype(bool).astype(np.float64)
    operands = magnitude.sum(axis=1)[:, None] + pattern @ np.abs(b)
    terms = np.diff(a.indptr)[:, None]
    allowed = allowed_error(magnitude @ np.abs(b), terms, np.float32, operands)
    assert within(ours, reference, allowed).all()
    relative_only = (gamma(terms + 2, np.float32) + gamma(terms, np.float64)) * (magnitude @ np.abs(b))
    assert not within(ours, reference, relative_only).all()  # the relative rule alone refuses what float32 computes
    planted = ours.copy()
    planted[np.unravel_index(np.argmax(np.abs(reference)), reference.shape)] += 64 * np.finfo(np.float32).smallest_subnormal
    assert within(planted, reference, allowed).sum() == planted.size - 1
