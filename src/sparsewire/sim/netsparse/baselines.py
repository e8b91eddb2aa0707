"""The NetSparse paper's software baselines (sec. 8.1), and the flow solving they share with the
simulator of :mod:`sparsewire.sim.netsparse.simulator`.

SUOpt receives every remote property at 100% line rate without headers,
``T = max_i (n_cols - own_i) * payload / line rate``. SAOpt runs the software SA scheme on
``cores`` cores per node (Conveyors): each core (its own rank) dedups its own requests perfectly,
concatenates per destination node up to the MTU, and spends ``overhead`` seconds per PR; no
network latency: ``T = max(network time, max over cores of PRs * overhead)``.
"""

from __future__ import annotations

import numpy as np

from sparsewire._lib.cores import in_turn, node_cores, on_threads
from sparsewire.errors import InputError
from sparsewire.sim.flows import solve_max_min
from sparsewire.sim.netsparse import request_streams
from sparsewire.sim.netsparse.workload import (
    ELEMENT_BYTES,
    PACKET_HEADER_BYTES,
    REQUEST_HEADER_BYTES,
    CommunicationResult,
    Workload,
    requests_per_packet,
)
from sparsewire.sim.network import Network

__all__ = ["su_opt", "sa_opt", "check_network", "solve_pairs", "tail_node"]


def check_network(workload: Workload, network: Network) -> None:
    """Not collective. Refuses a workload with more nodes than the network has hosts."""
    if workload.nodes > network.n_hosts:
        raise InputError(f"{workload.nodes} nodes do not fit network {network.name!r} with {network.n_hosts} hosts")


def tail_node(
    network: Network, workload: Workload, finish_by_node: np.ndarray, received: np.ndarray, seconds: float, payload: int
) -> tuple[int, int, float, float]:
    """Not collective. The tail node (whose flows finish last), its received bytes, goodput and line utilisation (%)."""
    tail = int(np.argmax(finish_by_node))
    capacity = float(network.capacities[network.host_downlinks()[tail]]) if network.n_hosts > 1 else 1.0
    useful = float(workload.useful()[tail]) * payload
    if seconds <= 0:
        return tail, int(received[tail]), 0.0, 0.0
    return tail, int(received[tail]), 100.0 * useful / (seconds * capacity), 100.0 * float(received[tail]) / (seconds * capacity)


def su_opt(workload: Workload, network: Network, k: int) -> CommunicationResult:
    """Not collective. SUOpt: every node receives every remote property at line rate, no headers, no latency."""
    check_network(workload, network)
    payload = ELEMENT_BYTES * k
    received = (workload.n_cols - workload.own_cols()) * payload
    capacity = network.capacities[network.host_downlinks()[: workload.nodes]] if workload.nodes > 1 else np.ones(1)
    times = received / capacity
    seconds = float(times.max(initial=0.0))
    tail, traffic, goodput, line = tail_node(network, workload, times, received, seconds, payload)
    return CommunicationResult("SUOpt", seconds, seconds, tail, traffic, goodput, line, extra={"model": "analytic"})


def solve_pairs(
    network: Network, nodes: int, pair_bytes: np.ndarray, latency: bool, extra_flows=()
) -> tuple[np.ndarray, float, float, int, np.ndarray]:
    """Not collective. Flows for a dense (source, destination) byte matrix over full routes plus extra single-route
    flows ``(route links, bytes, source, destination)``; returns the finish time per node, makespan,
    lower bound, flow count and bytes received per node (all flows' last link)."""
    sources, destinations = np.nonzero(pair_bytes)
    sizes = pair_bytes[sources, destinations].astype(np.float64)
    offsets, links = network.route_lists(sources, destinations)
    delays = network.path_latency(sources, destinations) if latency else np.zeros(sources.size)
    offsets_list, links_list = [offsets], [links]
    extra_sizes, extra_delays, extra_ends = [], [], []
    for route, size, delay, ends in extra_flows:
        if size <= 0:
            continue
        offsets_list.append(np.array([offsets_list[-1][-1] + len(route)]))
        links_list.append(np.asarray(route, np.int64))
        extra_sizes.append(size)
        extra_delays.append(delay if latency else 0.0)
        extra_ends.append(ends)
    all_offsets = np.concatenate(offsets_list)
    all_links = np.concatenate(links_list)
    all_sizes = np.concatenate([sizes, np.asarray(extra_sizes, np.float64)])
    result = solve_max_min(all_offsets, all_links, all_sizes, network.capacities)
    finish = result.finish + np.concatenate([delays, np.asarray(extra_delays, np.float64)])
    by_node = np.zeros(nodes)
    ends = np.concatenate(
        [np.stack([sources, destinations], 1).astype(np.int64), np.asarray(extra_ends, np.int64).reshape(-1, 2)]
    )
    for column in (0, 1):
        valid = ends[:, column] >= 0
        np.maximum.at(by_node, ends[valid, column], finish[valid])
    loads = np.bincount(all_links, weights=np.repeat(all_sizes, np.diff(all_offsets)), minlength=network.n_links)
    downlinks = network.host_downlinks()[:nodes]
    received = loads[downlinks] if nodes > 1 else np.zeros(1)
    return by_node, float(finish.max(initial=0.0)), result.lower_bound, int(all_sizes.size), received


def _core_reads(workload: Workload, cores: int) -> list[np.ndarray]:
    """Every node's reads per (core, owner node) (:func:`~sparsewire.sim.netsparse.request_streams.core_requests`). A node's reads
    are its own, so the nodes go to this machine's cores in threads, each with its own column stamps."""
    n = workload.nodes
    reads: list = [None] * n
    next_node = in_turn(range(n))

    def worker() -> None:
        stamp = np.full(workload.n_cols, -1, np.int64)
        for node in iter(next_node, None):
            begin, end = workload.node_starts[node], workload.node_starts[node + 1]
            reads[node] = request_streams.core_requests(
                workload.indices[begin:end], workload.remote[begin:end], workload.col_owner, cores, n, stamp, node * cores
            )

    on_threads(worker, min(node_cores(), n))
    return reads


def sa_opt(
    workload: Workload, network: Network, k: int, cores: int = 64, overhead_seconds: float = 800e-9
) -> CommunicationResult:
    """Not collective. SAOpt (module docstring): per-core perfect dedup, per (core, node) concatenation, software
    overhead per PR, no latency."""
    check_network(workload, network)
    payload = ELEMENT_BYTES * k
    n = workload.nodes
    read_cap = requests_per_packet(0, network.mtu)
    response_cap = requests_per_packet(payload, network.mtu)
    requests_per_core = np.zeros((n, cores), np.int64)
    pair_bytes = np.zeros((n, n), np.float64)
    packets = requests = 0
    for node, reads in enumerate(_core_reads(workload, cores)):
        requests_per_core[node] = reads.sum(axis=1)
        read_packets, response_packets = -(-reads // read_cap), -(-reads // response_cap)
        pair_bytes[node] += (read_packets * PACKET_HEADER_BYTES + reads * REQUEST_HEADER_BYTES).sum(axis=0)
        pair_bytes[:, node] += (response_packets * PACKET_HEADER_BYTES + reads * (REQUEST_HEADER_BYTES + payload)).sum(axis=0)
        packets += int(read_packets.sum() + response_packets.sum())
        requests += int(2 * reads.sum())
    by_node, makespan, bound, flows, received = solve_pairs(network, n, pair_bytes, latency=False)
    software = (requests_per_core.max(axis=1) * overhead_seconds).astype(np.float64)
    finish = np.maximum(by_node, software)
    seconds = float(finish.max(initial=0.0))
    tail, traffic, goodput, line = tail_node(network, workload, finish, received, seconds, payload)
    remote_total = int(workload.remote_counts().sum())
    return CommunicationResult(
        "SAOpt",
        seconds,
        max(bound, float(software.max(initial=0.0))),
        tail,
        traffic,
        goodput,
        line,
        requests=requests,
        packets=packets,
        filter_coalesce_percent=100.0 * (remote_total - requests // 2) / remote_total if remote_total else 0.0,
        flows=flows,
        extra={
            "software_seconds": float(software.max(initial=0.0)),
            "network_seconds": makespan,
            "cores": cores,
            "overhead_seconds_per_request": overhead_seconds,
        },
    )
