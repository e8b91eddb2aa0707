"""Run under ``mpiexec -n P python tests/spgemm/spgemm_api_driver.py OUT.npz A [B] -- OPTIONS``: the library's
SpGEMM path (``distribute`` -> ``DistributedMatrix.spgemm`` for C, ``plan_spgemm`` for the bytes)
with the same options as ``sparsewire spgemm``; rank 0 writes C (original order) to OUT.npz and
prints one JSON line: the algorithm chosen and the bytes MPI delivered in one multiply."""

from __future__ import annotations

import argparse
import json

import scipy.sparse as sp
from mpi4py import MPI

from sparsewire import distribute, plan_spgemm
from sparsewire.spgemm.values import load_operand


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output")
    parser.add_argument("matrix")
    parser.add_argument("matrix2", nargs="?")
    parser.add_argument("--semiring", default="plus_times")
    parser.add_argument("--algorithm", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--grid")
    parser.add_argument("--phases", type=int, default=1)
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--stages-per-product", type=int, default=2)
    parser.add_argument("--partition", default="even")
    parser.add_argument("--values", default="file")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    root = comm.Get_rank() == 0
    a_global = load_operand(args.matrix, args.values) if root else None
    b_global = (a_global if args.matrix2 is None else load_operand(args.matrix2, args.values)) if root else None
    a = distribute(comm, a_global, args.partition)
    b = a if args.matrix2 is None else distribute(comm, b_global, a.right_operand_partitioning())
    options = dict(
        strategy=args.strategy,
        grid=args.grid,
        phases=args.phases,
        overlap=args.overlap,
        stages_per_product=args.stages_per_product,
    )
    c = a.spgemm(b, args.semiring, algorithm=args.algorithm, **options).gather()
    plan = plan_spgemm(a, b, args.semiring, algorithm=args.algorithm, **options)
    before = plan.bytes_received
    plan.multiply()
    moved = comm.allreduce(plan.bytes_received - before, op=MPI.SUM)
    algorithm = plan.algorithm
    plan.close()
    if root:
        sp.save_npz(args.output, c)
        print(json.dumps({"algorithm": algorithm, "bytes_moved": int(moved)}))


if __name__ == "__main__":
    main()
