"""Programs against the public API only (``import sparsewire``), run by tests/test_api.py under
``mpiexec -n P``. Usage: ``python tests/api_driver.py CASE SEED [PATH]``; prints ``OK ...`` on rank 0.

- ``roundtrip``: distribute -> spmm_plan() (auto) -> ten multiplies -> transpose().multiply, exact
  against SciPy's A @ B and A.T @ G on integer data, square and rectangular A != A.T, every rank
  passing its own rows (row_offsets) as well as rank 0 holding A; the bytes MPI delivered to the
  transposed plan equal the forward plan's and the planned bytes; spmm() one-liner; save/load.
- ``wrong_load``: load a plan saved for another matrix (PATH) -> one-line PlanMismatchError on every rank.
- ``wrong_shape``: rank 1 passes a B block with one row too few (the job must abort, not hang).
- ``aliasing``: ``multiply(B, out=B)`` and an ``out`` that overlaps B by all but one row, every mode
  and both kernel backends: C exact against SciPy (B is copied first, as NumPy's matmul does).
- ``complex_b``: a complex B is refused (every rank's job ends with the one-line error).
- ``dropped_plans``: 2,100 plans made, multiplied once and dropped (no close(), no ``with``), and
  2,100 matrices multiplied by ``sparsewire.spmm`` (which keeps a plan on each): no MPI error, C
  exact each time, and the resident memory (the kernel's count, /proc/self/statm) after the
  first plan grows by less than 50 MB; prints the growth.
- ``open_plans``: plans kept open until the 1,025th is refused with the count and the fix on every
  rank; after closing them a new plan multiplies.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire


def integer_matrix(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(-4, 5, matrix.nnz).astype(np.float64)
    return sp.csr_array(matrix)


def gathered(comm, block):
    return np.vstack(comm.allgather(block))


def roundtrip(seed: int, path: str) -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    checked = 0
    for shape in [(61, 61), (47, 73), (80, 29)]:
        a = integer_matrix(rng, shape, 0.08)
        assert shape[0] != shape[1] or (a != a.T).nnz > 0
        k = int(rng.integers(1, 6))
        b = rng.integers(-3, 4, (shape[1], k)).astype(np.float64)
        g = rng.integers(-3, 4, (shape[0], k)).astype(np.float64)
        whole = sparsewire.distribute(comm, a if rank == 0 else None)
        offsets = whole.row_partition.offsets
        own = sparsewire.distribute(comm, a[offsets[rank] : offsets[rank + 1]], row_offsets=offsets)
        for matrix in (whole, own):
            assert matrix.shape == shape and matrix.nnz == a.nnz
            assert (matrix.gather() != a).nnz == 0 if rank == 0 else matrix.gather() is None
            b_local = b[slice(*matrix.col_partition.range(rank))]
            g_local = g[slice(*matrix.row_partition.range(rank))]
            with matrix.spmm_plan(k) as plan:
                assert "auto chose" in plan.explain()
                out = np.empty((plan.output_rows, k))
                for _ in range(10):
                    plan.multiply(b_local, out=out)
                    assert np.array_equal(gathered(comm, out), a @ b)
                forward_bytes = comm.allreduce(plan.bytes_received, op=MPI.SUM)  # what MPI delivered
                transposed = plan.transpose()
                assert np.array_equal(gathered(comm, transposed.multiply(g_local)), a.T @ g)
                backward_bytes = comm.allreduce(transposed.bytes_received, op=MPI.SUM)
                assert backward_bytes == forward_bytes == plan.stats.total_bytes, (backward_bytes, forward_bytes)
                assert transposed.stats.total_bytes == plan.stats.total_bytes
                assert transposed.transpose() is plan
                plan.save(path)
                with sparsewire.SpmmPlan.load(path, matrix) as loaded:
                    assert loaded.rank_plan.equals(plan.rank_plan) and loaded.rank_plan.strategy == plan.rank_plan.strategy
                    assert np.array_equal(gathered(comm, loaded.multiply(b_local)), a @ b)
                    assert np.array_equal(gathered(comm, loaded.transpose().multiply(g_local)), a.T @ g)
            assert np.array_equal(gathered(comm, sparsewire.spmm(matrix, b_local)), a @ b)
            assert np.array_equal(gathered(comm, sparsewire.spmm(matrix, b_local)), a @ b)  # the cached plan
            with matrix.spmm_plan(k, strategy="joint", mode="early", deterministic=True) as plan:
                assert np.array_equal(gathered(comm, plan.transpose().multiply(g_local)), a.T @ g)
            checked += 1
    return f"OK roundtrip {checked}"


def wrong_load(seed: int, path: str) -> str:
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(seed)
    a = integer_matrix(rng, (40, 40), 0.1)
    other = a.copy()
    other.data = other.data + 1
    matrix = sparsewire.distribute(comm, a if comm.Get_rank() == 0 else None)
    with matrix.spmm_plan(3) as plan:
        plan.save(path)
    changed = sparsewire.distribute(comm, other if comm.Get_rank() == 0 else None)
    try:
        sparsewire.SpmmPlan.load(path, changed)
    except sparsewire.PlanMismatchError as error:
        message = str(error)
        assert "\n" not in message and "another matrix" in message, message
        return f"OK wrong_load {message}"
    raise AssertionError("loading a plan for another matrix did not fail")


def wrong_shape(seed: int, path: str) -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    matrix = sparsewire.distribute(comm, "stencil2d:20")
    with matrix.spmm_plan(4) as plan:
        rows = plan.input_rows - (1 if rank == 1 else 0)
        plan.multiply(np.ones((rows, 4)))
        plan.multiply(np.ones((rows, 4)))
    return "OK wrong_shape ran (it should not have)"


def aliasing(seed: int, path: str) -> str:
    import torch

    from sparsewire.errors import InputError

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    a = integer_matrix(rng, (53, 53), 0.1)
    k = int(rng.integers(1, 5))
    b = rng.integers(-3, 4, (53, k)).astype(np.float64)
    expected = a @ b
    matrix = sparsewire.distribute(comm, a if rank == 0 else None)
    assert np.array_equal(matrix.row_partition.offsets, matrix.col_partition.offsets)
    rows = slice(*matrix.row_partition.range(rank))
    checked = 0
    for mode in ("bulk", "overlap", "pipelined", "early", "partitioned"):
        for backend in ("numpy", "torch"):
            try:
                plan = matrix.spmm_plan(k, mode=mode, backend=backend)
            except InputError:  # a combination the library refuses at planning (partitioned on torch)
                continue
            with plan:
                whole = b[rows].copy()  # a view of b would be overwritten with C
                shifted = np.zeros((whole.shape[0] + 1, k))
                shifted[1:] = whole
                if backend == "torch":
                    whole, shifted = torch.from_numpy(whole), torch.from_numpy(shifted)
                got_whole = plan.multiply(whole, out=whole)  # C written over B itself
                got_shifted = plan.multiply(shifted[1:], out=shifted[:-1])  # overlapping by all but one row
                for got in (got_whole, got_shifted):
                    got = got.numpy() if backend == "torch" else got
                    assert np.array_equal(gathered(comm, got), expected), (mode, backend)
                checked += 1
    return f"OK aliasing {checked}"


COMBINATIONS = [(m, b) for m in ("bulk", "overlap", "pipelined", "early", "partitioned") for b in ("numpy", "torch")]


def complex_b(seed: int, path: str) -> str:
    """``path`` is MODE/BACKEND, or ``all`` (P = 1: each refusal is caught and the next tried)."""
    from sparsewire.errors import InputError

    comm = MPI.COMM_WORLD
    matrix = sparsewire.distribute(comm, "stencil2d:12")
    refused = 0
    for mode, backend in COMBINATIONS if path == "all" else [tuple(path.split("/"))]:
        try:
            plan = matrix.spmm_plan(2, mode=mode, backend=backend)
        except InputError:  # partitioned on torch is refused at planning
            continue
        with plan:
            try:
                plan.multiply(np.ones((plan.input_rows, 2)) * (1 + 2j))
            except sparsewire.PlanMismatchError as error:  # at P > 1 the job has ended before this
                assert "the B block's values are complex128 (complex)" in str(error), str(error)
                refused += 1
                continue
        return f"OK complex_b ran {mode}/{backend} (it should not have)"
    return f"OK complex_b refused {refused}"


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:  # resident pages, as the kernel counts them
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def dropped_plans(seed: int, path: str) -> str:
    comm = MPI.COMM_WORLD
    whole = integer_matrix(np.random.default_rng(seed), (60, 60), 0.1)
    b = np.arange(60 * 2, dtype=np.float64).reshape(60, 2) % 7
    expected = whole @ b
    matrix = sparsewire.distribute(comm, whole if comm.Get_rank() == 0 else None)
    rows, cols = matrix.row_partition.range(comm.Get_rank()), matrix.col_partition.range(comm.Get_rank())
    start = None
    for made in range(2100):  # MPICH has 2,048 communicator ids: past them only if dropped plans are freed
        c = matrix.spmm_plan(2).multiply(b[cols[0] : cols[1]])  # the plan is dropped at once
        assert np.array_equal(c, expected[rows[0] : rows[1]]), made
        start = resident_mb() if start is None else start
    for made in range(2100):
        again = sparsewire.distribute(comm, whole if comm.Get_rank() == 0 else None)
        assert np.array_equal(sparsewire.spmm(again, b[cols[0] : cols[1]]), expected[rows[0] : rows[1]]), made
    growth = comm.allreduce(resident_mb() - start, op=MPI.MAX)
    return f"OK dropped_plans growth {growth:.1f} MB"


def open_plans(seed: int, path: str) -> str:
    comm = MPI.COMM_WORLD
    matrix = sparsewire.distribute(comm, "stencil2d:6")
    kept, refusal = [], "not refused"
    try:
        while len(kept) <= 1024:
            kept.append(matrix.spmm_plan(1))
    except sparsewire.InputError as error:
        refusal = f"refused after {len(kept)}: {error}"
    for rank, line in enumerate(comm.allgather(refusal)):  # printed by rank 0: lines of ranks do not interleave
        if comm.Get_rank() == 0:
            print(f"rank {rank} {line}", flush=True)
    for plan in kept:
        plan.close()
    with matrix.spmm_plan(1) as plan:
        plan.multiply(np.ones((plan.input_rows, 1)))
    return f"OK open_plans {len(kept)}"


if __name__ == "__main__":
    case, seed = sys.argv[1], int(sys.argv[2])
    target = sys.argv[3] if len(sys.argv) > 3 else "/dev/null"
    cases = {"roundtrip": roundtrip, "wrong_load": wrong_load, "wrong_shape": wrong_shape}
    cases.update(aliasing=aliasing, complex_b=complex_b, dropped_plans=dropped_plans, open_plans=open_plans)
    result = cases[case](seed, target)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(result, flush=True)
