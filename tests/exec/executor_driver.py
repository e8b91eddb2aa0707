"""Executor checks run under ``mpiexec -n P python tests/exec/executor_driver.py CHECK SEED``; rank 0
prints one line starting with ``OK``.

* ``deterministic``: random (non-integer) values; with ``deterministic=True`` C is bitwise identical
  for every mode and thread count of a strategy that run one plan (the pipelined mode runs a plan
  of its own layout), and for ``block``, ``column`` and ``column-hier``
  bitwise equal to the serial CSR product of the whole matrix summed in ascending column order
  (the same at every P).
* ``allocation``: n = 100,000, k = 32; after the first multiply, one ``multiply(b, out=c)`` in
  every mode allocates under 64 KiB (tracemalloc's peak).
* ``corrupted``: rank 0's plan sends one row fewer to rank 1 than rank 1's plan expects; the bytes
  MPI delivered then differ from the plan and the executor reports the message.
"""

from __future__ import annotations

import dataclasses
import sys
import traceback
import tracemalloc

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.exec.executor import SpmmExecutor
from sparsewire.exec.options import ExecOptions
from sparsewire.io.generators import from_spec
from sparsewire.kernels import compiled as kernels
from sparsewire.partition import partition
from sparsewire.plan.modes import MODES, layout_for_mode
from sparsewire.plan.plan import build_rank_plan_collective
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy
from sparsewire.topology.model import Topology

DETERMINISTIC = True  # the planted-fault run sets it False
COLUMN_BASED = {Strategy.BLOCK, Strategy.COLUMN, Strategy.COLUMN_HIER}


DETERMINISTIC_THREADS = (1, 2, 3)


def planned_deterministic_checks() -> int:
    """Comparisons :func:`deterministic` makes on rank 0: every (mode, threads) of every strategy
    against bulk with one thread (the pipelined mode of a row-based strategy against its own
    one-thread run instead, which does not count)."""
    return sum(
        len(DETERMINISTIC_THREADS) * sum(1 for mode in MODES if mode != "pipelined" or strategy in COLUMN_BASED)
        for strategy in EXECUTABLE_STRATEGIES
    )


def deterministic(seed: int) -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    rng = np.random.default_rng(seed)
    matrix = sp.random_array((70, 70), density=0.15, rng=rng, format="csr")
    matrix.data = rng.standard_normal(matrix.nnz)
    matrix = sp.csr_array(matrix)
    matrix.sort_indices()
    k = 5
    b = rng.standard_normal((70, k))
    reference = np.empty((70, k))
    kernels.set_threads(1)
    kernels.multiply(kernels.CsrOperand.from_matrix(matrix, np.float64, 1), b, reference)
    rows, cols = partition(matrix, comm.Get_size(), "even").partitions
    local = matrix[slice(*rows.range(rank))]
    checked = 0
    for strategy in EXECUTABLE_STRATEGIES:
        topology = Topology.nodes(2) if strategy.hierarchical else None
        results = {}
        for mode in MODES:
            layout = layout_for_mode(mode)
            plan = build_rank_plan_collective(
                comm,
                local,
                rows,
                cols,
                strategy,
                topology or Topology.nodes(2) if layout == "pipelined" else topology,
                layout=layout,
            )
            for threads in DETERMINISTIC_THREADS:
                with SpmmExecutor(
                    plan, comm, k, np.float64, ExecOptions(mode=mode, threads=threads, deterministic=DETERMINISTIC)
                ) as executor:
                    mine = executor.multiply(b[slice(*cols.range(rank))])
                full = comm.allgather(mine)
                results[(mode, threads)] = np.vstack(full)
        if rank == 0:
            first = results[("bulk", 1)]
            for (mode, threads), value in results.items():
                if mode == "pipelined" and strategy not in COLUMN_BASED:
                    # Another plan (rounds by group): partial C rows arrive in another order.
                    assert value.tobytes() == results[("pipelined", 1)].tobytes(), f"{strategy}: pipelined T={threads}"
                    continue
                assert value.tobytes() == first.tobytes(), f"{strategy}: {mode}/T={threads} differs bitwise from bulk/T=1"
                checked += 1
            if strategy in COLUMN_BASED:
                assert first.tobytes() == reference.tobytes(), f"{strategy}: differs from the serial ascending-column product"
            else:
                np.testing.assert_allclose(first, matrix @ b, rtol=1e-12, atol=1e-12)
    return f"OK deterministic {checked}"


def allocation(seed: int) -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    matrix = from_spec(f"uniform:100000:8:{seed}")
    rows, cols = partition(matrix, comm.Get_size(), "even").partitions
    local = matrix[slice(*rows.range(rank))]
    k = 32
    b = np.ones((cols.counts()[rank], k))
    peaks = {}
    for mode in MODES:
        topology = Topology.nodes(1) if mode == "pipelined" else None
        plan = build_rank_plan_collective(comm, local, rows, cols, "column", topology, layout=layout_for_mode(mode))
        with SpmmExecutor(plan, comm, k, np.float64, ExecOptions(mode=mode, threads=1)) as executor:
            out = np.empty((plan.local_shape[0], k))
            executor.multiply(b, out=out)
            comm.Barrier()
            tracemalloc.start()
            executor.multiply(b, out=out)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        peaks[mode] = comm.allreduce(peak, op=MPI.MAX)
    worst = max(peaks.values())
    assert worst < 64 * 1024, f"a multiply allocated {peaks} bytes (tracemalloc peaks)"
    return "OK allocation " + " ".join(f"{mode}={peak}" for mode, peak in peaks.items())


def corrupted(seed: int) -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    matrix = from_spec("stencil2d:12")
    rows, cols = partition(matrix, comm.Get_size(), "even").partitions
    local = matrix[slice(*rows.range(rank))]
    k = 3
    plan = build_rank_plan_collective(comm, local, rows, cols, "column", None)
    if rank == 0:
        # Rank 0 sends one row fewer to rank 1 than rank 1's plan expects: drop the last row it packs for it.
        exchange = plan.exchanges[0]
        position = int(np.flatnonzero(exchange.send_ranks == 1)[0])
        counts = exchange.send_counts.copy()
        counts[position] -= 1
        dropped = int(exchange.send_counts[: position + 1].sum()) - 1
        keep = np.delete(np.arange(exchange.send_matrix.shape[0]), dropped)
        exchange = dataclasses.replace(
            exchange,
            send_counts=counts,
            send_matrix=sp.csr_array(exchange.send_matrix[keep]),
            send_kinds=exchange.send_kinds[keep],
        )
        plan = dataclasses.replace(plan, exchanges=(exchange,))
    b = np.ones((cols.counts()[rank], k))
    outcomes = []
    for mode in ("bulk", "overlap", "early"):
        with SpmmExecutor(plan, comm, k, np.float64, ExecOptions(mode=mode, threads=1)) as executor:
            executor.multiply(b)
            planned = int(sum(int(e.recv_counts.sum()) for e in plan.exchanges)) * k * 8
            problems = comm.allgather(list(executor.delivery_problems))
            delivered = comm.allgather(executor.bytes_received)
            plans = comm.allgather(planned)
        outcomes.append((mode, sum(delivered), sum(plans), problems))
    if rank == 0:
        for mode, delivered, planned, problems in outcomes:
            assert delivered == planned - k * 8, f"{mode}: MPI delivered {delivered} bytes, expected one row less than {planned}"
            assert problems[1] and "received" in problems[1][0] and "from rank 0" in problems[1][0], f"{mode}: {problems}"
    return "OK corrupted " + outcomes[0][3][1][0] if rank == 0 else ""


def main() -> None:
    check, seed = sys.argv[1], int(sys.argv[2])
    message = {"deterministic": deterministic, "allocation": allocation, "corrupted": corrupted}[check](seed)
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
