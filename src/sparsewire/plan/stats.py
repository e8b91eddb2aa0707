"""Communication volumes of a plan: bytes and messages per multiply, per rank, per link class, at
setup, and the predicted time under a topology's cost model.

Definitions (per multiply, element size s bytes, B of width k):

* ``total_bytes``: sum over messages (every hop of a relayed row counts) of ``s*k*rows``.
* ``messages``: non-empty (exchange, source, destination) messages; for ``rowwise`` one per
  off-diagonal nonzero.
* ``send_bytes_per_rank`` / ``recv_bytes_per_rank`` and their maxima (the tail rank decides time).
* ``setup_bytes``: the one-time transfer of the row-based A entries to the ranks that multiply them,
  ``(s + 8)`` bytes per entry (the value plus two 32-bit local indices).

With a topology (:mod:`sparsewire.topology`), every message is classed by the link that joins its
two ranks: ``intra_group`` (same level-0 group) or ``inter_group``; bytes, messages and per-rank
maxima are given per class, and ``predicted_seconds`` is the cost model of :func:`predicted_seconds`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from sparsewire.distinct import distinct, distinct_counts
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition
from sparsewire.plan.counted import COUNTED_STRATEGIES, counted_sends
from sparsewire.plan.plan import RankPlan, build_plan
from sparsewire.plan.strategies import Strategy
from sparsewire.topology import Topology

__all__ = [
    "PlanStats",
    "BlockStats",
    "plan_stats",
    "rowwise_stats",
    "block_stats",
    "strategy_stats",
    "predicted_seconds",
    "SETUP_INDEX_BYTES",
    "rank_send_summary",
]

SETUP_INDEX_BYTES = 8


@dataclass(frozen=True)
class PlanStats:
    """Volumes of one strategy for one k and element size (see the module docstring).

    One entry per message: ``sources``, ``destinations``, ``steps`` (the plan step it belongs to),
    ``message_bytes`` and ``message_counts`` (1, or the number of per-nonzero messages of
    ``rowwise`` folded into one entry per rank pair).
    """

    strategy: Strategy
    n_ranks: int
    k: int
    element_bytes: int
    sources: np.ndarray
    destinations: np.ndarray
    steps: np.ndarray
    message_bytes: np.ndarray
    message_counts: np.ndarray
    setup_bytes: int
    topology: Topology | None = None

    @property
    def messages(self) -> int:
        """Messages per multiply."""
        return int(self.message_counts.sum())

    @property
    def total_bytes(self) -> int:
        """Bytes moved between distinct ranks per multiply."""
        return int(self.message_bytes.sum())

    def _pairs(self) -> tuple[np.ndarray, np.ndarray]:
        keys = self.sources.astype(np.int64) * self.n_ranks + self.destinations  # 32-bit ranks (block_stats) overflow P^2
        unique, inverse = np.unique(keys, return_inverse=True)
        return unique, np.bincount(inverse, weights=self.message_bytes, minlength=unique.size).astype(np.int64)

    @property
    def pair_sources(self) -> np.ndarray:
        """Source of each communicating (source, destination) pair, ascending."""
        return self._pairs()[0] // self.n_ranks

    @property
    def pair_destinations(self) -> np.ndarray:
        """Destination of each pair (same order as :attr:`pair_sources`)."""
        return self._pairs()[0] % self.n_ranks

    @property
    def pair_bytes(self) -> np.ndarray:
        """Bytes per pair per multiply, over all exchanges."""
        return self._pairs()[1]

    @property
    def send_bytes_per_rank(self) -> np.ndarray:
        """Bytes each rank sends per multiply."""
        return np.bincount(self.sources, weights=self.message_bytes, minlength=self.n_ranks).astype(np.int64)

    @property
    def recv_bytes_per_rank(self) -> np.ndarray:
        """Bytes each rank receives per multiply."""
        return np.bincount(self.destinations, weights=self.message_bytes, minlength=self.n_ranks).astype(np.int64)

    @property
    def max_rank_send_bytes(self) -> int:
        """Largest bytes sent by one rank per multiply."""
        return int(self.send_bytes_per_rank.max(initial=0))

    @property
    def max_rank_recv_bytes(self) -> int:
        """Largest bytes received by one rank per multiply."""
        return int(self.recv_bytes_per_rank.max(initial=0))

    def inter_group(self) -> np.ndarray:
        """Not collective. Per message: True if its ranks are in different level-0 groups of the topology."""
        if self.topology is None:
            raise InputError("link classes need a topology; compute the stats with topology=...")
        groups = self.topology.groups(self.n_ranks)
        return groups[self.sources] != groups[self.destinations]

    def class_totals(self) -> dict[str, int]:
        """Not collective. Bytes, messages and per-rank maxima per link class (``intra_group`` / ``inter_group``)."""
        inter = self.inter_group()
        result = {}
        for name, mask in (("intra_group", ~inter), ("inter_group", inter)):
            sent = np.bincount(self.sources[mask], weights=self.message_bytes[mask], minlength=self.n_ranks)
            received = np.bincount(self.destinations[mask], weights=self.message_bytes[mask], minlength=self.n_ranks)
            result[f"{name}_bytes"] = int(self.message_bytes[mask].sum())
            result[f"{name}_messages"] = int(self.message_counts[mask].sum())
            result[f"max_rank_send_{name}_bytes"] = int(sent.max(initial=0))
            result[f"max_rank_recv_{name}_bytes"] = int(received.max(initial=0))
        return result

    def describe_lines(self) -> list[str]:
        """Not collective. ``explain()``'s lines of the bytes: per multiply and setup, per link class, the busiest ranks."""
        from sparsewire.report import format_bytes

        setup = format_bytes(int(self.setup_bytes))
        lines = [f"per multiply: {format_bytes(self.total_bytes)} in {self.messages} messages; setup {setup}"]
        classes = self.class_totals()
        for name in ("intra_group", "inter_group"):
            if classes[f"{name}_messages"]:
                size, count = format_bytes(classes[f"{name}_bytes"]), classes[f"{name}_messages"]
                lines.append(f"  {name.replace('_', '-')}: {size} in {count} messages")
        for label, per_rank in (("send", self.send_bytes_per_rank), ("receive", self.recv_bytes_per_rank)):
            mean = float(per_rank.mean()) if per_rank.size else 0.0
            ratio = f"{per_rank.max() / mean:.2f}" if mean > 0 else "-"
            lines.append(f"busiest rank {label}s {format_bytes(int(per_rank.max(initial=0)))} (max/mean {ratio})")
        return lines

    def as_dict(self) -> dict:
        """Not collective. The JSON fields of ``sparsewire analyze`` (link classes and prediction with a topology)."""
        result = {
            "name": self.strategy.value,
            "total_bytes": self.total_bytes,
            "messages": self.messages,
            "max_rank_send_bytes": self.max_rank_send_bytes,
            "max_rank_recv_bytes": self.max_rank_recv_bytes,
            "setup_bytes": int(self.setup_bytes),
        }
        if self.topology is not None:
            result.update(self.class_totals())
            result["predicted_seconds"] = predicted_seconds(self)
        return result


def predicted_seconds(stats: PlanStats, topology: Topology | None = None, *, steps_together: bool = True) -> float:
    """Not collective. Communication time per multiply under the topology's cost model.

    For every step s, link class c and rank x, with m messages and b bytes that x sends over class
    c in step s (and m', b' that it receives):
    ``t(s, c, x) = max(m (latency_c + overhead_c) + b / bandwidth_c, m' (...) + b' / bandwidth_c)``.
    A step lasts as long as its slowest (class, rank): its parts are in flight together (SHIRO
    Alg. 1 overlaps the intra- and inter-group halves of each stage; CoLa Alg. 3 overlaps round
    d+1's inter-group fetch with round d's distribution). Steps run one after the other:
    ``T = sum_s max_{c, x} t(s, c, x)`` over the classes that are not ``shared``.

    A ``shared`` link class is one full-duplex link per level-0 group g (a node's network card, as
    ``calibrate --network`` measures it): every rank of g sends and receives through it, so per
    direction ``t_c(S) = max_x sum_{s in S} m (latency_c + overhead_c) + max_g sum_{s in S} b_g / bandwidth_c``
    over a set of steps S. With ``steps_together`` (the bulk, overlap and early modes on a transport that sends
    message by message: a relay leaves as soon as its inputs arrive, and every step is posted before any is
    waited for) the traffic of every step queues on it together:
    ``T = max(sum_s ..., max_c t_c(all steps))``; measured on the emulated cluster
    (docs/performance.md) the sum over steps overpredicted the two-level strategies 1.5x there,
    since their two steps cross the link in opposite directions. Without (the pipelined mode keeps at most
    two steps in flight, each round's messages a permutation of the nodes; partitioned relays whole steps)
    each step also lasts at least its own ``t_c({s})``: ``T = sum_s max(max_{c, x} t(s, c, x), max_c t_c({s}))``.
    """
    topology = topology or stats.topology
    if topology is None:
        raise InputError("predicted_seconds needs a topology; pass topology= or compute the stats with one")
    levels = topology.link_levels(stats.sources, stats.destinations, stats.n_ranks)
    groups = topology.groups(stats.n_ranks)

    def shared_seconds(link, mask: np.ndarray) -> float:
        slowest = 0.0
        for ranks in (stats.sources[mask], stats.destinations[mask]):
            counts = np.bincount(ranks, weights=stats.message_counts[mask], minlength=stats.n_ranks)
            per_group = np.bincount(groups[ranks], weights=stats.message_bytes[mask])
            slowest = max(slowest, float(counts.max() * (link.latency + link.overhead) + per_group.max() / link.bandwidth))
        return slowest

    total = 0.0
    for step in distinct(stats.steps):
        slowest = 0.0
        for level_index, level in enumerate(topology.levels):
            mask = (stats.steps == step) & (levels == level_index)
            if not mask.any() or (level.link.shared and steps_together):
                continue
            if level.link.shared:
                slowest = max(slowest, shared_seconds(level.link, mask))
                continue
            for ranks in (stats.sources[mask], stats.destinations[mask]):
                counts = np.bincount(ranks, weights=stats.message_counts[mask], minlength=stats.n_ranks)
                nbytes = np.bincount(ranks, weights=stats.message_bytes[mask], minlength=stats.n_ranks)
                slowest = max(slowest, float(level.link.seconds(counts, nbytes).max()))
        total += slowest
    if steps_together:
        for level_index, level in enumerate(topology.levels):
            mask = levels == level_index
            if level.link.shared and mask.any():
                total = max(total, shared_seconds(level.link, mask))
    return total


def rank_send_summary(plan: RankPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Not collective. (step, destination, rows) of every message one rank sends, and its row-based A entries."""
    steps = [np.full(e.send_ranks.size, e.step, np.int64) for e in plan.exchanges]
    destinations = [e.send_ranks for e in plan.exchanges]
    rows = [e.send_counts for e in plan.exchanges]
    empty = [np.zeros(0, np.int64)]
    return np.concatenate(steps + empty), np.concatenate(destinations + empty), np.concatenate(rows + empty), plan.setup_entries


def plan_stats(
    plans: Iterable[RankPlan] | Iterable[tuple],
    k: int,
    element_bytes: int,
    strategy: Strategy | str | None = None,
    n_ranks: int | None = None,
    topology: Topology | None = None,
) -> PlanStats:
    """Not collective. Volumes from the sender side of every rank's plan.

    ``plans`` holds either :class:`RankPlan` objects (all ranks, e.g. ``CommPlan.ranks``) or the
    :func:`rank_send_summary` of every rank in rank order (as gathered over MPI).
    """
    summaries, first = [], None
    for plan in plans:
        if isinstance(plan, RankPlan):
            first = first or plan
            summaries.append(rank_send_summary(plan))
        else:
            summaries.append(plan)
    if first is not None:
        strategy, n_ranks = first.strategy, first.n_ranks
    elif strategy is None or n_ranks is None:
        raise InputError("plan_stats on rank summaries needs strategy= and n_ranks=; pass RankPlan objects or both")
    empty = [np.zeros(0, np.int64)]
    sources = np.concatenate([np.full(len(s[1]), q, np.int64) for q, s in enumerate(summaries)] + empty)
    steps = np.concatenate([np.asarray(s[0], np.int64) for s in summaries] + empty)
    destinations = np.concatenate([np.asarray(s[1], np.int64) for s in summaries] + empty)
    rows = np.concatenate([np.asarray(s[2], np.int64) for s in summaries] + empty)
    keep = rows > 0
    setup_entries = sum(int(s[3]) for s in summaries)
    return PlanStats(
        Strategy(strategy),
        int(n_ranks),
        k,
        element_bytes,
        sources[keep],
        destinations[keep],
        steps[keep],
        rows[keep] * k * element_bytes,
        np.ones(int(keep.sum()), np.int64),
        setup_bytes=setup_entries * (element_bytes + SETUP_INDEX_BYTES),
        topology=topology,
    )


def rowwise_stats(
    matrix: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    k: int,
    element_bytes: int,
    topology: Topology | None = None,
) -> PlanStats:
    """Not collective. Volumes of ``rowwise`` (MGG-style per-nonzero fetch, CoLa eq. 6): every off-diagonal
    nonzero (i, j) fetches B row j from its owner, ``s*k`` bytes and one message each."""
    coo = sp.coo_array(matrix)
    n_ranks = row_partition.n_parts
    destinations = np.asarray(row_partition.owner(coo.row), np.int64)
    sources = np.asarray(col_partition.owner(coo.col), np.int64)
    off = destinations != sources
    pair_keys, pair_counts = distinct_counts(sources[off] * n_ranks + destinations[off])
    return PlanStats(
        Strategy.ROWWISE,
        n_ranks,
        k,
        element_bytes,
        pair_keys // n_ranks,
        pair_keys % n_ranks,
        np.zeros(pair_keys.size, np.int64),
        pair_counts.astype(np.int64) * k * element_bytes,
        pair_counts.astype(np.int64),
        setup_bytes=0,
        topology=topology,
    )


class BlockStats(PlanStats):
    """``block``'s volumes (CoLa eq. 5) in closed form from the B rows m_q each rank holds: rank q sends
    ``s*k*m_q`` bytes to each of the other P - 1 ranks, so q sends ``s*k*m_q*(P-1)``, p receives
    ``s*k*(m - m_p)`` and ``s*k*m*(P-1)`` move in all, in (P - 1) messages per rank with B rows. Its
    P (P - 1) messages (``sources``, ``destinations``, ...) are made on first use only: link classes,
    pairs and predictions need them, the totals and per-rank figures do not (at P = 16384 they are 268M
    messages, 4.3 GB)."""

    def __init__(self, col_partition: RowPartition, k: int, element_bytes: int, topology: Topology | None = None) -> None:
        fields = {"strategy": Strategy.BLOCK, "n_ranks": col_partition.n_parts, "k": k, "element_bytes": element_bytes}
        fields.update(setup_bytes=0, topology=topology, rows_per_rank=col_partition.counts().astype(np.int64))
        for name, value in fields.items():
            object.__setattr__(self, name, value)  # a frozen dataclass; the message fields are properties here

    @cached_property
    def _messages(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sources, destinations, bytes) of every message: 32-bit ranks, destinations by one tile."""
        index = np.int32 if self.n_ranks < 2**31 else np.int64
        senders = np.flatnonzero(self.rows_per_rank > 0).astype(index)
        sources = np.repeat(senders, self.n_ranks - 1)
        destinations = np.tile(np.arange(self.n_ranks - 1, dtype=index), senders.size)
        destinations += destinations >= sources  # every rank but the sender
        return sources, destinations, np.repeat(self.rows_per_rank[senders] * self.k * self.element_bytes, self.n_ranks - 1)

    sources = property(lambda self: self._messages[0], doc="Source of each message.")
    destinations = property(lambda self: self._messages[1], doc="Destination of each message.")
    message_bytes = property(lambda self: self._messages[2], doc="Bytes of each message.")
    steps = property(lambda self: np.broadcast_to(np.int64(0), self.sources.shape), doc="One step (read-only view).")
    message_counts = property(lambda self: np.broadcast_to(np.int64(1), self.sources.shape), doc="One each (read-only view).")

    @property
    def messages(self) -> int:
        """Messages per multiply: P - 1 from every rank holding B rows."""
        return int(np.count_nonzero(self.rows_per_rank)) * (self.n_ranks - 1)

    @property
    def total_bytes(self) -> int:
        """Bytes per multiply: ``s*k*m*(P-1)``."""
        return int(self.rows_per_rank.sum()) * (self.n_ranks - 1) * self.k * self.element_bytes

    @property
    def send_bytes_per_rank(self) -> np.ndarray:
        """``s*k*m_q*(P-1)`` per rank q."""
        return self.rows_per_rank * (self.n_ranks - 1) * self.k * self.element_bytes

    @property
    def recv_bytes_per_rank(self) -> np.ndarray:
        """``s*k*(m - m_p)`` per rank p."""
        return (self.rows_per_rank.sum() - self.rows_per_rank) * self.k * self.element_bytes


def block_stats(col_partition: RowPartition, k: int, element_bytes: int, topology: Topology | None = None) -> BlockStats:
    """Not collective. Volumes of ``block`` without building its plan (:class:`BlockStats`). Equal to ``plan_stats``
    of the built plan, which holds m*(P-1) selection rows (too many to build just for analysis at large P)."""
    return BlockStats(col_partition, k, element_bytes, topology)


def strategy_stats(
    matrix: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy | str,
    k: int,
    element_bytes: int,
    topology: Topology | None = None,
    *,
    proxy: str = "local",
    progress=None,
) -> PlanStats:
    """Not collective. Volumes of any strategy from the global matrix, without MPI: ``rowwise`` and ``block`` are
    counted from the partitions (:func:`rowwise_stats`, :func:`block_stats`), ``column``, ``row`` and
    ``joint`` from the block structure (:func:`~sparsewire.plan.counted.counted_sends`: equal to
    :func:`plan_stats` of their plans, at a fraction of the cost), the hierarchical ones from their
    built plans (:func:`~sparsewire.plan.plan.build_plan` with the ``merged`` layout, :func:`plan_stats`).
    ``progress(stage, done, total)`` is build_plan's, or counted_sends' for ``joint``'s covers."""
    strategy = Strategy(strategy)
    if strategy is Strategy.ROWWISE:
        return rowwise_stats(matrix, row_partition, col_partition, k, element_bytes, topology)
    if strategy is Strategy.BLOCK:
        return block_stats(col_partition, k, element_bytes, topology)
    if strategy in COUNTED_STRATEGIES:
        sources, destinations, rows, setup_entries = counted_sends(matrix, row_partition, col_partition, strategy, progress)
        return PlanStats(
            strategy,
            row_partition.n_parts,
            k,
            element_bytes,
            sources,
            destinations,
            np.zeros(sources.size, np.int64),  # one exchange, step 0 (merged layout)
            rows * k * element_bytes,
            np.ones(sources.size, np.int64),
            setup_bytes=setup_entries * (element_bytes + SETUP_INDEX_BYTES),
            topology=topology,
        )
    plan = build_plan(matrix, row_partition, col_partition, strategy, topology, proxy=proxy, progress=progress)
    return plan_stats(plan.ranks, k, element_bytes, topology=topology)
