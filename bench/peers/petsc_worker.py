"""PETSc side of bench/peers/vs_petsc.py. Run by the system Python (Debian's python3-petsc4py) under the
system ``mpirun``; needs only NumPy and petsc4py, never sparsewire.

    mpirun -n P python3 bench/peers/petsc_worker.py DIR K1,K2,... REPEAT

DIR holds ``indptr.npy``, ``indices.npy`` (the CSR pattern, values 1) and ``offsets.npy`` (the row
partition, the same as sparsewire's), and for a reordered matrix ``order.npy`` (position -> original index:
the pattern is then ``A[order][:, order]``). B is the same hash as ``sparsewire.io.generators.deterministic_dense``
of the original row indices, so the checksum is the same in any order.
Per k: ``C = A.matMult(B)`` once (symbolic + numeric; with A's assembly, the time to the first product), one
untimed ``matMult(B, result=C)``, then
REPEAT timed ``matMult(B, result=C)`` (numeric phase only, MAT_REUSE_MATRIX), each between two barriers
(so rank 0's time is the slowest rank's; Debian's system Python has no mpi4py for a max-reduction).
Prints one JSON line per k on rank 0.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
from petsc4py import PETSc


def hash_rows(ids: np.ndarray, k: int) -> np.ndarray:
    mask, shift, multiplier = np.uint64(0xFFFFFFFF), np.uint64(16), np.uint64(0x45D9F3B)
    rows = np.asarray(ids, dtype=np.uint64)[:, None]
    cols = np.arange(k, dtype=np.uint64)[None, :]
    x = (rows * np.uint64(2654435761) + cols * np.uint64(40503) + np.uint64(1)) & mask
    x = (((x >> shift) ^ x) * multiplier) & mask
    x = (((x >> shift) ^ x) * multiplier) & mask
    x = (x >> shift) ^ x
    return x / 2.0**32 - 0.5


def main() -> None:
    directory, ks, repeat = sys.argv[1], [int(v) for v in sys.argv[2].split(",")], int(sys.argv[3])
    comm = PETSc.COMM_WORLD
    rank, size = comm.getRank(), comm.getSize()
    indptr = np.load(f"{directory}/indptr.npy", mmap_mode="r")
    indices = np.load(f"{directory}/indices.npy", mmap_mode="r")
    offsets = np.load(f"{directory}/offsets.npy")
    order = np.load(f"{directory}/order.npy") if os.path.exists(f"{directory}/order.npy") else None
    assert offsets.size == size + 1, "row partition made for another rank count"
    n = int(indptr.size - 1)
    start, stop = int(offsets[rank]), int(offsets[rank + 1])
    ids = np.arange(start, stop) if order is None else order[start:stop]  # original indices of this rank's rows
    local_indptr = np.asarray(indptr[start : stop + 1] - indptr[start], dtype=PETSc.IntType)
    local_indices = np.asarray(indices[indptr[start] : indptr[stop]], dtype=PETSc.IntType)
    values = np.ones(local_indices.size, dtype=PETSc.ScalarType)
    comm.barrier()
    started = time.perf_counter()
    a = PETSc.Mat().createAIJ(((stop - start, n), (stop - start, n)), csr=(local_indptr, local_indices, values), comm=comm)
    a.assemble()  # (the off-diagonal columns' scatter: PETSc's plan)
    comm.barrier()
    assembly = time.perf_counter() - started
    for k in ks:
        b = PETSc.Mat().createDense(((stop - start, n), (PETSc.DECIDE, k)), array=np.asfortranarray(hash_rows(ids, k)), comm=comm)
        b.assemble()
        comm.barrier()
        started = time.perf_counter()
        c = a.matMult(b)  # symbolic and numeric: the first product
        comm.barrier()
        first = assembly + time.perf_counter() - started
        a.matMult(b, result=c)
        times = []
        for _ in range(repeat):
            comm.barrier()
            started = time.perf_counter()
            a.matMult(b, result=c)
            comm.barrier()
            times.append(time.perf_counter() - started)
        sums = PETSc.Vec().createMPI((1, size), comm=comm)
        sums.setValue(rank, float(c.getDenseArray().sum()))
        sums.assemble()
        total = sums.sum()
        if rank == 0:
            print(
                json.dumps(
                    {
                        "k": k,
                        "ranks": size,
                        "median_seconds": float(np.median(times)),
                        "checksum_sum": total,
                        "first_product_seconds": first,
                    }
                ),
                flush=True,  # fmt: skip
            )
        b.destroy()
        c.destroy()


if __name__ == "__main__":
    main()
