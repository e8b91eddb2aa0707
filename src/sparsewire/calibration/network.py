"""The network's link classes, measured: latency and bandwidth inside a node and between nodes,
written as a calibration record (kind ``network``) that ``--topology FILE`` reads back as a
:class:`~sparsewire.topology.model.Topology` (:meth:`~sparsewire.topology.model.Topology.from_record`).

Groups come from MPI itself (``MPI_COMM_TYPE_SHARED``: the ranks sharing a node's memory). Per link
class (``intra_node``: two ranks of one node; ``inter_node``: rank 0 and the first rank of another
node), with every other rank waiting at a barrier:

* latency: half the median round trip of an 8-byte ping-pong;
* bandwidth per rank: a stream of ``message_bytes`` messages (8 in flight, timed until the receiver has them,
  :func:`_flows_rate`), bytes over the shortest of the repetitions' times (the link's capacity: other
  work on the machine only ever slows a repetition; on the 2-core machine the median of 5 fell
  15-25% short of a 5 Gbit/s link while a test suite ran beside it); for ``inter_node`` also with *every* rank of the
  first node sending to its partner on the second node at once, which shares the node's link
  (the figure the planner's per-rank ``LinkClass.bandwidth`` means), per pair at the slowest rank's time;
* for ``inter_node`` the aggregate: every rank sending to every rank of the other nodes at once (as a flat plan's
  messages cross; :func:`_crossing_flows`), the bytes all flows carry together over the slowest rank's time, the
  best of the repetitions: what the links of all nodes carry at once, less than the sum of their rates where
  something they all cross caps it (a switch's backplane, a fabric's bisection; on the emulated cluster of
  4 nodes x 1 rank at 5 Gbit/s, whose links the same two cores forward, 1.65-1.96 GB/s against 0.58-0.61 GB/s
  for one link alone; a ring of one flow per node, each rank to its partner on the next node, carried 1.25-1.65
  GB/s in the same job and 1.18-1.97 GB/s over the bench's calibrations: one flow a link each way moved less, and less
  steadily, than the three a flat plan's messages make there);
* for ``inter_node`` the burst (:func:`_burst`): what half a ``message_bytes`` message, sent after 50 ms of idle
  over every flow from the first node to the others at once, gains on the same sent right after, in bytes (a rate
  limiter's token bucket passes that much at once);
* for ``inter_node`` the overlap (:func:`~sparsewire.calibration.overlap.stream_overlap`): the fraction of a
  stream over the links (every node at once) that ranks computing the CSR kernel at the same time hide, as the
  overlapping modes multiply the diagonal block while the messages cross (the cost model's ``h``,
  :func:`~sparsewire.plan.cost.predicted_seconds`);
* for ``inter_node`` the piece overlap (:func:`~sparsewire.calibration.overlap.piece_overlap`): the same with the
  stream in pieces and the kernel run a row range after each piece arrives, as the overlap schedule applies the
  messages it cuts (the cost model's ``h_p``);
* for ``inter_node`` the relay, where a node has two ranks: what forwarding a message that crossed the link
  through a proxy adds beyond its two hops (:mod:`~sparsewire.calibration.relay`).

The planner's link class is then ``seconds = messages * latency + bytes / bandwidth`` (overhead 0:
the ping-pong's latency already holds the software's per-message time).

And the ``local`` rates, on every rank at once (:func:`_local_rate_samples`): the executor's CSR kernel in
nonzero-columns per second and a copy in bytes per second, which the cost model's local-work term
divides by (:func:`~sparsewire.plan.cost.predicted_local_seconds`); three windows of each before the links are
measured and three after, the median of the six (:func:`_local_rates`): on the emulated cluster the rates of
calibrations a few minutes apart had differed by up to 1.6x with consecutive windows (0.91-1.43e9
nonzero-columns per second), and with the windows spread 1.35-1.38e9 on all four clusters of the next run. After
each half, one window of the kernel and one of the copy on rank 0 alone while the others wait: the cost model's
contention term (:func:`~sparsewire.plan.cost.local_parts`).
"""

from __future__ import annotations

import functools
import statistics

import numpy as np
from mpi4py import MPI

from sparsewire._lib.cores import spin
from sparsewire.calibration.overlap import piece_overlap, stream_overlap
from sparsewire.calibration.relay import measure_relay, relay_ranks
from sparsewire.comm.runtime import node_ids, wait_all
from sparsewire.errors import InputError
from sparsewire.topology.records import stamp

__all__ = ["NETWORK_KIND", "measure_network"]

NETWORK_KIND = "network"
_TAG = 6100


def _ping_pong(comm: MPI.Comm, a: int, b: int, nbytes: int, repeat: int) -> float | None:
    """Median half round trip between ranks a and b (None on other ranks)."""
    rank = comm.Get_rank()
    buffer = np.zeros(max(nbytes, 1), np.uint8)
    times = []
    for i in range(repeat + 2):
        if rank == a:
            started = MPI.Wtime()
            comm.Send(buffer, b, _TAG)
            comm.Recv(buffer, b, _TAG)
            if i >= 2:  # two warm-ups: connections made, pages touched
                times.append((MPI.Wtime() - started) / 2)
        elif rank == b:
            comm.Recv(buffer, a, _TAG)
            comm.Send(buffer, a, _TAG)
    return statistics.median(times) if times else None


def _flows_rate(comm: MPI.Comm, flows: list[tuple[int, int]], nbytes: int, repeat: int, window: int = 8) -> float:
    """Bytes per second all ``flows`` (sender, receiver; a rank may send in one and receive in another) carry
    together, every flow at once: ``window`` messages of ``nbytes`` each (all in flight), the total over the slowest
    rank's time from a barrier until its last message is sent and received (a receiver's clock stops when the
    bytes have arrived); the best over the repetitions, on every rank. One flow: the link's rate; several from
    one node: the node's link shared."""
    rank = comm.Get_rank()
    message = np.ones(nbytes, np.uint8)
    receives = [(sender, np.empty(nbytes, np.uint8)) for sender, receiver in flows if receiver == rank for _ in range(window)]
    rates = []
    for i in range(repeat + 1):
        slowest = _timed_flows(comm, flows, message, receives, window, _TAG + 5)
        if i >= 1:  # the first makes the connections
            rates.append(len(flows) * window * nbytes / slowest)
    return max(rates)


def _timed_flows(comm: MPI.Comm, flows: list[tuple[int, int]], message: np.ndarray, receives, window: int, tag: int) -> float:
    """Seconds from a barrier until the slowest rank has sent ``window`` copies of ``message`` along each of its
    ``flows`` and received into each of its ``receives`` (sender, buffer), all in flight at once; on every rank."""
    rank = comm.Get_rank()
    comm.Barrier()
    started = MPI.Wtime()
    requests = [comm.Irecv(buffer, sender, tag) for sender, buffer in receives]
    requests += [comm.Isend(message, receiver, tag) for sender, receiver in flows if sender == rank for _ in range(window)]
    MPI.Request.Waitall(requests)
    return comm.allreduce(MPI.Wtime() - started, op=MPI.MAX)


def _ring_flows(nodes: np.ndarray) -> list[tuple[int, int]]:
    """Every rank's flow to its partner on the next node (node ids in order, the last to the first): the i-th rank of
    a node to the (i mod R')-th of the next, R' that node's ranks."""
    order = list(dict.fromkeys(int(n) for n in nodes))
    members = {node: [r for r in range(len(nodes)) if nodes[r] == node] for node in order}
    flows = []
    for position, node in enumerate(order):
        following = members[order[(position + 1) % len(order)]]
        flows += [(rank, following[i % len(following)]) for i, rank in enumerate(members[node])]
    return flows


def _crossing_flows(nodes: np.ndarray) -> list[tuple[int, int]]:
    """Every rank's flow to every rank of another node, in rank order."""
    size = len(nodes)
    return [(a, b) for a in range(size) for b in range(size) if nodes[a] != nodes[b]]


def _outgoing_flows(nodes: np.ndarray) -> list[tuple[int, int]]:
    """The flows of :func:`_crossing_flows` that leave rank 0's node: through its link out, and no other node's."""
    return [(a, b) for a, b in _crossing_flows(nodes) if nodes[a] == nodes[0]]


def _burst(comm: MPI.Comm, flows: list[tuple[int, int]], nbytes: int, latency: float, repeat: int) -> dict:
    """Bytes the links of ``flows`` pass at once after idle (a rate limiter's token bucket), on every rank: every
    flow sends its share of ``nbytes`` at once after 50 ms of idle, and again right after (the bucket then empty);
    each the slowest rank's time until its messages are sent and received, medians ``t_idle`` and ``t_busy`` over
    ``repeat`` tries; the burst ``nbytes (t_busy - t_idle) / (t_busy - latency)``, at least 0: what the idle
    transfer gained, at the rate the busy one had.

    The flows are every rank of one node to every rank of the others (:func:`_outgoing_flows`), as a plan's
    messages leave a node, and ``nbytes`` a few times a bucket. Why the two transfers: on the emulated cluster at
    5 Gbit/s (a bucket of 625 KB) one flow's single 4 MiB message against the stream's rate had measured 0-446 KB
    over twelve calibrations, and the node's flows against their stream's rate 347-816 KB, as that rate came out
    602-638 MB/s from one measurement to the next. Why the idle spins (:func:`~sparsewire._lib.cores.spin`) rather
    than sleeps: on the emulated cluster (2 nodes x 2 ranks on two cores) ranks woken from 50 ms of sleep were slow
    enough to hide the bucket at 1 Gbit/s: the idle transfer's median gained 0.15-0.96 ms on the busy one's, and the 10th to 90th
    percentile of its time spread over 10 ms; spinning, in the same jobs, it gained 1.21-1.36 ms within a spread of
    1-2 ms (with a busy loop running beside the ranks: -0.08 and 0.51 ms sleeping, 1.06 and 1.13 ms spinning)."""
    rank = comm.Get_rank()
    share = max(1, nbytes // len(flows))
    message = np.ones(share, np.uint8)
    receives = [(sender, np.empty(share, np.uint8)) for sender, receiver in flows if receiver == rank]
    idle, busy = [], []
    for i in range(repeat + 1):
        comm.Barrier()
        spin(0.05)
        after_idle = _timed_flows(comm, flows, message, receives, 1, _TAG + 3)
        right_after = _timed_flows(comm, flows, message, receives, 1, _TAG + 3)
        if i:  # the first also makes the connections
            idle.append(after_idle)
            busy.append(right_after)
    t_idle, t_busy = statistics.median(idle), statistics.median(busy)
    total = share * len(flows)
    burst = max(0.0, total * (t_busy - t_idle) / max(t_busy - latency, t_busy / 2))
    return {"bytes": burst, "idle_seconds": t_idle, "busy_seconds": t_busy, "message_bytes": total, "repeat": repeat}


def _local_rate_samples(
    comm: MPI.Comm, repeat: int, sharing: int, window: float
) -> tuple[list[float], list[float], list[float], list[float]]:
    """This rank's rates of ``repeat`` windows each, every rank at once as in a multiply: the executor's CSR kernel
    (R-MAT scale 16, edge factor 8, k = 32, float64, the rank's default threads) in nonzero-columns per second and a
    16 MiB copy in bytes per second, each repeated for ``window`` seconds (long against the scheduler's time slices,
    so ranks that share a core share it in the figure); then one window of each on rank 0 alone while the others
    wait (rank 0's lists; empty elsewhere): the rates a rank gets while the ranks whose messages are in wait for the
    rest. The waits for the others yield where the node is oversubscribed, as the executor's do."""
    from sparsewire._lib.cores import default_threads, oversubscribed
    from sparsewire.calibration.compute import benchmark_products, rate_over, rates_together

    threads = default_threads(sharing)
    [(product, product_work)] = benchmark_products([32], threads, sharing)
    source, target = np.ones(2 << 20), np.zeros(2 << 20)
    np.copyto(target, source)  # pages touched
    yielding = oversubscribed(sharing, threads)
    works = ((product, product_work), (functools.partial(np.copyto, target, source), source.nbytes))
    together = [rates_together(comm, work, size, repeat, window, yielding) for work, size in works]
    alone = []
    for work, size in works:
        wait_all([comm.Ibarrier()], yielding=yielding)
        alone.append([rate_over(work, size, window)] if comm.Get_rank() == 0 else [])
    wait_all([comm.Ibarrier()], yielding=yielding)
    return together[0], together[1], alone[0], alone[1]


def _local_rates(comm: MPI.Comm, parts: list[tuple[list[float], ...]], sharing: int, window: float) -> dict:
    """The ``local`` entry from :func:`_local_rate_samples` taken at several times of the calibration: per rank the
    median over all its windows, then the slowest rank's (it sets a multiply's time); and the medians of rank 0's
    windows alone (``alone_nonzero_columns_per_second``, ``alone_copy_bytes_per_second``)."""
    from sparsewire._lib.cores import default_threads
    from sparsewire.calibration.compute import BENCHMARK_MATRIX

    product = statistics.median([rate for part in parts for rate in part[0]])
    copy = statistics.median([rate for part in parts for rate in part[1]])
    alone = [[rate for part in parts for rate in part[i]] for i in (2, 3)]
    return {
        "nonzero_columns_per_second": comm.allreduce(product, op=MPI.MIN),
        "copy_bytes_per_second": comm.allreduce(copy, op=MPI.MIN),
        "alone_nonzero_columns_per_second": comm.bcast(statistics.median(alone[0]) if alone[0] else None, root=0),
        "alone_copy_bytes_per_second": comm.bcast(statistics.median(alone[1]) if alone[1] else None, root=0),
        "threads": default_threads(sharing),
        "matrix": BENCHMARK_MATRIX,
        "k": 32,
        "window_seconds": window,
        "windows": sum(len(part[0]) for part in parts),
    }


def measure_network(comm: MPI.Comm, message_bytes: int = 4 << 20, repeat: int = 10, progress=None) -> dict:
    """Collective. The ``network`` record of this job's ranks (module docstring): the groups
    (``rank_groups``: each rank's node, numbered in rank order), and per link class present
    ``latency_seconds``, ``bandwidth_bytes_per_second`` (per rank: for ``inter_node`` the rate when
    every rank of a node sends out at once), ``single_pair_bandwidth`` and the pair measured; for ``inter_node``
    also ``aggregate_bandwidth_bytes_per_second`` over ``aggregate_flows`` (every rank to every rank of the other
    nodes at once),
    ``burst_bytes`` with ``burst`` (its flows and times, :func:`_burst`), ``aggregate_burst_bytes`` with
    ``aggregate_burst`` (:func:`_burst` over ``aggregate_flows``, every node at once), ``overlap``
    (:func:`~sparsewire.calibration.overlap.stream_overlap`), ``piece_overlap``
    (:func:`~sparsewire.calibration.overlap.piece_overlap`) and, where a node has two ranks, ``relay_seconds``
    and ``relay_seconds_per_byte`` with
    ``relay`` (:func:`~sparsewire.calibration.relay.measure_relay`'s times).

    Raises:
        InputError on every rank with fewer than 2 ranks, or when no two ranks share a node and no
        two are on different nodes.
    """
    size = comm.Get_size()
    if size < 2:
        raise InputError("calibrate --network measures links between ranks: run it under mpiexec -n 2 or more")
    nodes = node_ids(comm)
    groups = np.unique(nodes, return_inverse=True)[1]
    classes: dict[str, dict] = {}
    same = [(a, b) for a in range(size) for b in range(a + 1, size) if nodes[a] == nodes[b]]
    other = [b for b in range(1, size) if nodes[b] != nodes[0]]
    measured = {"intra_node": same[0] if same else None, "inter_node": (0, other[0]) if other else None}
    sharing, window = int(np.count_nonzero(nodes == nodes[comm.Get_rank()])), 0.25
    if progress:
        progress("local rates: the CSR kernel and a copy on every rank at once (half now, half after the links)")
    local_parts = [_local_rate_samples(comm, 3, sharing, window)]
    for name, pair in measured.items():
        if pair is None:
            continue
        if progress:
            progress(f"{name}: ranks {pair[0]} and {pair[1]}, ping-pong and a stream of {message_bytes} byte messages")
        latency = comm.bcast(_ping_pong(comm, *pair, 8, repeat * 20), root=pair[0])
        single = _flows_rate(comm, [pair], message_bytes, repeat)
        entry = {"pair": list(pair), "latency_seconds": latency, "single_pair_bandwidth": single}
        if name == "inter_node":
            first = [r for r in range(size) if nodes[r] == nodes[0]]
            second = [r for r in range(size) if nodes[r] == nodes[pair[1]]]
            partners = list(zip(first, second))
            entry["concurrent_pairs"] = [list(p) for p in partners]
            entry["bandwidth_bytes_per_second"] = _flows_rate(comm, partners, message_bytes, repeat) / len(partners)
            crossing = _crossing_flows(nodes)
            entry["aggregate_flows"] = [list(flow) for flow in crossing]
            # about as many bytes as 8 messages per rank: the window the other streams keep in flight
            window_each = max(1, round(8 * size / len(crossing)))
            entry["aggregate_bandwidth_bytes_per_second"] = _flows_rate(comm, crossing, message_bytes, repeat, window_each)
            ring = _ring_flows(nodes)
            outgoing = _outgoing_flows(nodes)
            burst = _burst(comm, outgoing, message_bytes // 2, latency, 4 * repeat)  # half a message: a few buckets
            entry["burst_bytes"] = burst.pop("bytes")
            entry["burst"] = {"flows": [list(flow) for flow in outgoing], **burst}
            # every node at once, half a message each: what a common path passes after idle, not each link alone
            aggregate_burst = _burst(comm, crossing, (int(groups.max()) + 1) * (message_bytes // 2), latency, 4 * repeat)
            entry["aggregate_burst_bytes"] = aggregate_burst.pop("bytes")
            entry["aggregate_burst"] = aggregate_burst
            if progress:
                progress("inter_node: how much of a stream every node sends at once hides behind the CSR kernel")
            entry["overlap"] = stream_overlap(comm, ring, entry["aggregate_bandwidth_bytes_per_second"], sharing, 2 * repeat)
            if progress:
                progress("inter_node: how much of a stream in pieces hides the work done between them")
            entry["piece_overlap"] = piece_overlap(comm, ring, entry["aggregate_bandwidth_bytes_per_second"], sharing, 2 * repeat)
            relaying = relay_ranks(nodes)
            if relaying is not None:  # a relay needs a node of two ranks
                if progress:
                    progress(f"inter_node: what a relay through rank {relaying[1]} adds beyond its two hops")
                entry.update(measure_relay(comm, relaying, [message_bytes // 64, message_bytes // 2], 4 * repeat))
        else:
            entry["bandwidth_bytes_per_second"] = single
        classes[name] = entry
    if not classes:
        raise InputError("no link class to measure")
    if progress:
        progress("local rates: the other half")
    local_parts.append(_local_rate_samples(comm, 3, sharing, window))
    local = _local_rates(comm, local_parts, sharing, window)
    record = stamp(NETWORK_KIND)
    record.update(
        {
            "ranks": size,
            "rank_groups": [int(g) for g in groups],
            "group_size": int(np.bincount(groups).max()),
            "message_bytes": message_bytes,
            "repeat": repeat,
            "links": classes,
            "local": local,
        }
    )
    return record
