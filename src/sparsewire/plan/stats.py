"""Communication volumes of a plan: bytes and messages per multiply, per rank, and at setup.

Definitions (per multiply, element size s bytes, B of width k):

* ``total_bytes``: sum over ordered pairs (q -> p), q != p, of ``s*k*(B rows + partial C rows)``.
* ``messages``: non-empty (source, destination) pairs; for ``rowwise`` one per off-diagonal nonzero.
* ``send_bytes_per_rank`` / ``recv_bytes_per_rank`` and their maxima (the tail rank decides time).
* ``setup_bytes``: the one-time transfer of the row-based A entries to the ranks that multiply them,
  ``(s + 8)`` bytes per entry (the value plus two 32-bit local indices).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.partition import RowPartition
from sparsewire.plan.plan import RankPlan, build_plan
from sparsewire.plan.strategies import Strategy

__all__ = [
    "PlanStats",
    "plan_stats",
    "rowwise_stats",
    "block_stats",
    "strategy_stats",
    "SETUP_INDEX_BYTES",
    "rank_send_summary",
]

SETUP_INDEX_BYTES = 8


@dataclass(frozen=True)
class PlanStats:
    """Volumes of one strategy for one k and element size (see the module docstring)."""

    strategy: Strategy
    n_ranks: int
    k: int
    element_bytes: int
    pair_sources: np.ndarray
    pair_destinations: np.ndarray
    pair_bytes: np.ndarray
    messages: int
    send_bytes_per_rank: np.ndarray
    recv_bytes_per_rank: np.ndarray
    setup_bytes: int

    @property
    def total_bytes(self) -> int:
        """Bytes moved between distinct ranks per multiply."""
        return int(self.pair_bytes.sum())

    @property
    def max_rank_send_bytes(self) -> int:
        """Largest bytes sent by one rank per multiply."""
        return int(self.send_bytes_per_rank.max(initial=0))

    @property
    def max_rank_recv_bytes(self) -> int:
        """Largest bytes received by one rank per multiply."""
        return int(self.recv_bytes_per_rank.max(initial=0))

    def as_dict(self) -> dict:
        """The JSON fields of ``sparsewire analyze``."""
        return {
            "name": self.strategy.value,
            "total_bytes": self.total_bytes,
            "messages": int(self.messages),
            "max_rank_send_bytes": self.max_rank_send_bytes,
            "max_rank_recv_bytes": self.max_rank_recv_bytes,
            "setup_bytes": int(self.setup_bytes),
        }


def rank_send_summary(plan: RankPlan) -> tuple[np.ndarray, np.ndarray, int]:
    """(destinations, rows sent to each, row-based A entries held for others) of one rank."""
    return plan.send_ranks, plan.send_rows(), int(plan.setup_nonzeros_received().sum())


def plan_stats(
    plans: Iterable[RankPlan] | Iterable[tuple],
    k: int,
    element_bytes: int,
    strategy: Strategy | str | None = None,
    n_ranks: int | None = None,
) -> PlanStats:
    """Volumes from the sender side of every rank's plan.

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
    row_bytes = k * element_bytes
    sources = np.concatenate([np.full(len(s[0]), q, np.int64) for q, s in enumerate(summaries)] or [np.zeros(0, np.int64)])
    destinations = np.concatenate([np.asarray(s[0], np.int64) for s in summaries] or [np.zeros(0, np.int64)])
    rows = np.concatenate([np.asarray(s[1], np.int64) for s in summaries] or [np.zeros(0, np.int64)])
    pair_bytes = rows * row_bytes
    setup_entries = sum(int(s[2]) for s in summaries)
    return _from_pairs(
        Strategy(strategy), int(n_ranks), k, element_bytes, sources, destinations, pair_bytes,
        messages=int(np.count_nonzero(pair_bytes)),
        setup_bytes=setup_entries * (element_bytes + SETUP_INDEX_BYTES),
    )


def _from_pairs(strategy, n_ranks, k, element_bytes, sources, destinations, pair_bytes, *, messages, setup_bytes) -> PlanStats:
    return PlanStats(
        strategy=strategy,
        n_ranks=n_ranks,
        k=k,
        element_bytes=element_bytes,
        pair_sources=sources,
        pair_destinations=destinations,
        pair_bytes=pair_bytes,
        messages=messages,
        send_bytes_per_rank=np.bincount(sources, weights=pair_bytes, minlength=n_ranks).astype(np.int64),
        recv_bytes_per_rank=np.bincount(destinations, weights=pair_bytes, minlength=n_ranks).astype(np.int64),
        setup_bytes=setup_bytes,
    )


def rowwise_stats(
    matrix: sp.sparray, row_partition: RowPartition, col_partition: RowPartition, k: int, element_bytes: int
) -> PlanStats:
    """Volumes of ``rowwise`` (MGG-style per-nonzero fetch, CoLa eq. 6): every off-diagonal
    nonzero (i, j) fetches B row j from its owner, ``s*k`` bytes and one message each."""
    coo = sp.coo_array(matrix)
    n_ranks = row_partition.n_parts
    destinations = np.asarray(row_partition.owner(coo.row), np.int64)
    sources = np.asarray(col_partition.owner(coo.col), np.int64)
    off = destinations != sources
    pair_keys, pair_counts = np.unique(sources[off] * n_ranks + destinations[off], return_counts=True)
    pair_bytes = pair_counts.astype(np.int64) * k * element_bytes
    return _from_pairs(
        Strategy.ROWWISE, n_ranks, k, element_bytes, pair_keys // n_ranks, pair_keys % n_ranks, pair_bytes,
        messages=int(np.count_nonzero(off)),
        setup_bytes=0,
    )


def block_stats(col_partition: RowPartition, k: int, element_bytes: int) -> PlanStats:
    """Volumes of ``block`` (CoLa eq. 5) without building its plan: every rank q with m_q B rows
    sends ``s*k*m_q`` bytes to each of the other P - 1 ranks, ``s*k*m*(P-1)`` in all. Equal to
    ``plan_stats`` of the built plan, which holds m*(P-1) selection rows (too many to build just
    for analysis at large P)."""
    n_ranks = col_partition.n_parts
    senders = np.flatnonzero(col_partition.counts() > 0)
    sources = np.repeat(senders, n_ranks - 1).astype(np.int64)
    destinations = np.concatenate([np.delete(np.arange(n_ranks), q) for q in senders] or [np.zeros(0, np.int64)])
    pair_bytes = col_partition.counts()[sources] * k * element_bytes
    return _from_pairs(
        Strategy.BLOCK, n_ranks, k, element_bytes, sources, destinations.astype(np.int64), pair_bytes.astype(np.int64),
        messages=int(np.count_nonzero(pair_bytes)),
        setup_bytes=0,
    )


def strategy_stats(
    matrix: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy | str,
    k: int,
    element_bytes: int,
) -> PlanStats:
    """Volumes of any strategy from the global matrix, without MPI: ``rowwise`` and ``block`` are
    counted from the partitions (:func:`rowwise_stats`, :func:`block_stats`), the others from
    their built plans (:func:`~sparsewire.plan.plan.build_plan`, :func:`plan_stats`)."""
    strategy = Strategy(strategy)
    if strategy is Strategy.ROWWISE:
        return rowwise_stats(matrix, row_partition, col_partition, k, element_bytes)
    if strategy is Strategy.BLOCK:
        return block_stats(col_partition, k, element_bytes)
    return plan_stats(build_plan(matrix, row_partition, col_partition, strategy).ranks, k, element_bytes)
