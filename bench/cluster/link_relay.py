"""What a relay costs beyond its two hops: one message from a rank of node 0 to the second rank of node 1, sent
directly, or to the first rank of node 1, which receives it whole, copies it and forwards it (a two-level plan's
proxy, store and forward), against the hop inside node 1 alone. Each way ends with an 8-byte acknowledgement to
the sender, whose clock times it from a barrier; the three ways take turns 40 times per size and the medians are
printed, with ``relay - direct - inside``: the time a relay adds beyond the bytes of both hops (the wait for the
whole message before forwarding, the copy, the proxy's wake-up). The cost model prices the two hops, not this.
Run under the emulated cluster (root):

    sudo .venv/bin/sparsewire emulate --nodes 2 --ranks-per-node 2 --rate 5gbit -- .venv/bin/python bench/cluster/link_relay.py
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

SIZES = [8, 65_536, 524_288, 2_097_152]
TURNS = 40
SENDER, PROXY, RECEIVER = 0, 2, 3  # node 0's first rank; node 1's two ranks


def main() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 4:
        raise SystemExit("bench/cluster/link_relay.py runs on 2 nodes x 2 ranks")
    acknowledgement = np.zeros(1)

    def one(way: str, message: np.ndarray) -> float:
        incoming = np.empty_like(message)
        first = PROXY if way == "inside" else SENDER
        comm.Barrier()
        started = time.perf_counter()
        if way == "relay":
            if rank == SENDER:
                comm.Send(message, PROXY)
                comm.Recv(acknowledgement, RECEIVER)
            elif rank == PROXY:
                comm.Recv(incoming, SENDER)
                comm.Send(incoming.copy(), RECEIVER)  # the proxy packs what it forwards
            elif rank == RECEIVER:
                comm.Recv(incoming, PROXY)
                comm.Send(acknowledgement, SENDER)
        elif rank in (first, RECEIVER):  # direct from node 0, or inside node 1 alone: one hop and its acknowledgement
            if rank == first:
                comm.Send(message, RECEIVER)
                comm.Recv(acknowledgement, RECEIVER)
            else:
                comm.Recv(incoming, first)
                comm.Send(acknowledgement, first)
        return comm.bcast(time.perf_counter() - started, root=first)

    ways = ("direct", "relay", "inside")
    for size in SIZES:
        message = np.ones(max(1, size // 8))
        times = {way: [] for way in ways}
        for _ in range(TURNS):
            for way in ways:
                times[way].append(one(way, message))
        if rank == 0:
            median = {way: float(np.median(values)) * 1e6 for way, values in times.items()}
            extra = median["relay"] - median["direct"] - median["inside"]
            print(
                f"{size:>9} bytes: direct {median['direct']:8.1f} us, relay {median['relay']:8.1f} us, inside node 1 "
                f"{median['inside']:7.1f} us; relay - direct - inside {extra:8.1f} us",
                flush=True,
            )


if __name__ == "__main__":
    main()
