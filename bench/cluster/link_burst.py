"""How fast one message crosses a link after the link was idle, against the sustained rate: a rate limiter's
token bucket (the emulated cluster's ``tbf``, or a cloud NIC's shaper) lets its burst through at once, so a
transfer of a few MB after idle beats ``bytes / bandwidth`` that ``calibrate --network``'s stream measures.

Two ranks, one on each node: per size, 8 times, a barrier and 50 ms of idle (the bucket refills), then rank 0
sends one message and waits for a one-byte reply; the median of the last 7, bytes over that time, and the time
against what the same run's largest message's rate (the sustained rate, the baseline) would take. Run under the
emulated cluster (root):

    sudo .venv/bin/sparsewire emulate --nodes 2 --ranks-per-node 1 --rate 5gbit -- .venv/bin/python bench/cluster/link_burst.py
"""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

SIZES = [262144, 655360, 1048576, 2097152, 4194304, 16777216]


def main() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        raise SystemExit("bench/cluster/link_burst.py runs on exactly 2 ranks, one per node")
    ack = np.zeros(1, np.uint8)
    medians = []
    for size in SIZES:
        message, times = np.ones(size, np.uint8), []
        for _ in range(8):
            comm.Barrier()
            time.sleep(0.05)
            if rank == 0:
                started = MPI.Wtime()
                comm.Send(message, 1, 1)
                comm.Recv(ack, 1, 2)
                times.append(MPI.Wtime() - started)
            else:
                comm.Recv(message, 0, 1)
                comm.Send(ack, 0, 2)
        if rank == 0:
            medians.append(float(np.median(times[1:])))  # the first also makes the connection
    if rank == 0:
        sustained = SIZES[-1] / medians[-1]
        print(f"sustained rate (the {SIZES[-1] / 1e6:.1f} MB message): {sustained / 1e6:.1f} MB/s")
        for size, median in zip(SIZES, medians):
            expected = size / sustained
            print(
                f"{size / 1e6:6.2f} MB after idle: {median * 1e3:7.3f} ms, {size / median / 1e6:7.1f} MB/s; at the sustained "
                f"rate {expected * 1e3:7.3f} ms, measured / that {median / expected:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
