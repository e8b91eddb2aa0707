"""Modelled cluster networks: hosts, directed links and one fixed route (a list of links) per ordered
(source host, destination host) pair.

Every link is one direction of a cable with a capacity (bytes/s) and a propagation latency; a route
from host ``s`` to host ``d`` starts with ``s``'s uplink into its first switch and ends with ``d``'s
downlink, so the first link of a route is the host's NIC (send side) and the last the destination's
NIC (receive side). ``path_latency(s, d) = sum(link latencies) + switch_latency * (links - 1)``: the
NetSparse cluster (Table 5: 450 ns links, 300 ns switches) gives 1.2 us inside a rack and 2.7 us
across racks, as the paper's RTTs (2.4 / 5.4 us) say.

The builders of the machines are in :mod:`sparsewire.sim.network_builders`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sparsewire.errors import InputError
from sparsewire.topology.model import Level, LinkClass, Topology

__all__ = ["Network", "GIGABIT", "MAX_HOSTS"]

GIGABIT = 1e9 / 8  # bytes per second in one Gb/s
MAX_HOSTS = 4096  # the route table is dense over host pairs


@dataclass
class Network:
    """Hosts, directed links and the route of every host pair (see the module docstring).

    ``routes[s, d, :]`` holds the link ids of the route from host ``s`` to ``d``, padded with -1
    (all -1 when ``s == d``: a host's traffic to itself never enters the network).
    ``host_groups`` is the rack / node / switch of each host: the group whose traffic stays below
    one switch, used by the planner's topology and by the NetSparse top-of-rack mechanisms.
    ``message_overhead`` is software time per message at the sender (serialised per host);
    ``packet_header_bytes`` is added per ``mtu``-byte packet of every message. ``uplinks`` /
    ``downlinks`` are each host's network-card links (the InfiniBand NIC on GPU nodes), given by the
    builder.
    """

    name: str
    link_names: list[str]
    capacities: np.ndarray
    latencies: np.ndarray
    routes: np.ndarray
    host_groups: np.ndarray
    switch_latency: float = 0.0
    mtu: int = 1500
    packet_header_bytes: int = 50
    message_overhead: float = 1e-6
    link_kinds: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind_names: tuple[str, ...] = ()
    host_switches: np.ndarray | None = None
    uplinks: np.ndarray | None = None
    downlinks: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.capacities = np.asarray(self.capacities, np.float64)
        self.latencies = np.asarray(self.latencies, np.float64)
        self.routes = np.asarray(self.routes, np.int32)
        self.host_groups = np.asarray(self.host_groups, np.int64)
        self.host_switches = self.host_groups if self.host_switches is None else np.asarray(self.host_switches, np.int64)
        if self.link_kinds is None:
            self.link_kinds = np.zeros(self.capacities.size, np.int64)
            self.kind_names = self.kind_names or ("link",)
        if not np.all(np.isfinite(self.capacities) & (self.capacities > 0)):  # NaN fails both
            raise InputError(f"network {self.name!r}: every link needs a finite positive capacity")

    @property
    def n_hosts(self) -> int:
        """Number of hosts (ranks map to hosts 0, 1, ... in order)."""
        return int(self.routes.shape[0])

    @property
    def n_links(self) -> int:
        """Number of directed links."""
        return int(self.capacities.size)

    def route(self, source: int, destination: int) -> np.ndarray:
        """Not collective. Link ids from ``source`` to ``destination`` (empty for a host to itself)."""
        links = self.routes[source, destination]
        return links[links >= 0]

    def route_lists(self, sources: np.ndarray, destinations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Not collective. Routes of many pairs as CSR: ``(offsets, links)``, flow ``f``'s links are
        ``links[offsets[f]:offsets[f + 1]]``."""
        table = self.routes[np.asarray(sources, np.int64), np.asarray(destinations, np.int64)]
        valid = table >= 0
        offsets = np.zeros(table.shape[0] + 1, np.int64)
        np.cumsum(valid.sum(axis=1), out=offsets[1:])
        return offsets, table[valid].astype(np.int64)

    def path_latency(self, sources: np.ndarray, destinations: np.ndarray) -> np.ndarray:
        """Not collective. Zero-load one-way latency of each pair: link latencies plus ``switch_latency`` per switch."""
        table = self.routes[np.asarray(sources, np.int64), np.asarray(destinations, np.int64)]
        valid = table >= 0
        link_latency = np.where(valid, self.latencies[np.where(valid, table, 0)], 0.0).sum(axis=-1)
        hops = valid.sum(axis=-1)
        return link_latency + self.switch_latency * np.maximum(hops - 1, 0)

    def first_switches(self) -> np.ndarray:
        """Not collective. The switch each host's NIC plugs into (its top-of-rack switch), numbered 0, 1, ..."""
        return np.asarray(self.host_switches, np.int64)

    def host_uplinks(self) -> np.ndarray:
        """Not collective. Each host's NIC link in the send direction (the first link of its routes off its switch)."""
        return np.asarray(self.uplinks, np.int64)

    def host_downlinks(self) -> np.ndarray:
        """Not collective. Each host's NIC link in the receive direction."""
        return np.asarray(self.downlinks, np.int64)

    def planner_topology(self, n_ranks: int | None = None) -> Topology:
        """Not collective. The :class:`~sparsewire.topology.model.Topology` the planner's hierarchical strategies use for
        ranks on hosts ``0 .. n_ranks - 1``: level-0 groups = :attr:`host_groups`, link classes from
        one route inside a group and one between groups (bandwidth of its slowest link, its path
        latency, :attr:`message_overhead`)."""
        n_ranks = self.n_hosts if n_ranks is None else n_ranks
        if not 1 <= n_ranks <= self.n_hosts:
            raise InputError(f"network {self.name!r} has {self.n_hosts} hosts; cannot place {n_ranks} ranks (one per host)")
        groups = np.unique(self.host_groups[:n_ranks], return_inverse=True)[1]
        classes = {}
        for name, same in (("group", True), ("cluster", False)):
            pairs = (groups[:, None] == groups[None, :]) == same
            np.fill_diagonal(pairs, False)
            sources, destinations = np.nonzero(pairs)
            if sources.size:
                _, links = self.route_lists(sources[:1], destinations[:1])
                latency = float(self.path_latency(sources[:1], destinations[:1])[0])
                classes[name] = LinkClass(name, float(self.capacities[links].min()), latency, self.message_overhead)
        if len(classes) < 2:  # one group, or every rank alone: a single level
            link = next(iter(classes.values()), LinkClass("none", 1e12, 0.0, 0.0))
            return Topology(self.name, (Level("cluster", None, link),))
        size = int(np.bincount(groups).max())
        levels = (Level("group", size, classes["group"]), Level("cluster", None, classes["cluster"]))
        return Topology(self.name, levels, tuple(int(g) for g in groups))

    def kind_of(self, link: int) -> str:
        """Not collective. Name of a link's kind (``nic-up``, ``leaf-up``, ...)."""
        return self.kind_names[int(self.link_kinds[link])]

    def describe(self) -> str:
        """Not collective. One line: hosts, groups, link kinds with capacities."""
        kinds = []
        for index, kind in enumerate(self.kind_names):
            mask = self.link_kinds == index
            if mask.any():
                kinds.append(f"{int(mask.sum())} {kind} at {self.capacities[mask].max() / 1e9:g} GB/s")
        groups = int(self.host_groups.max()) + 1 if self.n_hosts else 0
        return f"{self.name}: {self.n_hosts} hosts in {groups} groups; " + ", ".join(kinds)
