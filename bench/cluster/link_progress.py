"""Whether a message crosses a link while both ends compute: MPICH moves a message over TCP past what the sockets
hold only inside an MPI call, so a product between the posts and the waits (the overlap mode's diagonal block)
hides only part of the transfer unless the product stops now and then to call MPI (``Transport.progress``,
``MPI_Iprobe``; the executor does it every ``combine.PROGRESS_EVERY`` multiply-adds).

Two ranks, one on each node, each sending one message to the other and computing a fixed amount of work (small
matrix products, as many as take ``COMPUTE_MS`` alone, agreed by the slower rank). Four ways, taking turns 15
times, the median of each (the slower rank's time from a barrier): the messages alone, the work alone, the work
with the messages in flight and no MPI call until the wait, and the work in pieces of about ``PIECE_MS`` with
``MPI_Iprobe`` after each. The baseline is the plain overlap: each size's line prints it and the pieces against
``max(messages, work)``, which an overlap that hides the whole transfer reaches. Run under the emulated cluster
(root):

    sudo .venv/bin/sparsewire emulate --nodes 2 --ranks-per-node 1 --rate 5gbit -- .venv/bin/python bench/cluster/link_progress.py
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

SIZES = [1_000_000, 8_000_000, 16_000_000]
COMPUTE_MS = 20.0
PIECE_MS = 0.5


def main() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        raise SystemExit("bench/cluster/link_progress.py runs on exactly 2 ranks, one per node")
    peer = 1 - rank
    block = np.random.default_rng(rank).random((64, 64))

    def products(count: int) -> None:
        for _ in range(count):
            block @ block

    started = time.perf_counter()
    products(2000)
    per_product = (time.perf_counter() - started) / 2000
    count = comm.allreduce(int(COMPUTE_MS / 1e3 / per_product), MPI.MIN)
    piece = max(1, int(PIECE_MS / 1e3 / per_product))

    def one(size: int, way: str) -> float:
        outgoing, incoming = np.ones(size // 8), np.empty(size // 8)
        comm.Barrier()
        started = time.perf_counter()
        requests = [] if way == "work" else [comm.Irecv(incoming, peer, 1), comm.Isend(outgoing, peer, 1)]
        if way in ("work", "overlap"):
            products(count)
        elif way == "pieces":
            for first in range(0, count, piece):
                products(min(piece, count - first))
                comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
        MPI.Request.Waitall(requests)
        return comm.allreduce(time.perf_counter() - started, MPI.MAX)

    ways = ("messages", "work", "overlap", "pieces")
    for size in SIZES:
        times = {way: [] for way in ways}
        for _ in range(15):
            for way in ways:
                times[way].append(one(size, way))
        if rank == 0:
            median = {way: float(np.median(values)) * 1e3 for way, values in times.items()}
            best = max(median["messages"], median["work"])
            print(
                f"{size / 1e6:5.1f} MB each way, {count} products: messages {median['messages']:6.2f} ms, work "
                f"{median['work']:6.2f} ms, overlapped {median['overlap']:6.2f} ms, in pieces with MPI_Iprobe "
                f"{median['pieces']:6.2f} ms; over max(messages, work): overlapped {median['overlap'] / best:.2f}, "
                f"in pieces {median['pieces'] / best:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
