"""NetSparse (MICRO'25): characterization of sparse communication (sec. 3), the in-network
mechanisms (secs. 5-6) on a modelled cluster, the SUOpt / SAOpt baselines (sec. 8.1), the ablation
(Table 8), sensitivity sweeps (Figs. 15, 17, 18) and topologies (Fig. 22).

The workload (sec. 2.1): node ``i`` owns an even block of rows of A and of the input property
array; a nonzero ``(r, c)`` of node ``i`` needs property ``c`` (``K`` elements of 4 bytes), a
*property request* (PR) to the owner of row ``c`` of the property array when that is another node.

Packet format (Fig. 6, Table 5): upper layers 50 B + concatenation layer 12 B per packet, 18 B per
PR, plus the payload for responses. An unconcatenated read + response pair therefore carries
``2 * (50 + 12 + 18) = 160`` header bytes, and the header share of SA traffic is
``160 / (160 + 4K)`` (Table 3). A packet of ``n`` PRs is ``62 + n * (18 + payload)`` bytes with
``n <= floor((MTU - 62) / (18 + payload))``.

Per configuration the request streams of :mod:`sparsewire.sim.netsparse.request_streams` give bytes per (source,
destination) pair; the max-min flow solver (:mod:`sparsewire.sim.flows`) gives the network time.
With the switch mechanisms the top-of-rack switch re-packs what its hosts send to other switches,
so a pair's traffic is two flows: host to switch (NIC packets, on the host's uplink) and switch to
destination (switch packets). The communication time is

    T = max(max over flows (completion + path latency) + one-way latency, PR generation time),

the added one-way latency being the read that precedes each response. The *tail node* is the node
whose flows finish last; its traffic is the bytes its NIC receives, its goodput the useful payload
it receives over ``T * line rate``, its line utilization all received bytes over ``T * line rate``.

The SUOpt / SAOpt baselines (sec. 8.1) are in :mod:`sparsewire.sim.netsparse.baselines`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from sparsewire.errors import InputError
from sparsewire.sim.netsparse import request_streams
from sparsewire.sim.netsparse.baselines import check_network, sa_opt, solve_pairs, su_opt, tail_node
from sparsewire.sim.netsparse.rig import IssuedReads, issue_reads
from sparsewire.sim.netsparse.workload import (
    ABLATION,
    CONCATENATION_HEADER_BYTES,
    ELEMENT_BYTES,
    PACKET_HEADER_BYTES,
    PAIR_HEADER_BYTES,
    REQUEST_HEADER_BYTES,
    TABLE3_K,
    UPPER_HEADER_BYTES,
    CommunicationResult,
    Hardware,
    Mechanisms,
    Progress,
    Workload,
    characterize,
    header_share_percent,
    requests_per_packet,
)
from sparsewire.sim.network import Network

__all__ = [
    "UPPER_HEADER_BYTES",
    "CONCATENATION_HEADER_BYTES",
    "REQUEST_HEADER_BYTES",
    "PAIR_HEADER_BYTES",
    "header_share_percent",
    "Workload",
    "characterize",
    "Mechanisms",
    "ABLATION",
    "Hardware",
    "CommunicationResult",
    "simulate_netsparse",
    "headline",
    "su_opt",
    "sa_opt",
    "ablation",
    "sweep",
    "SWEEPS",
    "TABLE3_K",
]


def default_batch(workload: Workload, units: int = 16) -> int:
    """The paper picks 32k (arabic, queen, stokes) or 8k (europe, uk) nonzeros per RIG command for
    2-5 M nonzeros per node; for smaller matrices one command would hold a node's whole stream and
    leave 15 of its 16 units idle. Default: the largest power of two in [256, 32768] that gives
    every unit of the busiest node at least one batch."""
    per_node = int(np.diff(workload.node_starts).max(initial=0))
    target = max(per_node // max(units, 1), 1)
    return int(min(32768, max(256, 1 << (target.bit_length() - 1))))


class NetSparseSimulator:
    """Runs NetSparse configurations of one workload on one network for one K, reusing the issued
    request streams between configurations that share the RIG-stage settings."""

    def __init__(self, workload: Workload, network: Network, k: int, progress: Progress = None) -> None:
        check_network(workload, network)
        self.workload = workload
        self.network = network
        self.k = k
        self.payload = ELEMENT_BYTES * k
        self.progress = progress
        n = workload.nodes
        hosts = np.arange(n)
        sources, destinations = np.meshgrid(hosts, hosts, indexing="ij")
        self.one_way = network.path_latency(sources.ravel(), destinations.ravel()).reshape(n, n)
        self.switch = network.first_switches()[:n]
        self._inter_pairs = self.switch[:, None] != self.switch[None, :]  # (requester, owner) pairs on different switches
        self._issued: dict[tuple, IssuedReads] = {}

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def batch(self, hardware: Hardware) -> int:
        """The RIG batch size in use (the hardware's, or :func:`default_batch`)."""
        return hardware.batch if hardware.batch is not None else default_batch(self.workload, hardware.units)

    def issue(self, hardware: Hardware, mechanisms: Mechanisms) -> IssuedReads:
        """The read PRs every node issues (the RIG stage, :func:`~sparsewire.sim.netsparse.rig.issue_reads`),
        cached per setting."""
        key = (
            self.batch(hardware),
            hardware.units,
            hardware.pending,
            hardware.command_seconds,
            hardware.clock_hz,
            mechanisms.filter,
            mechanisms.coalesce,
        )
        if key not in self._issued:
            self._issued[key] = issue_reads(self.workload, self.one_way, self.batch(hardware), hardware, mechanisms, self._say)
        return self._issued[key]

    def run(self, mechanisms: Mechanisms, hardware: Hardware = Hardware(), name: str | None = None) -> CommunicationResult:
        """Communication time and statistics of one configuration (module docstring): the issued
        reads (:meth:`issue`), packed at the requesters' NICs; the top-of-rack cache's hits
        (:meth:`_cache_hits`); the responses of the owners' NICs; with switch concatenation or
        the cache, what the switches send on (:meth:`_switch_flows`); then the flows solved on
        the network. Whatever depends on a request's (requester, owner) pair only is looked up in a
        table of the n^2 pairs rather than computed per request."""
        name = name or mechanisms.label()
        self._say(
            f"netsparse {name} (batch {self.batch(hardware)}, NIC delay {hardware.nic_delay_cycles}, cache "
            f"{hardware.cache_bytes})"
        )
        issued = self.issue(hardware, mechanisms)
        n, payload, mtu = self.workload.nodes, self.payload, self.network.mtu
        concatenate = mechanisms.nic_concatenation
        nic_delay = hardware.nic_delay_cycles if concatenate else 0
        requester, owner, times = issued.nodes, issued.destinations, issued.times
        pair = requester.astype(np.int64) * n
        pair += owner
        inter = self._inter_pairs.ravel()[pair]
        leaving_reads = int(np.count_nonzero(inter))
        # Reads at the requester's NIC.
        read_cap = requests_per_packet(0, mtu) if concatenate else 1
        read_packets = request_streams.concatenate(
            request_streams.order_by(requester, times), requester, owner, times, n, n, nic_delay, read_cap
        )
        read_requests = np.bincount(pair, minlength=n * n).reshape(n, n)
        hits, hit_packets, hit_bytes_down = self._cache_hits(issued, pair, inter, mechanisms, hardware)
        # Responses at the owner's NIC, in the order the reads arrive.
        served = ~hits
        s_req, s_own, s_pair = requester[served], owner[served], pair[served]
        arrival = times[served] + hardware.cycles(self.one_way).ravel()[s_pair]
        response_cap = requests_per_packet(payload, mtu) if concatenate else 1
        response_packets = request_streams.concatenate(
            request_streams.order_by(s_own, arrival), s_own, s_req, arrival, n, n, nic_delay, response_cap
        )
        response_requests = np.bincount(s_pair, minlength=n * n).reshape(n, n).T
        del s_pair
        nic_bytes = (
            (read_packets + response_packets) * PACKET_HEADER_BYTES
            + read_requests * REQUEST_HEADER_BYTES
            + response_requests * (REQUEST_HEADER_BYTES + payload)
        )
        if mechanisms.switch_concatenation or mechanisms.cache:
            pair_bytes, extra_flows = self._switch_flows(
                (requester, owner, times, inter), (served, s_req, s_own, arrival), nic_bytes, hit_bytes_down, mechanisms, hardware
            )
        else:
            pair_bytes, extra_flows = nic_bytes.astype(np.float64), []
        del pair, inter, served, s_req, s_own, arrival
        by_node, _, bound, flows, received = solve_pairs(self.network, n, pair_bytes, True, extra_flows)
        one_way = float(self.one_way[read_requests > 0].max(initial=0.0))  # over the pairs that request anything
        generation = issued.last_cycle / hardware.clock_hz
        finish = np.maximum(by_node + one_way, generation)
        seconds = float(finish.max(initial=0.0))
        tail, traffic, goodput, line_use = tail_node(self.network, self.workload, finish, received, seconds, payload)
        remote_total = int(self.workload.remote_counts().sum())
        dropped = issued.filtered + issued.coalesced
        return CommunicationResult(
            name,
            seconds,
            bound + one_way,
            tail,
            traffic,
            goodput,
            line_use,
            requests=int(read_requests.sum() + response_requests.sum() + hits.sum()),
            packets=int(read_packets.sum() + response_packets.sum()) + hit_packets,
            filter_coalesce_percent=100.0 * dropped / remote_total if remote_total else 0.0,
            cache_hit_percent=100.0 * float(hits.sum()) / max(leaving_reads, 1),
            flows=flows,
            extra={
                "generation_seconds": float(generation.max(initial=0.0)),
                "issued_requests": int(requester.size),
                "batch": self.batch(hardware),
                "filtered": issued.filtered,
                "coalesced": issued.coalesced,
            },
        )

    def _switch_delay(self, mechanisms: Mechanisms, hardware: Hardware) -> int:
        """Cycles a switch waits to concatenate (in NIC cycles), 0 without switch concatenation."""
        if not mechanisms.switch_concatenation:
            return 0
        return int(np.ceil(hardware.switch_delay_cycles * hardware.clock_hz / hardware.switch_clock_hz))

    def _cache_hits(
        self, issued: IssuedReads, pair: np.ndarray, inter: np.ndarray, mechanisms: Mechanisms, hardware: Hardware
    ) -> tuple[np.ndarray, int, np.ndarray]:
        """The top-of-rack cache for reads leaving the requester's switch: which reads hit, the
        packets the switches answer hits with, and the bytes they send down to each requester."""
        n, payload = self.workload.nodes, self.payload
        requester, times = issued.nodes, issued.times
        hits = np.zeros(requester.size, bool)
        if not (mechanisms.cache and inter.any()):
            return hits, 0, np.zeros(n, np.float64)
        line = max(hardware.cache_line_min, payload)
        unbounded = hardware.cache_bytes is None
        sets = 1 if unbounded else max(0, (hardware.cache_bytes // line) // hardware.cache_ways)
        sets = min(sets, self.workload.n_cols)  # set = column mod sets: past a set per column nothing more fits
        index = np.flatnonzero(inter)
        if unbounded or sets > 0:
            switch, lookup_times, fills = request_streams.cache_lookups(
                index,
                requester,
                pair,
                times,
                self.switch,
                hardware.cycles(self.network.latencies[self.network.host_uplinks()[:n]]),
                hardware.cycles(2 * self.one_way).ravel(),
            )
            order = request_streams.order_by(switch, lookup_times)
            hits[index] = request_streams.property_cache(
                order,
                switch,
                issued.cols[index],
                lookup_times,
                fills,
                max(sets, 1),
                hardware.cache_ways,
                unbounded,
                self.workload.n_cols,
            )
            del order, switch, lookup_times, fills
        hit_index = np.flatnonzero(hits)
        if not hit_index.size:
            return hits, 0, np.zeros(n, np.float64)
        hit_requester = requester[hit_index]
        switches = int(self.switch.max(initial=0)) + 1
        cap = requests_per_packet(payload, self.network.mtu) if mechanisms.switch_concatenation else 1
        hit_switch, hit_times = self.switch[hit_requester], times[hit_index]
        packets = request_streams.concatenate(
            request_streams.order_by(hit_switch, hit_times),
            hit_switch,
            hit_requester,
            hit_times,
            switches,
            n,
            self._switch_delay(mechanisms, hardware),
            cap,
        )
        per_requester = np.bincount(hit_requester, minlength=n)
        return (
            hits,
            int(packets.sum()),
            packets.sum(axis=0) * PACKET_HEADER_BYTES + per_requester * (REQUEST_HEADER_BYTES + payload),
        )

    def _switch_flows(
        self, reads: tuple, responses: tuple, nic_bytes, hit_bytes_down, mechanisms: Mechanisms, hardware: Hardware
    ):
        """With switch concatenation or the cache: the bytes between hosts of one switch (as
        pairs), and as extra flows the NIC links' bytes and what the switches send on (missed
        reads and responses leaving the source switch, packed per switch). ``reads``: every issued
        read's requester, owner, time and whether it leaves its switch; ``responses``: which reads the
        owners serve, with the served ones' requester, owner and arrival at the owner."""
        requester, owner, times, inter = reads
        served, s_req, s_own, arrival = responses
        n, payload, mtu = self.workload.nodes, self.payload, self.network.mtu
        switches = int(self.switch.max(initial=0)) + 1
        delay = self._switch_delay(mechanisms, hardware)
        read_cap = requests_per_packet(0, mtu) if mechanisms.switch_concatenation else 1
        response_cap = requests_per_packet(payload, mtu) if mechanisms.switch_concatenation else 1
        trunk = np.zeros((n, n), np.float64)
        missed = served & inter
        leaving = inter[served]
        for src, dst, t, cap, per_request in (
            (requester[missed], owner[missed], times[missed], read_cap, REQUEST_HEADER_BYTES),
            (s_own[leaving], s_req[leaving], arrival[leaving], response_cap, REQUEST_HEADER_BYTES + payload),
        ):
            if src.size == 0:
                continue
            src_switch = self.switch[src]
            switch_packets = request_streams.concatenate(
                request_streams.order_by(src_switch, t), src_switch, dst, t, switches, n, delay, cap
            )
            pair_requests = np.bincount(src.astype(np.int64) * n + dst, minlength=n * n).reshape(n, n).astype(np.float64)
            switch_requests = np.bincount(src_switch * n + dst, minlength=switches * n).reshape(switches, n).astype(float)
            share = pair_requests / np.maximum(switch_requests[self.switch[:n]], 1)
            trunk += share * switch_packets[self.switch[:n]] * PACKET_HEADER_BYTES + pair_requests * per_request
        inter_pairs = self._inter_pairs
        uplinks, downlinks = self.network.host_uplinks(), self.network.host_downlinks()
        extra_flows = []
        for host in range(n):
            extra_flows.append(([uplinks[host]], float(nic_bytes[host][inter_pairs[host]].sum()), 0.0, (host, -1)))
            extra_flows.append(([downlinks[host]], float(hit_bytes_down[host]), 0.0, (-1, host)))
        for s, d in zip(*np.nonzero(trunk)):
            extra_flows.append((self.network.route(int(s), int(d))[1:], float(trunk[s, d]), float(self.one_way[s, d]), (s, d)))
        return np.where(inter_pairs, 0.0, nic_bytes), extra_flows


def simulate_netsparse(
    workload: Workload,
    network: Network,
    k: int,
    mechanisms: Mechanisms = Mechanisms(),
    hardware: Hardware = Hardware(),
    progress: Progress = None,
) -> CommunicationResult:
    """Not collective. One NetSparse configuration (all mechanisms by default)."""
    return NetSparseSimulator(workload, network, k, progress).run(mechanisms, hardware)


def headline(
    simulator: NetSparseSimulator, hardware: Hardware, group_size: int, sa_cores: int, sa_overhead_seconds: float
) -> tuple[dict, CommunicationResult, CommunicationResult, CommunicationResult]:
    """Not collective. The report's head: the characterization (sec. 3, groups of ``group_size`` nodes), SUOpt,
    SAOpt (sec. 8.1, ``sa_cores`` cores per node) and NetSparse with every mechanism, in that order.

    The characterization and SAOpt read the workload only and share nothing with NetSparse's run, so they run in
    a second thread while NetSparse runs (their compiled kernels and NumPy's sorts release the GIL): the same
    results as one after the other. The workload's lazily made node columns are made first, not in both threads."""
    workload, network, k = simulator.workload, simulator.network, simulator.k
    workload.remote_columns()
    workload.remote_counts()
    su = su_opt(workload, network, k)
    simulator._say(f"characterization and SAOpt ({sa_cores} cores per node) beside NetSparse ...")
    with ThreadPoolExecutor(1) as pool:
        baselines = pool.submit(
            lambda: (characterize(workload, group_size=group_size), sa_opt(workload, network, k, sa_cores, sa_overhead_seconds))
        )
        full = simulator.run(Mechanisms(), hardware, "NetSparse")
        characterization, sa = baselines.result()
    return characterization, su, sa, full


def ablation(simulator: NetSparseSimulator, su: CommunicationResult, hardware: Hardware = Hardware()) -> list[dict]:
    """Not collective. Table 8: the mechanisms switched on one after the other, each row against SUOpt."""
    return [simulator.run(mechanisms, hardware, name).row(su) for name, mechanisms in ABLATION]


SWEEPS = {
    "batch": ("RIG batch size (nonzeros), speedup over batch 16384 (Fig. 15)", (2048, 4096, 8192, 16384, 32768, 65536), 16384),
    "delay": (
        "NIC concatenation delay (cycles; switch delay scaled by 1/4), speedup over no concatenation (Fig. 17)",
        (0, 50, 125, 500, 2000, 10000, 50000),
        None,
    ),
    "cache": (
        "property cache per switch (bytes; 0 = none, -1 = unbounded), speedup over no cache (Fig. 18)",
        (0, 2 << 20, 8 << 20, 32 << 20, 128 << 20, -1),
        0,
    ),
}


def sweep(simulator: NetSparseSimulator, what: str, hardware: Hardware = Hardware()) -> dict:
    """Not collective. One sensitivity sweep of :data:`SWEEPS` with every mechanism on."""
    if what not in SWEEPS:
        raise InputError(f"unknown sweep {what!r}; choose from {', '.join(SWEEPS)}")
    description, values, _ = SWEEPS[what]
    full = Mechanisms()
    points = []
    if what == "batch":
        results = [simulator.run(full, replace(hardware, batch=value), f"batch {value}") for value in values]
        base = results[values.index(16384)].seconds
    elif what == "delay":
        baseline = simulator.run(replace(full, nic_concatenation=False, switch_concatenation=False), hardware, "no concatenation")
        base = baseline.seconds
        results = [
            simulator.run(full, replace(hardware, nic_delay_cycles=value, switch_delay_cycles=value // 4), f"delay {value}")
            for value in values
        ]
    else:
        results = [
            simulator.run(
                replace(full, cache=value != 0), replace(hardware, cache_bytes=None if value < 0 else value), f"cache {value}"
            )
            for value in values
        ]
        base = results[0].seconds
    for value, result in zip(values, results):
        points.append(
            {
                "value": value,
                "seconds": result.seconds,
                "speedup": base / result.seconds if result.seconds else float("inf"),
                "cache_hit_percent": result.cache_hit_percent,
                "requests_per_packet": result.requests_per_packet,
                "filter_coalesce_percent": result.filter_coalesce_percent,
            }
        )
    return {"parameter": what, "description": description, "points": points}
