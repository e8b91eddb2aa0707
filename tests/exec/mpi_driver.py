"""Run under ``mpiexec -n P python tests/exec/mpi_driver.py SEED [THREADS,...] [TRANSPORT] [BACKEND] [DEVICE] [STRATEGIES]``;
prints ``OK <runs>`` on rank 0. TRANSPORT is a registered transport (``mpi`` by default, ``torch``,
or one of tests/exec/extra_transports.py), BACKEND ``numpy`` (default) or ``torch`` (B, C and the
buffers torch tensors on DEVICE, default ``cpu``); each runs every mode it can (torch: all but
partitioned; the torch transport on CUDA, or ``torch-grouped``: bulk, overlap, pipelined).
STRATEGIES (comma-separated, default ``all``) keeps the run to those strategies, so that a test
can name one case and run it alone.

For a set of matrices (square and rectangular, empty rows and columns, ranks without rows, an
empty matrix, k = 1, 3 and 32) and every executable strategy, topology (none, groups of 2 and of 3,
so P = 3 and 4 have a group of one), mode and thread count, on every rank:

* the collective plan (built from the rank's own rows) equals the global plan's entry for the rank;
* C equals SciPy's A @ B exactly (integer data), on two consecutive multiplies with one executor,
  written into a caller's ``out`` array;
* the bytes MPI delivered from each source (receive statuses) equal the plan's rows * k * element
  size, and no message had another size than its receiver's plan expects.

The diagonal block goes in pieces of 64 multiply-adds (``combine.PROGRESS_EVERY``), so that the modes that
multiply it while messages are in flight call the transport's ``progress`` between pieces here too (where ranks x
threads fit the machine's cores: the executor multiplies it whole on oversubscribed ranks). The messages to another
group go in pieces of about 100 bytes (``message_rows.PIECE_BYTES``: a row each at k = 32, a dozen at k = 1), so
that the overlap and pipelined modes cut them wherever the plan relays nothing.

With ``SPARSEWIRE_REPORT_INTER_NODE=1`` rank 0 also prints ``INTER_NODE_BYTES <n>``: the bytes MPI
delivered between ranks of different nodes (as MPI sees nodes), summed over every multiply, for
a test to hold against the network's own counters (tests/emulation).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import traceback

import extra_transports  # noqa: F401 - registers the tests' transports
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.comm.runtime import node_ids
from sparsewire.exec import combine
from sparsewire.exec import executor as executor_module
from sparsewire.exec.executor import SpmmExecutor
from sparsewire.exec.options import ExecOptions
from sparsewire.exec.transports import transport_problem
from sparsewire.io.generators import from_spec
from sparsewire.kernels import backend_problem
from sparsewire.partition import partition
from sparsewire.plan.modes import MODES, layout_for_mode
from sparsewire.plan.plan import build_plan, build_rank_plan_collective
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES
from sparsewire.topology.model import Topology

MERGED_MODES = tuple(mode for mode in MODES if mode != "pipelined")
#: Payload bytes of a piece of a message to another group (the module docstring).
SMALL_PIECE_BYTES = 100
# (strategy filter, topology, proxy policy, modes)
CONFIGURATIONS = [
    ("flat", None, "local", MERGED_MODES),
    ("flat", Topology.nodes(2), "local", ("overlap", "pipelined")),  # messages to the other group in pieces
    ("hierarchical", Topology.nodes(2), "local", MODES),
    ("hierarchical", Topology.nodes(3), "balanced", MODES),
]


def integer_matrix(rng, n_rows, n_cols, density):
    matrix = sp.random_array((n_rows, n_cols), density=density, rng=rng, format="csr")
    matrix.data = (rng.integers(1, 10, matrix.nnz) * rng.choice([-1, 1], matrix.nnz)).astype(np.float64)
    return sp.csr_array(matrix)


def cases(seed: int, size: int):
    rng = np.random.default_rng(seed)
    skewed = integer_matrix(rng, 40, 40, 0.05).tolil()
    skewed[0, :] = 1  # one dense row: the nnz partition leaves ranks without rows
    yield "random-square-k32", integer_matrix(rng, 53, 53, 0.12), "even", 32, np.float64
    yield "random-rectangular-k1", integer_matrix(rng, 23, 41, 0.15), "even", 1, np.float64
    yield "tall-rectangular", integer_matrix(rng, 45, 9, 0.3), "nnz", 3, np.float64
    yield "two-rows", sp.csr_array(np.array([[0.0, 2.0, 0.0], [3.0, 0.0, 1.0]])), "even", 2, np.float64
    yield "skewed-nnz-partition", sp.csr_array(skewed), "nnz", 4, np.float64
    yield "empty", sp.csr_array((11, 11)), "even", 3, np.float64
    yield "stencil2d-float32", from_spec("stencil2d:7"), "even", 6, np.float32


def one_row_fewer_to_rank_one(plan):
    """A planted fault: ``plan`` (rank 0's, one exchange) sending one row fewer to rank 1 than rank 1's plan
    expects, its last row for rank 1 dropped."""
    exchange = plan.exchanges[0]
    position = int(np.flatnonzero(exchange.send_ranks == 1)[0])
    counts = exchange.send_counts.copy()
    counts[position] -= 1
    dropped = int(exchange.send_counts[: position + 1].sum()) - 1
    keep = np.delete(np.arange(exchange.send_matrix.shape[0]), dropped)
    exchange = dataclasses.replace(
        exchange, send_counts=counts, send_matrix=sp.csr_array(exchange.send_matrix[keep]), send_kinds=exchange.send_kinds[keep]
    )
    return dataclasses.replace(plan, exchanges=(exchange,))


def runs_on(transport: str, backend: str, mode: str, device: str = "cpu") -> bool:
    return not transport_problem(transport, mode, device) and not backend_problem(backend, device, mode)


def chosen_strategies(names: str = "all") -> list:
    """The executable strategies named (comma-separated), or all of them."""
    return list(EXECUTABLE_STRATEGIES) if names == "all" else [s for s in EXECUTABLE_STRATEGIES if s.value in names.split(",")]


def planned_runs(
    thread_counts: list[int], transport: str, backend: str = "numpy", device: str = "cpu", strategies: str = "all"
) -> int:
    """Executor runs one rank makes: cases x (strategy, mode) pairs of CONFIGURATIONS the
    transport and backend run x thread counts, from the lists the loop below walks."""
    pairs = sum(
        1
        for kind, _, _, modes in CONFIGURATIONS
        for strategy in chosen_strategies(strategies)
        if strategy.hierarchical == (kind == "hierarchical")
        for mode in modes
        if runs_on(transport, backend, mode, device)
    )
    return len(list(cases(0, 1))) * pairs * len(thread_counts)


def run_cases(
    comm, seed: int, thread_counts: list[int], transport: str = "mpi", backend: str = "numpy", device: str = "cpu", names="all"
) -> tuple[int, int]:
    """Collective. Every case of the module docstring on ``comm``; returns the job's executor runs and the bytes MPI
    delivered between ranks of different nodes (both summed over the ranks, on every rank)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    strategies = chosen_strategies(names)
    if device == "cuda":  # each rank the GPU of its rank on the node (NCCL needs one per rank)
        from sparsewire.kernels.torch_backend import node_device

        device = node_device(comm)
    if backend == "torch":
        import torch
    runs = 0
    nodes = node_ids(comm)
    inter_node = 0
    for name, matrix, method, k, dtype in cases(seed, size):
        rows, cols = partition(matrix, size, method).partitions
        local = matrix[slice(*rows.range(rank))]
        b_dense = np.random.default_rng(seed + 1).integers(-4, 5, (matrix.shape[1], k)).astype(dtype)
        b_local = b_dense[slice(*cols.range(rank))]
        expected = (matrix @ b_dense.astype(np.float64))[slice(*rows.range(rank))]
        for kind, topology, proxy, modes in CONFIGURATIONS:
            for strategy in strategies:
                if strategy.hierarchical != (kind == "hierarchical"):
                    continue
                plans = {}
                for layout in sorted({layout_for_mode(mode) for mode in modes}):
                    label = f"{name}/{strategy}/{topology and topology.name}/{proxy}/{layout}"
                    # the whole matrix's plan, built once (rank 0) and handed out: each rank's part of it
                    whole = build_plan(matrix, rows, cols, strategy, topology, layout=layout, proxy=proxy) if rank == 0 else None
                    expected_plan = comm.scatter(whole.ranks if rank == 0 else None)
                    plan = build_rank_plan_collective(comm, local, rows, cols, strategy, topology, layout=layout, proxy=proxy)
                    assert plan.equals(expected_plan), f"{label}: collective plan differs from global plan"
                    plans[layout] = plan
                for mode in modes:
                    if not runs_on(transport, backend, mode, device):
                        continue  # a mode this transport or backend does not run
                    plan = plans[layout_for_mode(mode)]
                    for threads in thread_counts:
                        with SpmmExecutor(
                            plan,
                            comm,
                            k,
                            dtype,
                            ExecOptions(mode=mode, threads=threads, transport=transport, backend=backend, device=device),
                        ) as executor:
                            if backend == "torch":
                                out = torch.empty(
                                    (plan.local_shape[0], k),
                                    dtype=getattr(torch, np.dtype(dtype).name),
                                    device=executor.kernels.device,
                                )
                                b_block = torch.from_numpy(b_local).to(executor.kernels.device)
                            else:
                                out, b_block = np.empty((plan.local_shape[0], k), dtype), b_local
                            for _ in range(2):
                                result = executor.multiply(b_block, out=out)
                                got = result.cpu().numpy() if backend == "torch" else result
                                assert result is out and got.dtype == dtype
                                np.testing.assert_array_equal(got, expected, err_msg=f"{label}/{mode}/T={threads}")
                                planned = np.zeros(size, np.int64)
                                for exchange in plan.exchanges:
                                    np.add.at(planned, exchange.recv_ranks, exchange.recv_counts * k * np.dtype(dtype).itemsize)
                                assert np.array_equal(executor.bytes_received_from, planned), f"{label}/{mode}: bytes"
                                assert not executor.delivery_problems, executor.delivery_problems
                                inter_node += int(executor.bytes_received_from[nodes != nodes[rank]].sum())
                        runs += 1
    return comm.allreduce(runs, op=MPI.SUM), comm.allreduce(inter_node, op=MPI.SUM)


def main() -> None:
    comm = MPI.COMM_WORLD
    seed = int(sys.argv[1])
    thread_counts = [int(t) for t in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1]
    transport, backend, device, names = (sys.argv[3:7] + ["mpi", "numpy", "cpu", "all"][len(sys.argv[3:7]) :])[:4]
    runs, inter_node = run_cases(comm, seed, thread_counts, transport, backend, device, names)
    if comm.Get_rank() == 0:
        print(f"OK {runs}")
        if os.environ.get("SPARSEWIRE_REPORT_INTER_NODE") == "1":
            print(f"INTER_NODE_BYTES {inter_node}")


if __name__ == "__main__":
    combine.PROGRESS_EVERY = 64  # the module docstring's pieces (not where a test imports this module)
    executor_module.PIECE_BYTES = SMALL_PIECE_BYTES
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
