"""Whether a node's link is full duplex for MPI: rank 0 receives from every other rank while it sends to each,
with the bytes each way varied, against the time the busier direction takes alone at the link's rate. The cost
model (:func:`sparsewire.plan.cost.predicted_communication_seconds`) counts each direction of a node's link
apart; over TCP under UCX's default rendezvous for large messages, a node that sends while it receives
finished later than either direction alone, with no packet lost (docs/design-decisions.md, "UCX's
``get_zcopy`` rendezvous over TCP"). ``UCX_RNDV_SCHEME=get_zcopy`` (the receiver reads the data; the emulated cluster's
default, :meth:`sparsewire.testing.emulation.cluster.EmulatedCluster.mpi_environment`) lets the data stream.

Per case, 12 times: a barrier, then every message posted at once (``MPI_Isend``/``MPI_Irecv``) and waited for;
the median over ranks' maxima. The baseline is the same run's one-way case (rank 0 only receives): its rate
is what the link gives one direction. Run under the emulated cluster (root), one rank per node:

    sudo .venv/bin/sparsewire emulate --nodes 4 --ranks-per-node 1 --rate 1gbit -- \
        .venv/bin/python bench/cluster/link_directions.py
    sudo UCX_RNDV_SCHEME=put_zcopy .venv/bin/sparsewire emulate ... (UCX's default scheme over TCP, for comparison)
"""

from __future__ import annotations

import os
import time

import numpy as np
from mpi4py import MPI

from sparsewire.comm import wait_all

#: (MB each other rank sends to rank 0, MB rank 0 sends to each other rank)
CASES = [(3.4, 0.0), (3.4, 1.4), (3.4, 3.4), (1.4, 3.4)]


def exchange_seconds(comm: MPI.Comm, inward: int, outward: int) -> float:
    """Collective. One exchange: every rank but 0 sends ``inward`` bytes to rank 0, which sends ``outward`` bytes
    to each; the slowest rank's time."""
    rank, size = comm.Get_rank(), comm.Get_size()
    outgoing = np.ones(max(inward, outward), np.uint8)
    incoming = [np.empty(max(inward, outward), np.uint8) for _ in range(size)]
    comm.Barrier()
    started = time.perf_counter()
    if rank == 0:
        requests = [comm.Irecv(incoming[peer][:inward], source=peer, tag=1) for peer in range(1, size)]
        requests += [comm.Isend(outgoing[:outward], dest=peer, tag=2) for peer in range(1, size) if outward]
    else:
        requests = [comm.Isend(outgoing[:inward], dest=0, tag=1)]
        requests += [comm.Irecv(incoming[0][:outward], source=0, tag=2)] if outward else []
    wait_all(requests, yielding=True)
    return comm.allreduce(time.perf_counter() - started, op=MPI.MAX)


def main() -> None:
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise SystemExit("bench/cluster/link_directions.py needs at least 2 ranks, one per node")
    peers = comm.Get_size() - 1
    medians = []
    for inward, outward in CASES:
        times = [exchange_seconds(comm, int(inward * 1e6), int(outward * 1e6)) for _ in range(12)]
        medians.append(float(np.median(times[1:])))  # the first also makes the connections
    if comm.Get_rank() != 0:
        return
    one_way = peers * CASES[0][0] * 1e6 / medians[0]
    print(f"UCX_RNDV_SCHEME={os.environ.get('UCX_RNDV_SCHEME', '(unset)')}; one direction: {one_way / 1e6:.1f} MB/s")
    for (inward, outward), median in zip(CASES, medians):
        alone = peers * max(inward, outward) * 1e6 / one_way
        print(
            f"rank 0 receives {peers} x {inward:.1f} MB, sends {peers} x {outward:.1f} MB: {median * 1e3:7.1f} ms; "
            f"the busier direction alone {alone * 1e3:7.1f} ms; measured / that {median / alone:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
