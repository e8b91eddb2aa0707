"""Run under mpiexec on the emulated cluster: --multiplies products back to back (no collective
between them, as an iterative solver runs), then C checked against SciPy on rank 0.

Rank 0 prints ``READY`` once the multiplies start (the test takes a link down after it), then
``CHECK passed`` when every multiply finished and C is exact (integer data)."""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import sparsewire
from sparsewire.io.readers import load_matrix


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="mpi")
    parser.add_argument("--multiplies", type=int, default=1000)
    parser.add_argument("--wait-timeout", type=float, default=10.0)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    spec = "rmat:14:8:1"
    matrix = sparsewire.distribute(comm, spec)
    start, stop = matrix.col_partition.range(comm.Get_rank())
    n = matrix.shape[1]
    b_global = (np.arange(n * 8).reshape(n, 8) % 7).astype(np.float64)
    options = sparsewire.ExecOptions(
        strategy="joint",
        topology=sparsewire.Topology.from_mpi(comm),
        mode="overlap",
        transport=args.transport,
        wait_timeout=args.wait_timeout,
    )
    with matrix.spmm_plan(8, options=options) as plan:
        c_local = plan.multiply(b_global[start:stop])
        if comm.Get_rank() == 0:
            print("READY", flush=True)
        for _ in range(args.multiplies):
            c_local = plan.multiply(b_global[start:stop])
    c = matrix.gather_dense(c_local)
    if comm.Get_rank() == 0:
        exact = np.array_equal(c, load_matrix(spec) @ b_global)
        print("CHECK " + ("passed" if exact else "FAILED"), flush=True)


if __name__ == "__main__":
    main()
