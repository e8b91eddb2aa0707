"""The modelled networks of :mod:`sparsewire.sim.network`, one builder per family (all routes deterministic):

* :func:`leaf_spine`: racks of ``rack_size`` hosts under one top-of-rack (leaf) switch, every leaf
  wired to every one of ``spines`` spines by one link each way; inter-rack traffic to host ``d`` uses
  spine ``d mod spines`` (d-mod-k routing), so two flows to destinations equal mod ``spines`` share a
  leaf uplink even when other spines idle.
* :func:`fat_tree`: a two-level fat tree whose core is non-blocking: traffic is sprayed over all
  uplinks, modelled as one aggregated uplink and downlink per leaf of ``uplinks x bandwidth``.
* :func:`dragonfly`: groups of fully connected switches with ``hosts_per_switch`` hosts each; every
  switch has ``global_ports`` global links, spread evenly over the pairs of groups; minimal routing
  (local hop to the gateway switch, global hop, local hop to the destination's switch), the global
  link of a group pair chosen by ``(source + destination) mod links``.
* :func:`hyperx`: switches on a grid (e.g. 4x4x2), every pair of switches that differ in one
  coordinate directly linked, dimension-order routing (NetSparse sec. 9.6 uses 4x4x2 with 4 hosts
  per switch).
* :func:`gpu_cluster`: nodes of ``gpus_per_node`` GPUs on an NVSwitch (one NVLink port each way per
  GPU), one InfiniBand NIC per GPU into a non-blocking fat tree (CoLa's A800 and SHIRO's H100 nodes).

:func:`build_network` makes the network of a named machine of :data:`sparsewire.topology.presets.PRESETS`
(the table the planner reads too) for a host count.
"""

from __future__ import annotations

import numpy as np

from sparsewire.errors import InputError
from sparsewire.sim.network import GIGABIT, MAX_HOSTS, Network
from sparsewire.topology.model import LinkClass
from sparsewire.topology.presets import PRESETS

__all__ = ["leaf_spine", "fat_tree", "dragonfly", "hyperx", "gpu_cluster", "network_presets", "build_network"]


class _Builder:
    """Collects links and routes; shared by the builders below."""

    def __init__(self, n_hosts: int, kinds: tuple[str, ...]) -> None:
        if n_hosts < 1 or n_hosts > MAX_HOSTS:
            raise InputError(f"networks model 1..{MAX_HOSTS} hosts (got {n_hosts})")
        self.n_hosts = n_hosts
        self.kinds = kinds
        self.names: list[str] = []
        self.capacities: list[float] = []
        self.latencies: list[float] = []
        self.link_kinds: list[int] = []
        self.nic_up = self.nic_down = np.zeros(0, np.int64)

    def links(self, kind: str, names: list[str], capacity: float, latency: float) -> np.ndarray:
        start = len(self.names)
        self.names += names
        self.capacities += [capacity] * len(names)
        self.latencies += [latency] * len(names)
        self.link_kinds += [self.kinds.index(kind)] * len(names)
        return np.arange(start, start + len(names), dtype=np.int64)

    def network(self, name: str, routes: np.ndarray, groups: np.ndarray, **options) -> Network:
        n = self.n_hosts
        routes = np.asarray(routes, np.int32)
        routes[np.arange(n), np.arange(n), :] = -1
        return Network(
            name,
            self.names,
            np.array(self.capacities),
            np.array(self.latencies),
            routes,
            groups,
            link_kinds=np.array(self.link_kinds, np.int64),
            kind_names=self.kinds,
            uplinks=self.nic_up,
            downlinks=self.nic_down,
            **options,
        )


def _host_links(builder: _Builder, capacity: float, latency: float) -> tuple[np.ndarray, np.ndarray]:
    hosts = range(builder.n_hosts)
    up = builder.links("nic-up", [f"host{h}->switch" for h in hosts], capacity, latency)
    down = builder.links("nic-down", [f"switch->host{h}" for h in hosts], capacity, latency)
    builder.nic_up, builder.nic_down = up, down
    return up, down


def leaf_spine(
    n_hosts: int,
    rack_size: int = 16,
    spines: int = 16,
    bandwidth: float = 400 * GIGABIT,
    link_latency: float = 450e-9,
    switch_latency: float = 300e-9,
    name: str = "leaf-spine",
    **options,
) -> Network:
    """Not collective. Racks of ``rack_size`` hosts, ``spines`` spines, d-mod-k routing (module docstring)."""
    if rack_size < 1 or spines < 1:
        raise InputError("leaf-spine needs a rack size and a spine count of at least 1")
    racks = -(-n_hosts // rack_size)
    builder = _Builder(n_hosts, ("nic-up", "nic-down", "leaf-up", "spine-down"))
    up, down = _host_links(builder, bandwidth, link_latency)
    leaf_up = builder.links(
        "leaf-up", [f"leaf{r}->spine{s}" for r in range(racks) for s in range(spines)], bandwidth, link_latency
    )
    spine_down = builder.links(
        "spine-down", [f"spine{s}->leaf{r}" for r in range(racks) for s in range(spines)], bandwidth, link_latency
    )
    hosts = np.arange(n_hosts)
    rack = hosts // rack_size
    source, destination = np.meshgrid(hosts, hosts, indexing="ij")
    spine = destination % spines
    routes = np.full((n_hosts, n_hosts, 4), -1, np.int64)
    routes[..., 0] = up[source]
    same = rack[source] == rack[destination]
    routes[..., 1] = np.where(same, down[destination], leaf_up[rack[source] * spines + spine])
    routes[..., 2] = np.where(same, -1, spine_down[rack[destination] * spines + spine])
    routes[..., 3] = np.where(same, -1, down[destination])
    return builder.network(name, routes, rack, switch_latency=switch_latency, **options)


def fat_tree(
    n_hosts: int,
    rack_size: int = 16,
    uplinks: int = 16,
    bandwidth: float = 400 * GIGABIT,
    link_latency: float = 450e-9,
    switch_latency: float = 300e-9,
    name: str = "fat-tree",
    **options,
) -> Network:
    """Not collective. Two-level fat tree with a non-blocking core: per leaf one aggregated uplink and downlink of
    ``uplinks * bandwidth`` (traffic sprayed over all spines)."""
    racks = -(-n_hosts // rack_size)
    builder = _Builder(n_hosts, ("nic-up", "nic-down", "leaf-up", "spine-down"))
    up, down = _host_links(builder, bandwidth, link_latency)
    leaf_up = builder.links("leaf-up", [f"leaf{r}->core" for r in range(racks)], uplinks * bandwidth, link_latency)
    leaf_down = builder.links("spine-down", [f"core->leaf{r}" for r in range(racks)], uplinks * bandwidth, link_latency)
    hosts = np.arange(n_hosts)
    rack = hosts // rack_size
    source, destination = np.meshgrid(hosts, hosts, indexing="ij")
    same = rack[source] == rack[destination]
    routes = np.full((n_hosts, n_hosts, 4), -1, np.int64)
    routes[..., 0] = up[source]
    routes[..., 1] = np.where(same, down[destination], leaf_up[rack[source]])
    routes[..., 2] = np.where(same, -1, leaf_down[rack[destination]])
    routes[..., 3] = np.where(same, -1, down[destination])
    return builder.network(name, routes, rack, switch_latency=switch_latency, **options)


def dragonfly(
    n_hosts: int,
    hosts_per_switch: int = 4,
    switches_per_group: int = 8,
    global_ports: int = 4,
    bandwidth: float = 400 * GIGABIT,
    link_latency: float = 450e-9,
    switch_latency: float = 300e-9,
    name: str = "dragonfly",
    **options,
) -> Network:
    """Not collective. Dragonfly with minimal routing (module docstring); groups are the host groups."""
    switches = -(-n_hosts // hosts_per_switch)
    groups = -(-switches // switches_per_group)
    builder = _Builder(n_hosts, ("nic-up", "nic-down", "local", "global"))
    up, down = _host_links(builder, bandwidth, link_latency)
    local = {}
    for a in range(switches):
        for b in range(switches):
            if a != b and a // switches_per_group == b // switches_per_group:
                local[a, b] = builder.links("local", [f"switch{a}->switch{b}"], bandwidth, link_latency)[0]
    # Global links: each group has switches_per_group * global_ports ports, shared evenly by the
    # other groups; the gateways of a group pair rotate over the group's switches.
    per_pair = max(1, (switches_per_group * global_ports) // max(groups - 1, 1))
    global_links: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    next_gateway = [0] * groups
    for g in range(groups):
        for h in range(g + 1, groups):
            for _ in range(per_pair):
                a = min(g * switches_per_group + next_gateway[g] % switches_per_group, switches - 1)
                b = min(h * switches_per_group + next_gateway[h] % switches_per_group, switches - 1)
                next_gateway[g] += 1
                next_gateway[h] += 1
                forward = builder.links("global", [f"switch{a}->switch{b}"], bandwidth, link_latency)[0]
                backward = builder.links("global", [f"switch{b}->switch{a}"], bandwidth, link_latency)[0]
                global_links.setdefault((g, h), []).append((a, b, forward))
                global_links.setdefault((h, g), []).append((b, a, backward))
    switch_of = np.arange(n_hosts) // hosts_per_switch
    group_of = switch_of // switches_per_group
    routes = np.full((n_hosts, n_hosts, 5), -1, np.int64)
    for s in range(n_hosts):
        for d in range(n_hosts):
            if s == d:
                continue
            path = [up[s]]
            a, b = switch_of[s], switch_of[d]
            if group_of[s] != group_of[d]:
                candidates = global_links[group_of[s], group_of[d]]
                gateway, remote, link = candidates[(s + d) % len(candidates)]
                if a != gateway:
                    path.append(local[a, gateway])
                path.append(link)
                a = remote
            if a != b:
                path.append(local[a, b])
            path.append(down[d])
            routes[s, d, : len(path)] = path
    return builder.network(name, routes, group_of, switch_latency=switch_latency, host_switches=switch_of, **options)


def hyperx(
    n_hosts: int,
    shape: tuple[int, ...] = (4, 4, 2),
    hosts_per_switch: int = 4,
    bandwidth: float = 400 * GIGABIT,
    link_latency: float = 450e-9,
    switch_latency: float = 300e-9,
    name: str = "hyperx",
    **options,
) -> Network:
    """Not collective. HyperX: switches on a grid, all-to-all links along each dimension, dimension-order routing.
    Host groups are the switches."""
    switches = int(np.prod(shape))
    if switches * hosts_per_switch < n_hosts:
        raise InputError(
            f"hyperx {shape} with {hosts_per_switch} hosts per switch holds {switches * hosts_per_switch} hosts, not {n_hosts}"
        )
    builder = _Builder(n_hosts, ("nic-up", "nic-down", "dimension"))
    up, down = _host_links(builder, bandwidth, link_latency)
    coordinates = np.array(np.unravel_index(np.arange(switches), shape)).T
    link = {}
    for a in range(switches):
        for b in range(switches):
            if a != b and int((coordinates[a] != coordinates[b]).sum()) == 1:
                link[a, b] = builder.links("dimension", [f"switch{a}->switch{b}"], bandwidth, link_latency)[0]
    switch_of = np.arange(n_hosts) // hosts_per_switch
    routes = np.full((n_hosts, n_hosts, 2 + len(shape)), -1, np.int64)
    for s in range(n_hosts):
        for d in range(n_hosts):
            if s == d:
                continue
            path = [up[s]]
            here = coordinates[switch_of[s]].copy()
            target = coordinates[switch_of[d]]
            for dim in range(len(shape)):
                if here[dim] != target[dim]:
                    nxt = here.copy()
                    nxt[dim] = target[dim]
                    path.append(link[int(np.ravel_multi_index(here, shape)), int(np.ravel_multi_index(nxt, shape))])
                    here = nxt
            path.append(down[d])
            routes[s, d, : len(path)] = path
    return builder.network(name, routes, switch_of, switch_latency=switch_latency, **options)


def gpu_cluster(
    n_hosts: int,
    gpus_per_node: int,
    nvlink: LinkClass,
    infiniband: LinkClass,
    name: str = "gpu-cluster",
) -> Network:
    """Not collective. Nodes of ``gpus_per_node`` GPUs on an NVSwitch; one InfiniBand NIC per GPU into a non-blocking
    fat tree. Path latencies equal the link classes' latencies; ``message_overhead`` is the
    InfiniBand class's (proxy-based transport, CoLa sec. 4.1)."""
    nodes = -(-n_hosts // gpus_per_node)
    builder = _Builder(n_hosts, ("nvlink-up", "nvlink-down", "nic-up", "nic-down", "core"))
    hosts = range(n_hosts)
    nv_up = builder.links("nvlink-up", [f"gpu{h}->nvswitch" for h in hosts], nvlink.bandwidth, nvlink.latency / 2)
    nv_down = builder.links("nvlink-down", [f"nvswitch->gpu{h}" for h in hosts], nvlink.bandwidth, nvlink.latency / 2)
    nic_up = builder.links("nic-up", [f"gpu{h}->ib" for h in hosts], infiniband.bandwidth, infiniband.latency / 3)
    nic_down = builder.links("nic-down", [f"ib->gpu{h}" for h in hosts], infiniband.bandwidth, infiniband.latency / 3)
    builder.nic_up, builder.nic_down = nic_up, nic_down
    core = builder.links(
        "core", [f"node{n}->core" for n in range(nodes)], gpus_per_node * infiniband.bandwidth, infiniband.latency / 3
    )
    host = np.arange(n_hosts)
    node = host // gpus_per_node
    source, destination = np.meshgrid(host, host, indexing="ij")
    same = node[source] == node[destination]
    routes = np.full((n_hosts, n_hosts, 3), -1, np.int64)
    routes[..., 0] = np.where(same, nv_up[source], nic_up[source])
    routes[..., 1] = np.where(same, nv_down[destination], core[node[source]])
    routes[..., 2] = np.where(same, -1, nic_down[destination])
    return builder.network(name, routes, node, switch_latency=0.0, message_overhead=infiniband.overhead)


NETSPARSE_OPTIONS = dict(mtu=1500, packet_header_bytes=50, message_overhead=1e-6)
_FAMILIES = {"leaf-spine": leaf_spine, "fat-tree": fat_tree, "dragonfly": dragonfly, "hyperx": hyperx}


def network_presets() -> list[str]:
    """Not collective. The names in :data:`sparsewire.topology.presets.PRESETS` that the simulator models."""
    return [name for name, machine in PRESETS.items() if machine.network is not None]


def build_network(preset: str, n_hosts: int | None = None) -> Network:
    """Not collective. The network of a preset for ``n_hosts`` hosts (default: the preset's own size; GPU presets
    need a count). NetSparse presets accept fewer hosts than 128 (the first ones of the machine)."""
    name = preset.strip().lower()
    machine = PRESETS.get(name)
    if machine is None or machine.network is None:
        problem = (
            f"{preset!r} is a planner topology the simulator does not model" if machine else f"unknown network preset {preset!r}"
        )
        raise InputError(f"{problem}; choose one of {', '.join(network_presets())}")
    default = machine.hosts
    hosts = n_hosts if n_hosts is not None else default
    if hosts is None:
        raise InputError(f"preset {name!r} needs a host (rank) count")
    if default is not None and hosts > default:
        raise InputError(f"preset {name!r} has {default} hosts; asked for {hosts}. Use fewer ranks or another preset")
    if machine.network in _FAMILIES:
        return _FAMILIES[machine.network](hosts, name=name, **NETSPARSE_OPTIONS)
    node, cluster = machine.topology.levels
    return gpu_cluster(hosts, node.group_size, node.link, cluster.link, name=name)
