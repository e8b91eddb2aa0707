"""The schedules that multiply the diagonal block while messages are in flight let the transport move them between
pieces of it (``StreamingCombine.diagonal``, ``Transport.progress``): in this process on ``MPI.COMM_SELF`` (no
mpiexec); tests/exec/test_buffers.py checks the pieces themselves."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import sparsewire
from sparsewire._lib.cores import NODE_CORES_VARIABLE
from sparsewire.exec import combine
from sparsewire.exec.transports.mpi import MpiTransport


@pytest.mark.parametrize("mode, per_multiply", [("overlap", 6), ("early", 6), ("pipelined", 6), ("bulk", 0)])
def test_the_overlapping_modes_let_mpi_progress_between_pieces_of_the_diagonal_block(monkeypatch, rng, mode, per_multiply):
    monkeypatch.setenv(NODE_CORES_VARIABLE, "1")  # one rank, one thread: the core is its own
    calls = []
    monkeypatch.setattr(MpiTransport, "progress", lambda self: calls.append(1))
    # stencil2d:6: 36 rows, 156 nonzeros; k = 4: 624 multiply-adds, pieces of 104 are 6 (bulk multiplies it alone).
    monkeypatch.setattr(combine, "PROGRESS_EVERY", 104)
    matrix = sparsewire.distribute(MPI.COMM_SELF, "stencil2d:6")
    a = matrix.gather()
    assert a.nnz == 156
    with matrix.spmm_plan(4, mode=mode, threads=1) as plan:
        for repeat in range(1, 4):
            b = rng.integers(-9, 10, (36, 4)).astype(np.float64)
            np.testing.assert_array_equal(plan.multiply(matrix.rows_of(b)), a @ b)
            assert len(calls) == per_multiply * repeat


def test_ranks_that_share_their_cores_multiply_the_diagonal_block_whole(monkeypatch, rng):
    """Where ranks x threads exceed the node's cores (here half a core for one rank) the pieces cost more than
    they hide (docs/benchmarks.md): no progress calls, the same product."""
    monkeypatch.setenv(NODE_CORES_VARIABLE, "0.5")
    calls = []
    monkeypatch.setattr(MpiTransport, "progress", lambda self: calls.append(1))
    monkeypatch.setattr(combine, "PROGRESS_EVERY", 104)
    matrix = sparsewire.distribute(MPI.COMM_SELF, "stencil2d:6")
    b = rng.integers(-9, 10, (36, 4)).astype(np.float64)
    with matrix.spmm_plan(4, mode="overlap", threads=1) as plan:
        np.testing.assert_array_equal(plan.multiply(matrix.rows_of(b)), matrix.gather() @ b)
    assert calls == []
