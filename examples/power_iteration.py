"""Power iteration with one SpMM plan: the largest-magnitude eigenvalue of a symmetric matrix.

    mpiexec -n 2 .venv/bin/python examples/power_iteration.py [MATRIX] [--iterations N]

MATRIX is a file or generator spec (default ``stencil2d:16``, the 5-point Laplacian whose largest
eigenvalue is 4 - 4 cos(16 pi / 17)). One plan, made once, serves every multiply; with k = 1 it
is a distributed SpMV. Prints the eigenvalue estimate, and the exact one for stencil2d:N.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import sparsewire


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrix", nargs="?", default="stencil2d:16", help="matrix file or generator spec")
    parser.add_argument("--iterations", type=int, default=1000, help="multiplies (default: 1000)")
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    a = sparsewire.distribute(comm, args.matrix)  # rank 0 reads, every rank gets its rows
    start, stop = a.row_partition.range(comm.Get_rank())
    x = np.random.default_rng(1 + start).standard_normal((stop - start, 1))
    y = np.empty_like(x)
    estimate = 0.0
    with a.spmm_plan(1) as plan:  # square A: the input rows and the output rows are the same
        for _ in range(args.iterations):
            plan.multiply(x, out=y)
            norm = np.sqrt(comm.allreduce(float(np.vdot(y, y)), op=MPI.SUM))
            estimate = comm.allreduce(float(np.vdot(x, y)), op=MPI.SUM) / comm.allreduce(float(np.vdot(x, x)), op=MPI.SUM)
            np.divide(y, norm, out=x)
        if comm.Get_rank() == 0:
            print(plan.explain().splitlines()[1])
    if comm.Get_rank() == 0:
        print(f"largest |eigenvalue| estimate after {args.iterations} multiplies: {abs(estimate):.10f}")
        if args.matrix.startswith("stencil2d:") and args.matrix.count(":") == 1:
            n = int(args.matrix.split(":")[1])
            print(f"exact: {4 - 4 * np.cos(np.pi * n / (n + 1)):.10f}")


if __name__ == "__main__":
    main()
