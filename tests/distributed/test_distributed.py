"""sparsewire.distributed.matrix in-process (MPI.COMM_SELF): distributing by a Partitioning, the layout
of a right operand, and DistributedMatrix.spgemm against SciPy. The multi-rank paths run under
mpiexec in tests/test_api.py and tests/spgemm/test_spgemm_mpi.py."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import sparsewire
from oracles import random_integer_matrix
from sparsewire.errors import InputError
from sparsewire.partition import Partitioning, even_rows


@pytest.mark.parametrize("method", ["even", "rcm", "metis"])
def test_a_right_operand_is_laid_out_like_the_columns_of_a(rng, method):
    a_global = random_integer_matrix(rng, 30, 20, 0.15)
    a = sparsewire.distribute(MPI.COMM_SELF, a_global, method)
    for b_global in (random_integer_matrix(rng, 20, 25, 0.2), random_integer_matrix(rng, 20, 20, 0.2)):
        b = sparsewire.distribute(MPI.COMM_SELF, b_global, a.right_operand_partitioning())
        assert b.row_partition == a.col_partition and b.shape == b_global.shape
        assert (b.row_order is None) == (a.col_order is None)
        if a.col_order is not None:
            assert np.array_equal(b.row_order, a.col_order)
        square = b_global.shape[0] == b_global.shape[1]
        assert (b.col_order is None) if not square or a.col_order is None else np.array_equal(b.col_order, a.col_order)
        assert abs(b.gather() - b_global).max() == 0  # back in the original order
        c = a.spgemm(b)
        assert abs(c.gather() - a_global @ b_global).max() == 0  # integer values: exact


def test_a_partitioning_that_does_not_fit_the_matrix_is_one_clear_error(rng):
    matrix = random_integer_matrix(rng, 12, 12, 0.3)
    rows = even_rows(12, 1)
    cases = [
        (Partitioning("x", even_rows(11, 1), None, None, None), "covers 11 rows"),
        (Partitioning("x", rows, even_rows(9, 1), None, None), "covers 9 columns"),
        (Partitioning("x", rows, None, np.arange(10), None), "orders 10 rows"),
        (Partitioning("x", rows, None, np.zeros(12, np.int64), None), "not a permutation"),
        (Partitioning("x", rows, rows, None, np.arange(1, 13)), "not a permutation"),
    ]
    for partitioning, message in cases:
        with pytest.raises(InputError, match=message):
            sparsewire.distribute(MPI.COMM_SELF, matrix, partitioning)


def test_plan_spgemm_reports_its_choice_and_refuses_a_b_laid_out_otherwise(rng):
    a = sparsewire.distribute(MPI.COMM_SELF, random_integer_matrix(rng, 15, 15, 0.2), "rcm")
    b_even = sparsewire.distribute(MPI.COMM_SELF, random_integer_matrix(rng, 15, 15, 0.2), "even")
    with pytest.raises(InputError, match="right_operand_partitioning"):
        sparsewire.plan_spgemm(a, b_even)
    with sparsewire.plan_spgemm(a, a, "min_plus", algorithm="auto") as plan:
        assert plan.algorithm in plan.predicted_bytes_by_algorithm and plan.predicted_bytes == 0  # one rank sends nothing
        assert set(plan.predicted_bytes_by_algorithm) == {"summa", "1d/column", "1d/joint", "1d/row"}
        assert plan.options == sparsewire.SpgemmOptions(algorithm="auto")
    with pytest.raises(InputError, match="was closed"):
        plan.multiply()
    plan.close()  # a second close does nothing
    for bad, message in (
        ({"grid": "2x2"}, "2 x 2 != 1 ranks"),
        ({"strategy": "diagonal"}, "1D SpGEMM runs"),
        ({"phases": 0}, "phases must be a positive integer"),
        ({"overlap": "yes"}, "overlap must be"),
    ):
        with pytest.raises(InputError, match=message):
            sparsewire.plan_spgemm(a, a, **bad)


def test_arguments_in_the_wrong_order_name_the_order(rng):
    matrix = random_integer_matrix(rng, 8, 8, 0.3)
    with pytest.raises(InputError, match=r"communicator first.*got a csr_array.*distribute\(MPI.COMM_WORLD, A\)"):
        sparsewire.distribute(matrix, MPI.COMM_WORLD)


def test_the_matrix_methods_take_explicit_keywords(rng):
    """A misspelled keyword is Python's TypeError at the call (no rank has started a collective), and a
    positional option is refused; the keywords given reach the plan."""
    a = sparsewire.distribute(MPI.COMM_SELF, random_integer_matrix(rng, 12, 12, 0.3))
    with pytest.raises(TypeError, match="stratgy"):
        a.spmm_plan(4, stratgy="joint")
    with pytest.raises(TypeError):
        a.spmm_plan(4, np.float64, "joint")
    with pytest.raises(TypeError, match="algorthm"):
        a.spgemm(a, algorthm="1d")
    with a.spmm_plan(4, strategy="column", mode="bulk") as plan:
        assert plan.rank_plan.strategy.value == "column"
