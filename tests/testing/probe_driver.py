"""Run under mpiexec on the emulated cluster: prints (rank 0) ``NODES`` (each rank's node as MPI
sees it: shared-memory groups numbered in rank order), ``CROSSING`` (bytes this job sent
between nodes in a ring of 4 MiB messages, checked on arrival) and ``ROUNDTRIP_US`` (the median
round trip of an 8-byte ping-pong between rank 0 and the last rank, timed by ``MPI.Wtime``) and
``THREADS`` (each rank's default thread count, as JSON) and ``RNDV`` (each rank's ``UCX_RNDV_SCHEME``, as
JSON)."""

from __future__ import annotations

import json
import os

import numpy as np
from mpi4py import MPI

from sparsewire._lib.cores import default_threads
from sparsewire.comm.runtime import node_ids, ranks_on_node


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    nodes = node_ids(comm)
    numbered = np.unique(nodes, return_inverse=True)[1]
    message = np.full(1 << 19, float(rank))  # 4 MiB
    received = np.empty_like(message)
    right, left = (rank + 1) % size, (rank - 1) % size
    for _ in range(4):
        comm.Sendrecv(message, right, 7, received, left, 7)
        assert (received == left).all()
    roundtrips = []
    peer = size - 1
    token = np.zeros(1)
    for _ in range(50 if size > 1 else 0):
        comm.Barrier()
        if rank == 0:
            started = MPI.Wtime()
            comm.Send(token, peer, 8)
            comm.Recv(token, peer, 8)
            roundtrips.append(MPI.Wtime() - started)
        elif rank == peer:
            comm.Recv(token, 0, 8)
            comm.Send(token, 0, 8)
    threads = comm.gather(default_threads(ranks_on_node(comm)), root=0)
    schemes = comm.gather(os.environ.get("UCX_RNDV_SCHEME"), root=0)
    crossing = sum(4 * message.nbytes for q in range(size) if nodes[q] != nodes[(q + 1) % size])
    if rank == 0:
        print("NODES " + " ".join(str(int(g)) for g in numbered), flush=True)
        print(f"CROSSING {crossing}", flush=True)
        print(f"THREADS {json.dumps(threads)}", flush=True)
        print(f"RNDV {json.dumps(schemes)}", flush=True)
        if roundtrips:
            print(f"ROUNDTRIP_US {np.median(roundtrips) * 1e6:.1f}", flush=True)


if __name__ == "__main__":
    main()
