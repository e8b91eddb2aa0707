"""The cluster as levels of groups of ranks, each level with a link class.

A :class:`Topology` is a list of :class:`Level` s, innermost first: ranks that share a group of level
0 (a node, say) talk over level 0's link; ranks whose smallest common group is level i talk over
level i's link. The last level always holds every rank. The planner's *groups* are the groups of level
0 (CoLa's workgroups, SHIRO's groups): traffic between ranks of one group is ``intra_group``, any
other traffic ``inter_group``.

Presets (bandwidths per rank and direction from the papers' machines; latencies and per-message
overheads are typical published values, not measurements):

=================  ============  =======================================  ==========================================
preset             ranks/group   intra-group link                         inter-group link
=================  ============  =======================================  ==========================================
``flat``           all           network 12.5 GB/s, 2 us, 1 us            (none)
``nodes:G``        G             shared memory 50 GB/s, 1 us, 0.5 us      network 12.5 GB/s, 2 us, 2 us, proxy-based
``cola-a800``      8             NVLink 300 GB/s, 2 us, 1 us              InfiniBand 18 GB/s, 5 us, 5 us, proxy-based
``shiro-h100``     4             NVLink 450 GB/s, 2 us, 1 us              InfiniBand 25 GB/s, 5 us, 5 us, proxy-based
``leafspine-16``   16            leaf 400 Gb/s (50 GB/s), 1 us, 1 us      spine 400 Gb/s (50 GB/s), 3 us, 1 us
=================  ============  =======================================  ==========================================

``Topology.from_mpi(comm)`` groups the ranks of each shared-memory node (``MPI_COMM_TYPE_SHARED``),
with the ``nodes:G`` link classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsewire.errors import InputError

__all__ = ["LinkClass", "Level", "Topology", "parse_topology", "PRESETS"]


@dataclass(frozen=True)
class LinkClass:
    """One kind of link: ``seconds(messages, bytes) = messages * (latency + overhead) + bytes / bandwidth``.

    ``proxy_based`` marks links driven by a proxy (InfiniBand under NVSHMEM, CoLa sec. 4.1 Issue #2),
    where many small messages congest the proxy queue; their ``overhead`` is set higher.
    """

    name: str
    bandwidth: float
    latency: float
    overhead: float
    proxy_based: bool = False

    def seconds(self, messages, nbytes):
        """Not collective. Time for ``messages`` messages carrying ``nbytes`` bytes in all, one after the other."""
        return np.asarray(messages) * (self.latency + self.overhead) + np.asarray(nbytes) / self.bandwidth


@dataclass(frozen=True)
class Level:
    """Groups of ``group_size`` consecutive ranks (``None``: one group of all ranks) joined by ``link``."""

    name: str
    group_size: int | None
    link: LinkClass


_SHARED_MEMORY = LinkClass("shared-memory", 50e9, 1e-6, 0.5e-6)
_NETWORK = LinkClass("network", 12.5e9, 2e-6, 2e-6, proxy_based=True)


@dataclass(frozen=True)
class Topology:
    """Levels of groups, innermost first; the last level spans all ranks.

    ``rank_groups`` (from :meth:`from_mpi`) fixes the level-0 group of every rank explicitly
    instead of consecutive blocks of ``levels[0].group_size``.
    """

    name: str
    levels: tuple[Level, ...]
    rank_groups: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.levels or self.levels[-1].group_size is not None:
            raise InputError(f"topology {self.name!r}: the last level must hold every rank (group_size None)")
        sizes = [level.group_size for level in self.levels[:-1]]
        if any(size is None or size < 1 for size in sizes) or sizes != sorted(sizes):
            raise InputError(f"topology {self.name!r}: inner levels need group sizes >= 1, growing outwards")

    @classmethod
    def flat(cls) -> Topology:
        """Not collective. One group of all ranks, one link class."""
        return cls("flat", (Level("machine", None, LinkClass("network", 12.5e9, 2e-6, 1e-6)),))

    @classmethod
    def nodes(cls, group_size: int) -> Topology:
        """Not collective. Groups of ``group_size`` consecutive ranks (the last may be smaller): ``nodes:G``."""
        if group_size < 1:
            raise InputError(f"group size must be at least 1 (got {group_size})")
        return cls(f"nodes:{group_size}", (Level("node", group_size, _SHARED_MEMORY), Level("cluster", None, _NETWORK)))

    @classmethod
    def from_mpi(cls, comm) -> Topology:
        """Collective. Groups = the ranks of ``comm`` sharing a memory node (``MPI_COMM_TYPE_SHARED``)."""
        from mpi4py import MPI

        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        leader = node.allreduce(comm.Get_rank(), op=MPI.MIN)
        node.Free()
        leaders = np.asarray(comm.allgather(leader))
        groups = np.unique(leaders, return_inverse=True)[1]
        largest = int(np.bincount(groups).max())
        levels = (Level("node", largest, _SHARED_MEMORY), Level("cluster", None, _NETWORK))
        return cls("mpi-nodes", levels, tuple(int(g) for g in groups))

    def groups(self, n_ranks: int) -> np.ndarray:
        """Not collective. Level-0 group id of each of ``n_ranks`` ranks (ids 0, 1, ... in order of first rank)."""
        return self.level_groups(0, n_ranks)

    def level_groups(self, level: int, n_ranks: int) -> np.ndarray:
        """Not collective. Group id of each rank at ``level``."""
        if level == 0 and self.rank_groups is not None:
            if len(self.rank_groups) != n_ranks:
                raise InputError(
                    f"topology {self.name!r} was made for {len(self.rank_groups)} ranks, not {n_ranks}; "
                    "build it on the communicator that runs the plan"
                )
            return np.asarray(self.rank_groups, np.int64)
        size = self.levels[level].group_size
        ranks = np.arange(n_ranks, dtype=np.int64)
        return np.zeros(n_ranks, np.int64) if size is None else ranks // size

    def link_levels(self, sources: np.ndarray, destinations: np.ndarray, n_ranks: int) -> np.ndarray:
        """Not collective. Index of the level whose link joins each (source, destination) pair: the smallest level
        at which both ranks share a group."""
        sources, destinations = np.asarray(sources, np.int64), np.asarray(destinations, np.int64)
        result = np.full(sources.shape, len(self.levels) - 1, np.int64)
        for level in reversed(range(len(self.levels) - 1)):
            groups = self.level_groups(level, n_ranks)
            result[groups[sources] == groups[destinations]] = level
        return result

    def describe(self) -> str:
        """Not collective. One line: levels, group sizes and links."""
        parts = []
        for level in self.levels:
            size = "all ranks" if level.group_size is None else f"{level.group_size} ranks"
            link = level.link
            parts.append(f"{level.name} ({size}): {link.name} {link.bandwidth / 1e9:g} GB/s, {link.latency * 1e6:g} us")
        return f"{self.name}: " + "; ".join(parts)


PRESETS = {
    "flat": Topology.flat(),
    "cola-a800": Topology(
        "cola-a800",
        (
            Level("node", 8, LinkClass("nvlink", 300e9, 2e-6, 1e-6)),
            Level("cluster", None, LinkClass("infiniband", 18e9, 5e-6, 5e-6, proxy_based=True)),
        ),
    ),
    "shiro-h100": Topology(
        "shiro-h100",
        (
            Level("node", 4, LinkClass("nvlink", 450e9, 2e-6, 1e-6)),
            Level("cluster", None, LinkClass("infiniband", 25e9, 5e-6, 5e-6, proxy_based=True)),
        ),
    ),
    "leafspine-16": Topology(
        "leafspine-16",
        (
            Level("rack", 16, LinkClass("leaf", 50e9, 1e-6, 1e-6)),
            Level("cluster", None, LinkClass("spine", 50e9, 3e-6, 1e-6)),
        ),
    ),
}


def parse_topology(text: str) -> Topology:
    """Not collective. A preset name (``flat``, ``cola-a800``, ``shiro-h100``, ``leafspine-16``) or ``nodes:G``."""
    name = text.strip().lower()
    if name in PRESETS:
        return PRESETS[name]
    if name.startswith("nodes:"):
        try:
            size = int(name.split(":", 1)[1])
        except ValueError:
            size = 0
        if size >= 1:
            return Topology.nodes(size)
    raise InputError(f"unknown topology {text!r}; choose nodes:G (G ranks per group) or one of {', '.join(PRESETS)}")
