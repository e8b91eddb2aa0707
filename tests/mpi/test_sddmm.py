"""Distributed SDDMM on every rank of one job: ``A ∘ (X Yᵀ)`` exact against SciPy on integer data for every strategy,
square and rectangular A, float32 and float64, the plan reused on new X and Y; the bytes MPI's receive statuses
counted equal to the plan's formula, ``auto`` never above either way; a planted fault (one value sampled from the
wrong column) caught; wrong shapes, a closed plan and unknown strategies refused on every rank alike."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire
from sparsewire.distributed.sddmm import SddmmPlan


def integer_problem(rng, comm, shape, d, density):
    """A random integer A (entries -4..4, zeros dropped), X and Y, the same on every rank."""
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(1, 5, matrix.nnz) * rng.choice([-1.0, 1.0], matrix.nnz)
    x = rng.integers(-3, 4, (shape[0], d)).astype(np.float64)
    y = rng.integers(-3, 4, (shape[1], d)).astype(np.float64)
    return comm.bcast((sp.csr_array(matrix), x, y))


def reference_values(a, x, y, distributed):
    """This rank's values of A ∘ (X Yᵀ) by SciPy, in the order of its CSR arrays."""
    local = sp.csr_array(a.multiply(sp.csr_array(x @ y.T)))[slice(*distributed.row_partition.range(distributed.comm.Get_rank()))]
    pattern = distributed.local_rows
    dense = local.toarray()
    rows = np.repeat(np.arange(pattern.shape[0]), np.diff(pattern.indptr))
    return dense[rows, pattern.indices]


@pytest.mark.ranks(1, 2, 3, 4)
@pytest.mark.parametrize("shape", [(60, 60), (45, 70)])
@pytest.mark.parametrize("strategy", ["column", "row", "auto"])
def test_sddmm_is_exact_and_moves_the_bytes_it_plans(comm, rng, shape, strategy):
    a, x, y = integer_problem(rng, comm, shape, d=5, density=0.08)
    matrix = sparsewire.distribute(comm, a)
    rank = comm.Get_rank()
    x_local, y_local = x[slice(*matrix.row_partition.range(rank))], y[slice(*matrix.col_partition.range(rank))]
    expected = reference_values(a, x, y, matrix)
    for dtype in (np.float64, np.float32):
        with sparsewire.plan_sddmm(matrix, 5, dtype, strategy) as plan:
            values = plan.sddmm(x_local.astype(dtype), y_local.astype(dtype))
            assert values.dtype == dtype and np.array_equal(values, expected), (strategy, dtype)
            received = comm.allreduce(plan.bytes_received, op=MPI.SUM)
            assert received == plan.planned_bytes, (received, plan.planned_bytes)
            assert (plan.planned_bytes > 0) == any(comm.allgather(bool(plan.blocks)))
            again = plan.sddmm(2 * x_local.astype(dtype), y_local.astype(dtype), out=np.empty(values.size, dtype))
            assert np.array_equal(again, 2 * expected)  # reused on another X, into out
    assert np.array_equal(matrix.sddmm(x_local, y_local, strategy=strategy), expected)


@pytest.mark.ranks(2, 3, 4)
def test_auto_moves_no_more_than_either_way_and_the_ways_differ(comm):
    """A banded A with two full rows: the band's blocks are cheaper by columns, the blocks of a full row by rows (d
    values and one per entry back, against d per column)."""
    n, d = 120, 6
    band = sp.diags_array([np.ones(n - abs(o)) for o in (-3, 0, 3)], offsets=[-3, 0, 3], shape=(n, n))
    full_rows = sp.csr_array((np.ones(2 * n), (np.repeat([5, 77], n), np.tile(np.arange(n), 2))), shape=(n, n))
    matrix = sparsewire.distribute(comm, sp.csr_array(band + full_rows))
    planned, ways = {}, set()
    for strategy in ("column", "row", "auto"):
        with sparsewire.plan_sddmm(matrix, d, np.float64, strategy) as plan:
            planned[strategy] = plan.planned_bytes
            ways |= {block.way for blocks in comm.allgather(plan.blocks) for block in blocks} if strategy == "auto" else set()
            text = plan.explain()
            assert f"strategy {strategy}" in text and f"{plan.planned_bytes} bytes per run" in text
    assert planned["auto"] <= min(planned["column"], planned["row"]), planned
    assert planned["auto"] < max(planned["column"], planned["row"]), planned
    # (at P = 2 each rank's one block holds a full row, so both go by rows)
    assert ways == ({"column", "row"} if comm.Get_size() > 2 else {"row"}), ways


@pytest.mark.ranks(2, 3)
def test_a_value_sampled_from_the_wrong_column_is_caught(comm, rng):
    """The check the tests above make can fail: X's first column all ones and Y's first column the column's number
    (the rest zero) make each value A_ij * j, so one column block's entry pointed at another fetched Y row gives a
    value that differs from SciPy's there and nowhere else."""
    a, _, _ = integer_problem(rng, comm, (40, 40), d=3, density=0.3)
    x, y = np.zeros((40, 3)), np.zeros((40, 3))
    x[:, 0], y[:, 0] = 1.0, np.arange(40)
    matrix = sparsewire.distribute(comm, a)
    rank = comm.Get_rank()
    x_local, y_local = x[slice(*matrix.row_partition.range(rank))], y[slice(*matrix.col_partition.range(rank))]
    expected = reference_values(a, x, y, matrix)
    with sparsewire.plan_sddmm(matrix, 3, np.float64, "column") as plan:
        if rank == 0:
            index, block = next((i, b) for i, b in enumerate(plan.blocks) if np.any(b.entry_cols != b.entry_cols[0]))
            wrong = block.entry_cols.copy()
            wrong[0] = wrong[np.flatnonzero(wrong != wrong[0])[0]]
            plan.blocks[index] = dataclasses.replace(block, entry_cols=wrong)
            planted_entry = int(block.entries[0])
        values = plan.sddmm(x_local, y_local)
    differing = np.flatnonzero(values != expected).tolist()
    assert differing == ([planted_entry] if rank == 0 else []), differing


@pytest.mark.ranks(2, 3)
def test_wrong_shapes_a_closed_plan_and_unknown_strategies_are_refused_on_every_rank(comm, rng):
    a, x, y = integer_problem(rng, comm, (30, 30), d=3, density=0.2)
    matrix = sparsewire.distribute(comm, a)
    rank = comm.Get_rank()
    x_local, y_local = x[slice(*matrix.row_partition.range(rank))], y[slice(*matrix.col_partition.range(rank))]
    plan = sparsewire.plan_sddmm(matrix, 3)
    assert isinstance(plan, SddmmPlan)
    wrong = x_local[:, :2] if rank == 1 else x_local  # one rank's X too narrow
    with pytest.raises(sparsewire.InputError, match=r"rank 1: x_local has shape \(\d+, 2\), expected \(\d+, 3\)"):
        plan.sddmm(wrong, y_local)
    with pytest.raises(sparsewire.InputError, match="y_local is complex"):
        plan.sddmm(x_local, y_local.astype(complex))
    plan.close()
    plan.close()  # a second close does nothing
    with pytest.raises(sparsewire.InputError, match="this SddmmPlan was closed"):
        plan.sddmm(x_local, y_local)
    with pytest.raises(sparsewire.InputError, match="unknown SDDMM strategy 'halo'"):
        sparsewire.plan_sddmm(matrix, 3, strategy="halo")
    with pytest.raises(sparsewire.InputError, match="d, the width of X and Y, must be a positive integer"):
        sparsewire.plan_sddmm(matrix, 0)
    with pytest.raises(sparsewire.PlanMismatchError, match="d"):
        sparsewire.plan_sddmm(matrix, 3 + (rank == 1))
