"""Collective: run on every rank of a collective job by tests/mpi/test_traces.py (``check``).

A planted imbalance, the last rank sleeping
20 ms in its local product of each of five multiplies, must show in the summary as that phase's
Max/Min ratio (above 10) and a load-balance efficiency of about 1/P. Returns the summary (rank 0's)."""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

import sparsewire

SLEEP = 0.020


def check() -> dict | None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    matrix = sparsewire.distribute(comm, "stencil2d:40")
    start, stop = matrix.col_partition.range(rank)
    with matrix.spmm_plan(4, mode="overlap") as plan:
        plan.multiply(np.ones((stop - start, 4)))  # compiles the kernels
        if rank == size - 1:
            diagonal = plan.executor.combine.diagonal

            def slow(b, out, progress=None):
                time.sleep(SLEEP)
                diagonal(b, out, progress)

            plan.executor.combine.diagonal = slow
        with sparsewire.trace(plan) as tracer:
            for _ in range(5):
                plan.multiply(np.ones((stop - start, 4)))
    return tracer.summary if rank == 0 else None
