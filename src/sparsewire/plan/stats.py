"""Communication volumes of a plan: bytes and messages per multiply, per rank, per link class, at
setup, and the predicted time under a topology's cost model.

Definitions (per multiply, element size s bytes, B of width k):

* ``total_bytes``: sum over messages (every hop of a relayed row counts) of ``s*k*rows``.
* ``messages``: non-empty (exchange, source, destination) messages; for ``rowwise`` one per
  off-diagonal nonzero.
* ``send_bytes_per_rank`` / ``recv_bytes_per_rank`` and their maxima (the tail rank decides time).
* ``setup_bytes``: the one-time transfer of the row-based A entries to the ranks that multiply them,
  ``(s + 8)`` bytes per entry (the value plus two 32-bit local indices).

With a topology (:mod:`sparsewire.topology.model`), every message is classed by the link that joins its
two ranks: ``intra_group`` (same level-0 group) or ``inter_group``; bytes, messages and per-rank
maxima are given per class, and ``predicted_seconds`` is the cost model of :func:`predicted_seconds`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.distinct import distinct_counts
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition
from sparsewire.plan.cost import predicted_communication_seconds, predicted_local_seconds, predicted_seconds
from sparsewire.plan.counted import COUNTED_STRATEGIES, counted_sends
from sparsewire.plan.plan import RankPlan, build_plan
from sparsewire.plan.strategies import Strategy
from sparsewire.topology.model import Topology

__all__ = [
    "PlanStats",
    "BlockStats",
    "plan_stats",
    "rowwise_stats",
    "block_stats",
    "strategy_stats",
    "predicted_seconds",
    "predicted_communication_seconds",
    "predicted_local_seconds",
    "SETUP_INDEX_BYTES",
    "rank_send_summary",
    "rank_inter_group_entries",
    "relays",
]

SETUP_INDEX_BYTES = 8


@dataclass(frozen=True)
class PlanStats:
    """Volumes of one strategy for one k and element size (see the module docstring).

    One entry per message: ``sources``, ``destinations``, ``steps`` (the plan step it belongs to),
    ``message_bytes`` and ``message_counts`` (1, or the number of per-nonzero messages of
    ``rowwise`` folded into one entry per rank pair). ``rank_entries``: per rank, the nonzeros of the
    sparse operators it applies per multiply (diagonal block, send and receive matrices; each a k-wide
    multiply-add), the local work of :func:`~sparsewire.plan.cost.predicted_local_seconds`; None where
    not known (``rowwise``). ``rank_diagonal_entries``: the part of it in the rank's diagonal block (A's entries
    whose row and column the rank owns: the product that needs no message, which the modes that overlap multiply
    while messages are in flight); None where not known (``rowwise``, ``block``). ``rank_inter_group_entries``: the part of
    it on the messages between groups (the rows of the send matrices that go to another group and the columns of
    the receive matrices that come from one, in exchanges that read B alone; :func:`rank_inter_group_entries`),
    which the overlap schedule works on while other messages cross (:func:`~sparsewire.plan.cost.beside_parts`);
    None where not known (``rowwise``, ``block``).
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
    rank_entries: np.ndarray | None = None
    rank_diagonal_entries: np.ndarray | None = None
    rank_inter_group_entries: np.ndarray | None = None

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

    def inter_group(self, topology: Topology | None = None) -> np.ndarray:
        """Not collective. Per message: True if its ranks are in different level-0 groups of ``topology`` (the
        stats' own where None)."""
        topology = topology or self.topology
        if topology is None:
            raise InputError("link classes need a topology; compute the stats with topology=...")
        groups = topology.groups(self.n_ranks)
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
        from sparsewire._lib.text import format_bytes

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


def rank_entries(plan: RankPlan) -> int:
    """Not collective. Nonzeros of the sparse operators one rank applies per multiply: its diagonal block and every
    exchange's send and receive matrix (:attr:`PlanStats.rank_entries`)."""
    return int(plan.diagonal.nnz) + sum(int(e.send_matrix.nnz) + int(e.receive_matrix.nnz) for e in plan.exchanges)


def relays(plan: RankPlan) -> bool:
    """Not collective. Whether this rank forwards rows it received (an exchange that reads another's receive buffer
    and sends): the executor then sends every message whole."""
    return any(e.input is not None and len(e.send_ranks) for e in plan.exchanges)


def rank_inter_group_entries(plan: RankPlan, groups: np.ndarray | None) -> int:
    """Not collective. Nonzeros of :func:`rank_entries` on the messages between this rank's group and another
    (``groups``: every rank's group; 0 where None) in the exchanges that read B alone: the rows of the send matrix
    that go to another group and the columns of the receive matrix that come from one. The overlap schedule packs
    and applies them while other messages cross: piece by piece where a plan relays nothing
    (:mod:`~sparsewire.exec.message_rows`), a step's whole messages while the next step's cross where it relays."""
    if groups is None:
        return 0
    groups = np.asarray(groups)
    total = 0
    for exchange in plan.exchanges:
        if exchange.input is not None:
            continue
        send_rows = np.repeat(groups[exchange.send_ranks] != groups[plan.rank], exchange.send_counts)
        total += int(np.diff(exchange.send_matrix.indptr)[send_rows].sum())
        receive_columns = np.repeat(groups[exchange.recv_ranks] != groups[plan.rank], exchange.recv_counts)
        total += int(np.count_nonzero(receive_columns[exchange.receive_matrix.indices]))
    return total


def rank_send_summary(
    plan: RankPlan, groups: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int, int, int]:
    """Not collective. (step, destination, rows) of every message one rank sends, its row-based A entries, its
    :func:`rank_entries`, its diagonal block's nonzeros and its :func:`rank_inter_group_entries` under ``groups``."""
    steps = [np.full(e.send_ranks.size, e.step, np.int64) for e in plan.exchanges]
    destinations = [e.send_ranks for e in plan.exchanges]
    rows = [e.send_counts for e in plan.exchanges]
    empty = [np.zeros(0, np.int64)]
    summary = np.concatenate(steps + empty), np.concatenate(destinations + empty), np.concatenate(rows + empty)
    inter_group = rank_inter_group_entries(plan, groups)
    return *summary, plan.setup_entries, rank_entries(plan), int(plan.diagonal.nnz), inter_group


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
    :func:`rank_send_summary` of every rank in rank order (as gathered over MPI; its inter-group entries counted under
    ``topology``'s groups, as here from RankPlan objects).
    """
    summaries, first = [], None
    for plan in plans:
        if isinstance(plan, RankPlan):
            if first is None:
                first = plan
                groups = None if topology is None or len(topology.levels) < 2 else topology.groups(plan.n_ranks)
            summaries.append(rank_send_summary(plan, groups))
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
    entries = np.asarray([s[4] for s in summaries], np.int64)
    diagonal = np.asarray([s[5] for s in summaries], np.int64)
    inter_group = np.asarray([s[6] for s in summaries], np.int64)
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
        rank_entries=entries,
        rank_diagonal_entries=diagonal,
        rank_inter_group_entries=inter_group,
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
    messages, 4.3 GB). ``rank_entries`` from the nonzeros of each rank's rows: those, plus the B rows it copies
    into its P - 1 messages."""

    def __init__(
        self,
        col_partition: RowPartition,
        k: int,
        element_bytes: int,
        topology: Topology | None = None,
        row_nonzeros: np.ndarray | None = None,
    ) -> None:
        fields = {"strategy": Strategy.BLOCK, "n_ranks": col_partition.n_parts, "k": k, "element_bytes": element_bytes}
        fields.update(setup_bytes=0, topology=topology, rows_per_rank=col_partition.counts().astype(np.int64))
        copies = fields["rows_per_rank"] * (col_partition.n_parts - 1)
        fields["rank_entries"] = None if row_nonzeros is None else np.asarray(row_nonzeros, np.int64) + copies
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


def block_stats(
    col_partition: RowPartition,
    k: int,
    element_bytes: int,
    topology: Topology | None = None,
    row_nonzeros: np.ndarray | None = None,
) -> BlockStats:
    """Not collective. Volumes of ``block`` without building its plan (:class:`BlockStats`; ``row_nonzeros``: of
    each rank's rows, for its ``rank_entries``). Equal to ``plan_stats`` of the built plan, which holds m*(P-1)
    selection rows (too many to build just for analysis at large P)."""
    return BlockStats(col_partition, k, element_bytes, topology, row_nonzeros)


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
        csr = sp.csr_array(matrix)
        if not csr.has_canonical_format:  # duplicates count once, as in the plan
            csr = csr.copy()
            csr.sum_duplicates()
        row_nonzeros = np.diff(csr.indptr[row_partition.offsets])
        return block_stats(col_partition, k, element_bytes, topology, row_nonzeros)
    if strategy in COUNTED_STRATEGIES:
        groups = None if topology is None or len(topology.levels) < 2 else topology.groups(row_partition.n_parts)
        sources, destinations, rows, setup_entries, entries, diagonal, inter_group = counted_sends(
            matrix, row_partition, col_partition, strategy, progress, groups
        )
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
            rank_entries=entries,
            rank_diagonal_entries=diagonal,
            rank_inter_group_entries=inter_group,
        )
    plan = build_plan(matrix, row_partition, col_partition, strategy, topology, proxy=proxy, progress=progress)
    return plan_stats(plan.ranks, k, element_bytes, topology=topology)
