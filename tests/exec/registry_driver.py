"""A transport registered from outside the library: the tests' ``recording`` transport
(tests/exec/extra_transports.py, one class and one registration) runs every mode it declares, on flat and grouped
strategies, with C exact against SciPy (integer data), the bytes MPI delivered equal to the plan's, and every
received message of every multiply seen by the recorder exactly once. :func:`recorded_runs` is a collective case's
body (tests/mpi/test_executor.py)."""

from __future__ import annotations

import extra_transports
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire
from sparsewire.exec.transports import transport_names


def recorded_runs(comm, seed: int) -> tuple[int, dict]:
    """Collective on ``comm``. Every run the module docstring names (asserting as it goes); returns their count and
    this rank's recorder's calls by name."""
    rank, size = comm.Get_rank(), comm.Get_size()
    extra_transports.CALLS.clear()
    rng = np.random.default_rng([seed, size])
    assert "recording" in transport_names()
    shape = (int(rng.integers(40, 90)), int(rng.integers(40, 90)))
    a = sp.random_array(shape, density=0.08, rng=rng, format="csr")
    a.data = rng.integers(-4, 5, a.nnz).astype(np.float64)
    a = sp.csr_array(a)
    matrix = sparsewire.distribute(comm, a if rank == 0 else None)
    k = int(rng.integers(1, 6))
    b = rng.integers(-3, 4, (shape[1], k)).astype(np.float64)
    b_local = b[slice(*matrix.col_partition.range(rank))]
    expected = (a @ b)[slice(*matrix.row_partition.range(rank))]
    runs = 0
    for strategy, topology in (("column", None), ("joint", None), ("joint-hier", sparsewire.Topology.nodes(2))):
        for mode in ("bulk", "overlap", "pipelined", "early"):
            with matrix.spmm_plan(
                k, np.float64, strategy=strategy, topology=topology, mode=mode, transport="recording", threads=1
            ) as plan:
                assert type(plan.executor.transport) is extra_transports.RecordingTransport
                for _ in range(2):
                    extra_transports.ARRIVALS.clear()
                    c = plan.multiply(b_local)
                    assert np.array_equal(c, expected), f"{strategy}/{mode}: C differs"
                    planned = sorted(
                        (ex.index, m, source) for ex in plan.executor.buffers.exchanges for m, source in enumerate(ex.recv_ranks)
                    )
                    assert sorted(extra_transports.ARRIVALS) == planned, (
                        f"{strategy}/{mode}: arrivals {extra_transports.ARRIVALS} != {planned}"
                    )
                received = comm.allreduce(plan.bytes_received, op=MPI.SUM)
                assert received == plan.stats.total_bytes, (
                    f"{strategy}/{mode}: {received} bytes delivered, {plan.stats.total_bytes} planned"
                )
                runs += 1
    return runs, dict(extra_transports.CALLS)
