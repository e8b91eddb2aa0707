"""The cluster as levels of groups of ranks, each level with a link class.

A :class:`Topology` is a list of :class:`Level` s, innermost first: ranks that share a group of level
0 (a node, say) talk over level 0's link; ranks whose smallest common group is level i talk over
level i's link. The last level always holds every rank. The planner's *groups* are the groups of level
0 (CoLa's workgroups, SHIRO's groups): traffic between ranks of one group is ``intra_group``, any
other traffic ``inter_group``.

The named machines (``--topology NAME``) are in :mod:`~sparsewire.topology.presets`; ``flat`` and ``nodes:G``
use the assumed constants of :mod:`sparsewire.topology.links`.

``Topology.from_mpi(comm)`` groups the ranks of each shared-memory node (``MPI_COMM_TYPE_SHARED``),
with the ``nodes:G`` link classes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sparsewire.errors import InputError
from sparsewire.topology import links

__all__ = ["LinkClass", "Level", "Topology"]


@dataclass(frozen=True)
class LinkClass:
    """One kind of link: ``seconds(messages, bytes) = messages * (latency + overhead) + bytes / bandwidth``.

    ``proxy_based`` marks links driven by a proxy (InfiniBand under NVSHMEM, CoLa sec. 4.1, its second issue),
    where many small messages congest the proxy queue; their ``overhead`` is set higher.
    ``shared`` marks a bandwidth that belongs to a level-0 group (a node's one network card), not
    to each rank: the bytes of all the group's ranks queue on it
    (:func:`~sparsewire.plan.cost.predicted_communication_seconds`). Measured links are
    (``calibrate --network``). ``burst``: bytes a shared link passes at once after it was idle (a rate
    limiter's token bucket), measured by ``calibrate --network``; 0 where unknown. ``aggregate``: bytes per
    second the shared links of all groups carry together, every group sending at once (``calibrate --network``);
    None where unknown or unlimited. ``aggregate_burst``: bytes all groups' links pass at once after idle, every
    group sending at once (``calibrate --network``; 0 where unknown: every byte crosses the aggregate at its rate).
    ``relay_seconds`` and ``relay_seconds_per_byte``: what forwarding a message of b bytes that crossed this link
    through a proxy adds beyond its two hops, ``relay_seconds + relay_seconds_per_byte * b`` (store and forward: the
    proxy has the whole message before it sends it on), measured by ``calibrate --network``; 0 where unknown.
    """

    name: str
    bandwidth: float
    latency: float
    overhead: float
    proxy_based: bool = False
    shared: bool = False
    burst: float = 0.0
    aggregate: float | None = None
    aggregate_burst: float = 0.0
    relay_seconds: float = 0.0
    relay_seconds_per_byte: float = 0.0

    def seconds(self, messages, nbytes):
        """Not collective. Time for ``messages`` messages carrying ``nbytes`` bytes in all, one after the other."""
        return np.asarray(messages) * (self.latency + self.overhead) + np.asarray(nbytes) / self.bandwidth


@dataclass(frozen=True)
class Level:
    """Groups of ``group_size`` consecutive ranks (``None``: one group of all ranks) joined by ``link``."""

    name: str
    group_size: int | None
    link: LinkClass


#: A shared link's fields that ``calibrate --network`` measures besides rate and latency: their names in its record.
_MEASURED_LINK_FIELDS = {"burst": "burst_bytes", "aggregate_burst": "aggregate_burst_bytes"}
_MEASURED_LINK_FIELDS.update({name: name for name in ("relay_seconds", "relay_seconds_per_byte")})

# Assumed, not measured: sparsewire.topology.links says where they come from.
_SHARED_MEMORY = LinkClass("shared-memory", *links.SHARED_MEMORY)
_NETWORK = LinkClass("network", *links.NETWORK, proxy_based=True)


@dataclass(frozen=True)
class Topology:
    """Levels of groups, innermost first; the last level spans all ranks.

    ``rank_groups`` (from :meth:`from_mpi`) fixes the level-0 group of every rank explicitly
    instead of consecutive blocks of ``levels[0].group_size``. ``local_rate``: nonzero-columns per second
    of the executor's CSR kernel on each rank, and ``copy_rate``: bytes per second one rank copies, each
    while every rank of the job does the same (measured by ``calibrate --network``; None: unknown, and
    predictions count communication only, :func:`~sparsewire.plan.cost.predicted_seconds`); ``local_rate_alone``:
    the CSR kernel's rate on one rank while the others wait (None: unknown, taken as ``local_rate``), and
    ``copy_rate_alone`` the copy's (None: taken as ``copy_rate``); ``local_rate_matrix``: the matrix ``local_rate``
    was measured on (``calibrate --network``'s R-MAT, or the matrix a job multiplies, :meth:`with_local_rate`);
    ``overlap``: the fraction of a stream over the links that ranks computing at the same time hide, in [0, 1]
    (measured by ``calibrate --network``; None: unknown, taken as 1, the stream hides whole behind the work,
    :func:`~sparsewire.plan.cost.predicted_seconds`); ``piece_overlap``: the same for a stream in pieces with the work
    done between them, as the overlap schedule applies the messages it cuts (measured by ``calibrate --network``;
    None: unknown, and the work on the pieces is priced after the link).
    """

    name: str
    levels: tuple[Level, ...]
    rank_groups: tuple[int, ...] | None = None
    local_rate: float | None = None
    copy_rate: float | None = None
    local_rate_alone: float | None = None
    local_rate_matrix: str | None = None
    copy_rate_alone: float | None = None
    overlap: float | None = None
    piece_overlap: float | None = None

    def __post_init__(self) -> None:
        for field in ("overlap", "piece_overlap"):
            value = getattr(self, field)
            if value is not None and not (isinstance(value, (int, float)) and 0.0 <= value <= 1.0):
                raise InputError(f"topology {self.name!r}: {field} must be a fraction within [0, 1] (got {value!r})")
        if not self.levels or self.levels[-1].group_size is not None:
            raise InputError(f"topology {self.name!r}: the last level must hold every rank (group_size None)")
        sizes = [level.group_size for level in self.levels[:-1]]
        if any(size is None or size < 1 for size in sizes) or sizes != sorted(sizes):
            raise InputError(f"topology {self.name!r}: inner levels need group sizes >= 1, growing outwards")

    @classmethod
    def flat(cls) -> Topology:
        """Not collective. One group of all ranks, one link class."""
        return cls("flat", (Level("machine", None, LinkClass("network", *links.FLAT_NETWORK)),))

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

    @classmethod
    def from_record(cls, record: dict, name: str = "measured") -> Topology:
        """Not collective. The topology of a ``network`` calibration record
        (:func:`sparsewire.calibration.network.measure_network`): its measured link classes (overhead
        0; the inter-node one ``shared`` by a node's ranks at the one-pair bandwidth, the node's link, with its
        burst, the aggregate of all nodes at once and the relay's price where measured),
        groups of its ``group_size`` (or exactly its ``rank_groups`` when those are not
        consecutive blocks, which then fixes the rank count), the local rates of its ``local`` entry
        where it has one, and the inter-node link's measured ``overlap`` and ``piece_overlap`` fractions where it has
        them.

        Raises:
            InputError naming the field when the record lacks what a topology needs.
        """
        try:
            links_measured = record["links"]
            if not isinstance(links_measured, dict) or not {"intra_node", "inter_node"} & set(links_measured):
                raise ValueError(f"links = {links_measured!r}, which measures neither intra_node nor inter_node")
            size, groups = record["group_size"], record["rank_groups"]
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"group_size = {size!r}, not a whole number >= 1")
            whole = isinstance(groups, list) and groups and all(isinstance(g, int) and not isinstance(g, bool) for g in groups)
            if not whole or min(groups) < 0:
                raise ValueError(f"rank_groups = {groups!r}, not a list of group numbers >= 0, one per rank")
            counts = np.bincount(groups)
            if not counts.all():
                raise ValueError(f"rank_groups = {groups!r}, whose groups are not numbered 0, 1, ... without a gap")
            if counts.max() > size:
                raise ValueError(f"rank_groups = {groups!r}, with a group larger than group_size = {size}")

            def check(where: str, value, positive: bool) -> None:
                # what the command line refuses (NaN, infinity, true, a rate of 0) is refused here too
                number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                if not number or value < 0 or (positive and value == 0):
                    raise ValueError(f"{where} = {value!r}, not a finite number {'> 0' if positive else '>= 0'}")

            def measured(key: str, label: str, shared: bool) -> LinkClass:
                entry = links_measured[key]
                field = "single_pair_bandwidth" if shared else "bandwidth_bytes_per_second"
                check(f"{key}.{field}", entry[field], True)
                check(f"{key}.latency_seconds", entry["latency_seconds"], False)
                # the shared link's other measures; each absent in records before it was measured (0: unknown)
                extras = {name: entry.get(f, 0.0) if shared else 0.0 for name, f in _MEASURED_LINK_FIELDS.items()}
                for name, value in extras.items():
                    check(f"{key}.{_MEASURED_LINK_FIELDS[name]}", value, False)
                aggregate = entry.get("aggregate_bandwidth_bytes_per_second") if shared else None  # likewise (None)
                if aggregate is not None:
                    check(f"{key}.aggregate_bandwidth_bytes_per_second", aggregate, True)
                return LinkClass(
                    label,
                    float(entry[field]),
                    float(entry["latency_seconds"]),
                    0.0,
                    shared=shared,
                    aggregate=None if aggregate is None else float(aggregate),
                    **{name: float(value) for name, value in extras.items()},
                )

            intra = measured("intra_node", "measured intra-node", False) if "intra_node" in links_measured else _SHARED_MEMORY
            rate_fields = (
                "nonzero_columns_per_second",
                "copy_bytes_per_second",
                "alone_nonzero_columns_per_second",
                "alone_copy_bytes_per_second",
            )
            values = [record.get("local", {}).get(f) for f in rate_fields]
            for field, rate in zip(rate_fields, values):
                if rate is not None:  # absent in records before it
                    check(f"local.{field}", rate, True)
            rated_on = record.get("local", {}).get("matrix") if values[0] is not None else None
            rates = dict(
                zip(("local_rate", "copy_rate", "local_rate_alone", "copy_rate_alone"), values), local_rate_matrix=rated_on
            )
            if "inter_node" not in links_measured:
                return cls(name, (Level("machine", None, intra),), None, **rates)
            inter = measured("inter_node", "measured inter-node", True)
            for field in ("overlap", "piece_overlap"):
                measurement = links_measured["inter_node"].get(field)  # absent in records before it
                if measurement is not None:
                    check(f"inter_node.{field}.fraction", measurement["fraction"], False)
                    if measurement["fraction"] > 1:
                        raise ValueError(
                            f"inter_node.{field}.fraction = {measurement['fraction']!r}, not a fraction within [0, 1]"
                        )
                    rates[field] = float(measurement["fraction"])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            problem = f"has {error}" if isinstance(error, ValueError) else f"lacks {error}"
            raise InputError(
                f"network calibration {name!r} {problem}; write it again with 'mpiexec -n P sparsewire calibrate --network'"
            ) from None
        blocks = groups == [rank // size for rank in range(len(groups))]
        levels = (Level("node", size, intra), Level("cluster", None, inter))
        return cls(name, levels, None if blocks else tuple(groups), **rates)

    def with_local_rate(self, rate: float, matrix: str) -> Topology:
        """Not collective. This topology with the CSR kernel's rate ``rate`` measured on ``matrix`` (the rows a job
        multiplies: :meth:`~sparsewire.distributed.matrix.DistributedMatrix.local_rate`) in place of the one it holds, and
        the rate alone scaled by the same factor (how much faster one rank runs while the others wait is the
        machine's, not the matrix's). The copy rates stay.

        Raises:
            InputError where the topology has no measured local rate to replace (write one with
            ``calibrate --network``) or ``rate`` is not a positive number.
        """
        if self.local_rate is None:
            raise InputError(f"topology {self.name!r} has no local rate; measure one with 'sparsewire calibrate --network'")
        if isinstance(rate, bool) or not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise InputError(f"a local rate must be a positive number of nonzero-columns per second (got {rate!r})")
        alone = None if self.local_rate_alone is None else self.local_rate_alone * rate / self.local_rate
        return dataclasses.replace(self, local_rate=float(rate), local_rate_alone=alone, local_rate_matrix=matrix)

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

    @property
    def assumed_links(self) -> bool:
        """Whether a level's link is one of the assumed constants of :mod:`~sparsewire.topology.links`
        (``flat``, ``nodes:G``, MPI's nodes) rather than measured (``calibrate --network``) or a named
        cluster's: its predictions price an assumed cluster, not the machine the job runs on.
        A level of groups of one rank is left out: it joins no two ranks, so its link prices no message
        (``calibrate --network`` on one rank per node measures no link inside a node)."""
        assumed = (_SHARED_MEMORY, _NETWORK, LinkClass("network", *links.FLAT_NETWORK))
        return any(level.link in assumed for level in self.levels if level.group_size != 1)

    def prices(self) -> str:
        """Not collective. What a prediction under this topology prices, in a few words for a column
        header: ``assumed links``, ``measured links`` or the named cluster."""
        if self.assumed_links:
            return "assumed links"
        return "measured links" if self.name.split(":", 1)[0] == "measured" else self.name

    def describe(self) -> str:
        """Not collective. One line: levels, group sizes and links."""
        parts = []
        for level in self.levels:
            size = "all ranks" if level.group_size is None else f"{level.group_size} ranks"
            link = level.link
            parts.append(f"{level.name} ({size}): {link.name} {link.bandwidth / 1e9:g} GB/s, {link.latency * 1e6:g} us")
        return f"{self.name}: " + "; ".join(parts)
