"""What a relay costs beyond its two hops, measured for ``calibrate --network``: a two-level plan's proxy receives a
message whole before it sends it on (store and forward), and the cost model prices what that adds
(:func:`~sparsewire.plan.cost.predicted_relay_seconds`) from :func:`measure_relay`'s line."""

from __future__ import annotations

import statistics

import numpy as np
from mpi4py import MPI

from sparsewire._lib.cores import spin

__all__ = ["measure_relay", "relay_price", "relay_ranks"]

_TAG = 6120
#: Seconds every way waits before it starts: a rate limiter's bucket refills (256 KiB at 1 Gbit/s in 2 ms). Why: with
#: the ways right after each other on the emulated cluster the direct message, which followed an idle hop, found the
#: bucket fuller than the relayed one, which followed it: 2.2 ms of "extra" for 2 MiB at 1 Gbit/s in one job, 0.3 ms
#: in another where the order left less idle.
IDLE_SECONDS = 0.02


def relay_ranks(nodes: np.ndarray) -> tuple[int, int, int] | None:
    """Not collective. (sender, proxy, receiver) for :func:`measure_relay`: the first two ranks of the first node
    that has two, and the first rank of another node; None where no node has two ranks or there is one node."""
    for node in dict.fromkeys(int(n) for n in nodes):
        members = [r for r in range(len(nodes)) if nodes[r] == node]
        others = [r for r in range(len(nodes)) if nodes[r] != node]
        if len(members) >= 2 and others:
            return others[0], members[0], members[1]
    return None


def _forward(message: np.ndarray) -> np.ndarray:
    """What a proxy does to a message before it sends it on: a copy (the executor packs the rows it forwards)."""
    return message.copy()


def relay_price(sizes: list[int], extra: list[float]) -> tuple[float, float]:
    """Not collective. ``(relay_seconds, relay_seconds_per_byte)``: the line through the two sizes' extra times,
    each part at least 0 (a relay never saves time; a negative intercept is the small size's noise)."""
    (small, large), (e_small, e_large) = sizes, extra
    per_byte = max(0.0, (e_large - e_small) / (large - small))
    return max(0.0, e_small - per_byte * small), per_byte


def measure_relay(comm: MPI.Comm, ranks: tuple[int, int, int], sizes: list[int], repeat: int) -> dict:
    """Collective. What forwarding a message through a proxy adds beyond its two hops, as a two-level plan's proxy
    relays the B rows that crossed the node's link (SHIRO Alg. 1 stage II). Per size, three ways take turns ``repeat``
    times, each timed by the sender from a barrier after :data:`IDLE_SECONDS` of idle until an 8-byte
    acknowledgement from the receiver: ``direct`` (sender to receiver), ``relayed`` (sender to the proxy, which
    receives it whole, copies it and sends it on, :func:`_forward`) and ``inside`` (the proxy to the receiver alone,
    the second hop). ``extra = relayed - direct - inside`` of the medians (the wait for the whole message, the copy,
    the proxy's wake-up), and the price is the line through the two sizes' extras (:func:`relay_price`). Sender and
    proxy are on different nodes, proxy and receiver on one. Why measured, not derived from the hops' rates: on the
    emulated cluster (2 nodes x 2 ranks on 2 cores) it came to several times what the copy alone takes."""
    sender, proxy, receiver = ranks
    rank = comm.Get_rank()
    acknowledgement = np.zeros(1, np.uint8)

    def one(way: str, message: np.ndarray) -> float:
        first = proxy if way == "inside" else sender
        comm.Barrier()
        spin(IDLE_SECONDS)  # every way starts on an idle link, as a multiply between barriers does
        comm.Barrier()
        started = MPI.Wtime()
        if way == "relayed" and rank == proxy:
            incoming = np.empty_like(message)
            comm.Recv(incoming, sender, _TAG)
            comm.Send(_forward(incoming), receiver, _TAG)
        elif rank == first:
            comm.Send(message, proxy if way == "relayed" else receiver, _TAG)
            comm.Recv(acknowledgement, receiver, _TAG + 1)
        elif rank == receiver:
            comm.Recv(np.empty_like(message), proxy if way in ("relayed", "inside") else sender, _TAG)
            comm.Send(acknowledgement, first, _TAG + 1)
        return comm.bcast(MPI.Wtime() - started, root=first)

    ways = ("direct", "relayed", "inside")
    medians = {way: [] for way in ways}
    for size in sizes:
        message = np.ones(size, np.uint8)
        times = {way: [] for way in ways}
        for turn in range(repeat + 1):
            for way in ways:
                elapsed = one(way, message)
                if turn:  # the first turn makes the connections
                    times[way].append(elapsed)
        for way in ways:
            medians[way].append(statistics.median(times[way]))
    extra = [r - d - i for r, d, i in zip(medians["relayed"], medians["direct"], medians["inside"])]
    fixed, per_byte = relay_price(sizes, extra)
    return {
        "relay_seconds": fixed,
        "relay_seconds_per_byte": per_byte,
        "relay": {"ranks": list(ranks), "sizes": list(sizes), **medians, "extra": extra, "repeat": repeat},
    }
