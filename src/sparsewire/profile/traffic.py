"""The rank x rank traffic map of a multiply: bytes and messages from every rank to every rank, as
the transport counted them on arrival (MPI: the receive statuses), beside the plan's, and rolled up
per link class of the topology.

``measured[s, d]`` comes from rank d's byte ledger (:class:`~sparsewire.exec.transports.base.ByteLedger`,
filled from what each receive reports) and ``planned[s, d]`` from the plan's statistics
(:class:`~sparsewire.plan.stats.PlanStats`, one record per message of every rank's plan): two
independent sources, so :meth:`TrafficMap.differences` can fail. The model is the rank-to-rank
volume matrix of Intel APS and TAU (``../shared/research/observability.md``), here per multiply
and exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsewire._lib.atomic import save_figure
from sparsewire._lib.distinct import distinct
from sparsewire.topology.model import Topology

__all__ = ["TrafficMap", "planned_traffic", "measured_traffic", "plot_traffic"]


@dataclass(frozen=True)
class TrafficMap:
    """Not collective. Bytes and messages per (source, destination) rank pair per multiply.

    Attributes:
        bytes: int64 array (P, P), ``bytes[s, d]`` payload bytes rank s sent to rank d.
        messages: int64 array (P, P), the number of those messages.
    """

    bytes: np.ndarray
    messages: np.ndarray

    @property
    def n_ranks(self) -> int:
        return int(self.bytes.shape[0])

    def differences(self, other: TrafficMap, limit: int = 5) -> list[str]:
        """Not collective. One line per pair where this map (measured) and ``other`` (planned) differ, at most ``limit``."""
        lines = []
        for source, destination in np.argwhere((self.bytes != other.bytes) | (self.messages != other.messages)):
            lines.append(
                f"rank {source} -> rank {destination}: {self.bytes[source, destination]} bytes in "
                f"{self.messages[source, destination]} messages, planned {other.bytes[source, destination]} bytes in "
                f"{other.messages[source, destination]}"
            )
            if len(lines) == limit:
                break
        return lines

    def link_classes(self, topology: Topology | None) -> np.ndarray:
        """Not collective. (P, P) array of each pair's link class name (the topology level joining them; ``self``
        on the diagonal; ``all`` without a topology)."""
        n = self.n_ranks
        names = np.full((n, n), "all", dtype=object)
        if topology is not None:
            sources, destinations = np.divmod(np.arange(n * n), n)
            levels = topology.link_levels(sources, destinations, n).reshape(n, n)
            names = np.array([topology.levels[level].link.name for level in levels.ravel()], dtype=object).reshape(n, n)
        np.fill_diagonal(names, "self")
        return names

    def per_link_class(self, topology: Topology | None) -> dict[str, dict[str, int]]:
        """Not collective. Bytes and messages summed per link class (pairs of distinct ranks)."""
        names = self.link_classes(topology)
        result = {}
        for name in dict.fromkeys(names[~np.eye(self.n_ranks, dtype=bool)]):
            mask = names == name
            result[str(name)] = {"bytes": int(self.bytes[mask].sum()), "messages": int(self.messages[mask].sum())}
        return result

    def as_dict(self, topology: Topology | None, matrices: bool = True) -> dict:
        """Not collective. For the JSON: per link class, and the matrices (rows: sources) when ``matrices``."""
        result = {"per_link_class": self.per_link_class(topology)}
        if matrices:
            result["bytes"] = self.bytes.tolist()
            result["messages"] = self.messages.tolist()
        return result


def planned_traffic(stats) -> TrafficMap:
    """Not collective. The map the plan's statistics (:class:`~sparsewire.plan.stats.PlanStats`) imply."""
    n = stats.n_ranks
    byte_map = np.zeros((n, n), np.int64)
    message_map = np.zeros((n, n), np.int64)
    np.add.at(byte_map, (stats.sources, stats.destinations), stats.message_bytes.astype(np.int64))
    np.add.at(message_map, (stats.sources, stats.destinations), stats.message_counts.astype(np.int64))
    return TrafficMap(byte_map, message_map)


def measured_traffic(comm, ledger) -> TrafficMap:
    """Collective. The map of the last multiply from every rank's ledger (column d is rank d's receipts)."""
    columns = comm.allgather((ledger.bytes_from.copy(), ledger.messages_from.copy()))
    byte_map = np.stack([received for received, _ in columns], axis=1).astype(np.int64)
    message_map = np.stack([count for _, count in columns], axis=1).astype(np.int64)
    return TrafficMap(byte_map, message_map)


def plot_traffic(traffic: TrafficMap, topology: Topology | None, path: str, title: str) -> None:
    """Not collective. A heat map of bytes per (source, destination) pair beside one of messages, each cell
    labelled where P <= 16, the topology's groups outlined (pairs inside a box share the inner link class)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    n = traffic.n_ranks
    figure, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    for axis, values, label in ((axes[0], traffic.bytes, "bytes"), (axes[1], traffic.messages, "messages")):
        shown = np.ma.masked_equal(values, 0)
        # A log scale needs two distinct positive ends; one rank (or a plan without messages) has none.
        norm = LogNorm(vmin=shown.min(), vmax=shown.max()) if shown.count() and shown.max() > shown.min() else None
        image = axis.imshow(shown, cmap="viridis", norm=norm)
        figure.colorbar(image, ax=axis, label=f"{label} per multiply (blank: none)")
        axis.set_xlabel("destination rank")
        axis.set_ylabel("source rank")
        if n <= 32:
            axis.set_xticks(range(n))
            axis.set_yticks(range(n))
        if n <= 16:
            for (source, destination), value in np.ndenumerate(values):
                if value:
                    axis.text(destination, source, f"{value:,}", ha="center", va="center", fontsize=7, color="white")
        if topology is not None and len(topology.levels) > 1:
            groups = topology.groups(n)
            for group in distinct(groups):
                members = np.flatnonzero(groups == group)
                axis.add_patch(
                    Rectangle(
                        (members.min() - 0.5, members.min() - 0.5), members.size, members.size, fill=False, lw=1.5, ec="red"
                    )
                )
    classes = ", ".join(f"{name}: {totals['bytes']:,} B" for name, totals in traffic.per_link_class(topology).items())
    figure.suptitle(f"{title}\n{classes or 'no messages'}" + ("; red boxes: groups" if topology is not None else ""))
    figure.tight_layout()
    save_figure(figure, path, dpi=110)
    plt.close(figure)
