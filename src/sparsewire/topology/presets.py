"""The named machines of ``--topology NAME``, and :func:`parse_topology`, which reads every ``--topology`` value.

Presets (bandwidths per rank and direction from the papers' machines; latencies and per-message
overheads are typical published values, not measurements; ``flat`` and ``nodes:G`` use the assumed
constants of :mod:`sparsewire.topology.links`):

=================  ============  =======================================  ==========================================
preset             ranks/group   intra-group link                         inter-group link
=================  ============  =======================================  ==========================================
``flat``           all           network 12.5 GB/s, 2 us, 1 us            (none)
``nodes:G``        G             shared memory 50 GB/s, 1 us, 0.5 us      network 12.5 GB/s, 2 us, 2 us, proxy-based
``cola-a800``      8             NVLink 300 GB/s, 2 us, 1 us              InfiniBand 18 GB/s, 5 us, 5 us, proxy-based
``shiro-h100``     4             NVLink 450 GB/s, 2 us, 1 us              InfiniBand 25 GB/s, 5 us, 5 us, proxy-based
``leafspine-16``   16            leaf 400 Gb/s (50 GB/s), 1 us, 1 us      spine 400 Gb/s (50 GB/s), 3 us, 1 us
``netsparse-*``    16, 16,       400 Gb/s, 1.2 us, 1 us                   400 Gb/s, 2.7 / 2.7 / 3.45 / 1.95 us, 1 us
                   32, 4
=================  ============  =======================================  ==========================================

:data:`PRESETS` is the one table of named machines: each :class:`Machine` has the planner's
:class:`~sparsewire.topology.model.Topology` and, for those the simulator models (the two GPU clusters and
NetSparse's four
networks of 128 hosts: leafspine, fattree, dragonfly, hyperx), its network family.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparsewire.errors import InputError
from sparsewire.topology.model import Level, LinkClass, Topology

__all__ = ["Machine", "PRESETS", "parse_topology"]


@dataclass(frozen=True)
class Machine:
    """A named machine of :data:`PRESETS`: the planner's view of it and, where the simulator models
    it, the family of its network.

    Attributes:
        name: the preset's name (``--topology NAME`` everywhere).
        description: where its figures come from.
        topology: the :class:`Topology` the planner (``analyze``, ``spmm``, ``advise``) uses.
        network: the simulator's network family (``gpu-cluster``, ``leaf-spine``, ``fat-tree``,
            ``dragonfly``, ``hyperx``; :func:`sparsewire.sim.network.build_network`), or None for a
            machine the planner knows but the simulator does not model.
        hosts: the machine's size in ranks (None: any number).
    """

    name: str
    description: str
    topology: Topology
    network: str | None = None
    hosts: int | None = None


def _netsparse(name: str, description: str, network: str, group: str, group_size: int, cluster_latency: float) -> Machine:
    """NetSparse's Table 5 links (400 Gb/s, 450 ns per link, 300 ns per switch, 1 us per message):
    one route inside a group (host - switch - host) and one between groups, as
    ``Network.planner_topology`` reads them off the modelled network."""
    levels = (
        Level(group, group_size, LinkClass(group, 50e9, 1.2e-6, 1e-6)),
        Level("cluster", None, LinkClass("cluster", 50e9, cluster_latency, 1e-6)),
    )
    return Machine(name, description, Topology(name, levels), network, 128)


_NVLINK_CLUSTERS = {
    "cola-a800": ("CoLa's A800 nodes: 8 GPUs on NVLink 300 GB/s, InfiniBand 18 GB/s per GPU", 8, 300e9, 18e9),
    "shiro-h100": ("SHIRO's H100 nodes: 4 GPUs on NVLink 450 GB/s, InfiniBand 25 GB/s per GPU", 4, 450e9, 25e9),
}

#: Every named machine, read by the planner (``--topology`` of ``analyze``, ``spmm``, ``advise``,
#: ``gcn``) and by the simulator (``simulate``, ``netsparse``): one table, so a machine is added once.
PRESETS: dict[str, Machine] = {
    "flat": Machine("flat", "one network, every rank alike", Topology.flat()),
    **{
        name: Machine(
            name,
            description,
            Topology(
                name,
                (
                    Level("node", gpus, LinkClass("nvlink", nvlink, 2e-6, 1e-6)),
                    Level("cluster", None, LinkClass("infiniband", infiniband, 5e-6, 5e-6, proxy_based=True)),
                ),
            ),
            "gpu-cluster",
        )
        for name, (description, gpus, nvlink, infiniband) in _NVLINK_CLUSTERS.items()
    },
    "leafspine-16": Machine(
        "leafspine-16",
        "racks of 16 on 400 Gb/s leaf and spine links (planner only; simulate netsparse-leafspine)",
        Topology(
            "leafspine-16",
            (
                Level("rack", 16, LinkClass("leaf", 50e9, 1e-6, 1e-6)),
                Level("cluster", None, LinkClass("spine", 50e9, 3e-6, 1e-6)),
            ),
        ),
    ),
    "netsparse-leafspine": _netsparse(
        "netsparse-leafspine",
        "NetSparse Table 5: leaf-spine, racks of 16, 16 spines, 400 Gb/s, 450 ns links, 300 ns switches, 1500 B MTU",
        "leaf-spine",
        "rack",
        16,
        2.7e-6,
    ),
    "netsparse-fattree": _netsparse(
        "netsparse-fattree",
        "the Table 5 links as a two-level fat tree with a non-blocking core (racks of 16)",
        "fat-tree",
        "rack",
        16,
        2.7e-6,
    ),
    "netsparse-dragonfly": _netsparse(
        "netsparse-dragonfly",
        "NetSparse sec. 9.6: dragonfly, 32 switches in 4 groups, 4 hosts and 4 global links per switch",
        "dragonfly",
        "group",
        32,
        3.45e-6,
    ),
    "netsparse-hyperx": _netsparse(
        "netsparse-hyperx",
        "NetSparse sec. 9.6: HyperX 4x4x2 switches, 4 hosts per switch",
        "hyperx",
        "switch",
        4,
        1.95e-6,
    ),
}


def parse_topology(text: str) -> Topology:
    """Not collective. The topology of a preset of :data:`PRESETS` by name, ``nodes:G``, or a file
    written by ``sparsewire calibrate --network`` (:meth:`Topology.from_record`)."""
    from pathlib import Path

    if text.strip().endswith(".json") or Path(text).is_file():
        from sparsewire.topology.records import read_record

        record = read_record(text, "network", "write it with 'mpiexec -n P sparsewire calibrate --network --output FILE'")
        return Topology.from_record(record, f"measured:{Path(text).name}")
    name = text.strip().lower()
    if name in PRESETS:
        return PRESETS[name].topology
    if name.startswith("nodes:"):
        try:
            size = int(name.split(":", 1)[1])
        except ValueError:
            size = 0
        if size >= 1:
            return Topology.nodes(size)
    raise InputError(
        f"unknown topology {text!r}; choose nodes:G (G ranks per group), a file of 'sparsewire calibrate --network', or one "
        f"of {', '.join(PRESETS)}"
    )
