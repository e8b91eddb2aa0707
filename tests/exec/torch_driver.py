"""The torch.distributed transport under ``mpiexec -n P python tests/exec/torch_driver.py CASE SEED``;
rank 0 prints one line starting with ``OK``. ``roundtrip`` and ``backend`` also run as collective cases
(tests/mpi/test_torch_plans.py); ``mismatch`` and ``own_group`` need a process of their own.

* ``roundtrip``: plans on ``transport="torch"`` (auto, and joint/early deterministic): forward and
  transposed products exact against SciPy on integer data, a square and a rectangular A != A.T;
  ``explain()`` names the transport and what its bytes are counted from; a saved plan loads on
  the transport it was saved with; the deterministic product bitwise equal to the MPI transport's.
* ``mismatch``: rank 0's plan sends one row fewer to rank 1 than rank 1's plan expects; making
  the executor on the torch transport raises PlanMismatchError on every rank, naming the pair,
  within 30 s (Gloo itself would complete such a message silently or hang).
* ``own_group``: the caller initialises torch.distributed first, with the ranks in reverse order
  of MPI's; the executor uses that group, addressing every peer by its torch rank; sparsewire's exit
  handler leaves that group to the caller.
* ``backend``: plans on ``backend="torch"`` (B and C tensors): forward and transposed products
  exact against SciPy (square and rectangular A); ``explain()`` names the backend; a saved plan
  loads on it; with ``deterministic=True`` and random values, C is bitwise the same in every mode,
  thread count and run.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
import traceback

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from mpi_driver import one_row_fewer_to_rank_one

import sparsewire
from sparsewire.exec.executor import SpmmExecutor
from sparsewire.exec.options import ExecOptions
from sparsewire.io.generators import from_spec
from sparsewire.partition import partition
from sparsewire.plan.plan import build_rank_plan_collective


def integer_matrix(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(-4, 5, matrix.nnz).astype(np.float64)
    return sp.csr_array(matrix)


def integer_problem(comm, rng, shape):
    """A (integer values, distributed from rank 0), k, B and G, and this rank's rows of B and G."""
    rank = comm.Get_rank()
    a = integer_matrix(rng, shape, 0.08)
    k = int(rng.integers(1, 6))
    b = rng.integers(-3, 4, (shape[1], k)).astype(np.float64)
    g = rng.integers(-3, 4, (shape[0], k)).astype(np.float64)
    matrix = sparsewire.distribute(comm, a if rank == 0 else None)
    return a, k, b, g, matrix, b[slice(*matrix.col_partition.range(rank))], g[slice(*matrix.row_partition.range(rank))]


def gathered(comm, block):
    return np.vstack(comm.allgather(block))


def roundtrip(seed: int, comm=MPI.COMM_WORLD, folder: str | None = None) -> str:
    """Collective on ``comm``. The ``roundtrip`` case; the plan is saved in ``folder`` (one every rank sees; by default a
    new one in the system's temporary directory)."""
    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    checked = 0
    path = f"{folder or comm.bcast(tempfile.mkdtemp() if rank == 0 else None)}/plan.npz"
    for shape in [(61, 61), (47, 73)]:
        a, k, b, g, matrix, b_local, g_local = integer_problem(comm, rng, shape)
        with matrix.spmm_plan(k, transport="torch") as plan:
            text = plan.explain()
            assert "transport torch" in text and "tensors torch.distributed received into" in text, text
            assert not plan.bytes_measured
            for _ in range(3):
                assert np.array_equal(gathered(comm, plan.multiply(b_local)), a @ b)
            assert np.array_equal(gathered(comm, plan.transpose().multiply(g_local)), a.T @ g)
            assert plan.transpose().transport == "torch"
            received = comm.allreduce(plan.bytes_received, op=MPI.SUM)
            assert received == plan.stats.total_bytes, (received, plan.stats.total_bytes)
            plan.save(path)
            with sparsewire.SpmmPlan.load(path, matrix) as loaded:
                assert loaded.transport == "torch"
                assert np.array_equal(gathered(comm, loaded.multiply(b_local)), a @ b)
        products = {}
        real = sp.csr_array((rng.standard_normal(a.nnz), a.indices, a.indptr), shape=a.shape)  # rounding shows the order
        matrix = sparsewire.distribute(comm, real if rank == 0 else None)
        for transport in ("mpi", "torch"):
            with matrix.spmm_plan(k, strategy="joint", mode="early", deterministic=True, transport=transport) as plan:
                products[transport] = (gathered(comm, plan.multiply(b_local)), gathered(comm, plan.transpose().multiply(g_local)))
        assert products["mpi"][0].tobytes() == products["torch"][0].tobytes()
        assert products["mpi"][1].tobytes() == products["torch"][1].tobytes()
        checked += 1
    return f"OK roundtrip {checked}"


def mismatch(seed: int) -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    matrix = from_spec("stencil2d:12")
    rows, cols = partition(matrix, comm.Get_size(), "even").partitions
    local = matrix[slice(*rows.range(rank))]
    plan = build_rank_plan_collective(comm, local, rows, cols, "column", None)
    if rank == 0:
        plan = one_row_fewer_to_rank_one(plan)
    started = time.monotonic()
    try:
        with SpmmExecutor(plan, comm, 3, np.float64, ExecOptions(mode="bulk", threads=1, transport="torch")) as executor:
            executor.multiply(np.ones((cols.counts()[rank], 3)))
        outcome = ("no error", time.monotonic() - started)
    except sparsewire.PlanMismatchError as error:
        outcome = (str(error), time.monotonic() - started)
    outcomes = comm.gather(outcome)
    if rank != 0:
        return ""
    for message, seconds in outcomes:
        assert "rank 1 expects 36 elements from rank 0 in exchange 0 but rank 0 sends 33" in message, message
        assert seconds < 30, seconds
    return f"OK mismatch on {len(outcomes)} ranks in {max(s for _, s in outcomes):.2f} s: {outcomes[0][0]}"


def own_group(seed: int) -> str:
    import torch.distributed as dist

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    port = None
    if rank == 0:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    port = comm.bcast(port)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=size - 1 - rank, world_size=size)
    rng = np.random.default_rng(seed)
    a = integer_matrix(rng, (50, 50), 0.1)
    b = rng.integers(-3, 4, (50, 4)).astype(np.float64)
    matrix = sparsewire.distribute(comm, a if rank == 0 else None)
    b_local = b[slice(*matrix.col_partition.range(rank))]
    for mode in ("bulk", "overlap", "early"):
        with matrix.spmm_plan(4, strategy="joint", mode=mode, transport="torch") as plan:
            assert np.array_equal(gathered(comm, plan.multiply(b_local)), a @ b), mode
    assert dist.get_rank() == size - 1 - rank
    from sparsewire.comm.torch_world import _EXIT, _destroy_groups

    assert _EXIT == {"registered": False, "default_group": False}, _EXIT  # sparsewire made no group here
    _destroy_groups()  # what sparsewire's exit handler does: the caller's group is the caller's to destroy
    assert dist.is_initialized()
    dist.destroy_process_group()
    return f"OK own_group {size}"


def backend(seed: int, comm=MPI.COMM_WORLD, folder: str | None = None) -> str:
    """Collective on ``comm``. The ``backend`` case; the plan is saved in ``folder`` (as for :func:`roundtrip`)."""
    import torch

    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    path = f"{folder or comm.bcast(tempfile.mkdtemp() if rank == 0 else None)}/plan.npz"
    checked = 0
    for shape in [(61, 61), (47, 73)]:
        a, k, b, g, matrix, b_local, g_local = integer_problem(comm, rng, shape)
        b_local, g_local = torch.from_numpy(b_local), torch.from_numpy(g_local)
        with matrix.spmm_plan(k, backend="torch") as plan:
            assert "backend torch on cpu" in plan.explain(), plan.explain()
            for _ in range(2):
                c = plan.multiply(b_local)
                assert isinstance(c, torch.Tensor)
                assert np.array_equal(gathered(comm, c.numpy()), a @ b)
            transposed = plan.transpose()
            assert transposed.backend == "torch"
            assert np.array_equal(gathered(comm, transposed.multiply(g_local).numpy()), a.T @ g)
            plan.save(path)
            with sparsewire.SpmmPlan.load(path, matrix, backend="torch") as loaded:
                assert loaded.backend == "torch"
                assert np.array_equal(gathered(comm, loaded.multiply(b_local).numpy()), a @ b)
        real = sp.csr_array((rng.standard_normal(a.nnz), a.indices, a.indptr), shape=a.shape)  # rounding shows the order
        matrix = sparsewire.distribute(comm, real if rank == 0 else None)
        bits = set()
        for strategy in ("joint", "column"):
            for mode in ("bulk", "overlap", "early"):
                for threads in (1, 2):
                    with matrix.spmm_plan(
                        k, strategy=strategy, mode=mode, threads=threads, deterministic=True, backend="torch"
                    ) as plan:
                        for _ in range(2):
                            bits.add((strategy, gathered(comm, plan.multiply(b_local).numpy()).tobytes()))
        assert len(bits) == 2, f"{len(bits)} different results for 2 strategies"
        checked += 1
    return f"OK backend {checked}"


def main() -> None:
    case, seed = sys.argv[1], int(sys.argv[2])
    message = {"roundtrip": roundtrip, "mismatch": mismatch, "own_group": own_group, "backend": backend}[case](seed)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(message, flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
