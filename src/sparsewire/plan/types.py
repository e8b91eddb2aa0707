"""The plan's types: :class:`Exchange` (one round of messages), :class:`RankPlan` (one rank's
plan), :class:`CommPlan` (every rank's), the layouts and the kinds of transferred rows
(:class:`RecordKind`; the table is in :mod:`sparsewire.plan.plan`'s docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import IntEnum

import numpy as np
import scipy.sparse as sp

from sparsewire.partition import RowPartition
from sparsewire.plan.strategies import Strategy

__all__ = [
    "Exchange",
    "RankPlan",
    "CommPlan",
    "LAYOUTS",
    "PROXY_POLICIES",
    "RECORD_KINDS",
    "RecordKind",
    "HOP",
    "DIRECT_B",
    "DIRECT_C",
    "FETCH_B",
    "PARTIAL_C",
    "FORWARD_B",
    "AGGREGATE_C",
]

LAYOUTS = ("merged", "pipelined")
PROXY_POLICIES = ("local", "balanced")


class RecordKind(IntEnum):
    """The kinds of transferred rows (module docstring); stored as int8 in ``send_kinds`` and
    ``receive_kinds``."""

    DIRECT_B = 0
    DIRECT_C = 1
    FETCH_B = 2
    PARTIAL_C = 3
    FORWARD_B = 4
    AGGREGATE_C = 5

    @property
    def hop(self) -> int:
        """1 for a record sent by the rank that has the row, 2 for one a proxy or aggregator sends on."""
        return 2 if self in (RecordKind.FORWARD_B, RecordKind.AGGREGATE_C) else 1


DIRECT_B, DIRECT_C, FETCH_B, PARTIAL_C, FORWARD_B, AGGREGATE_C = RecordKind
RECORD_KINDS = tuple(kind.name for kind in RecordKind)
HOP = np.array([kind.hop for kind in RecordKind])  # hop of a kind, indexable by arrays of kinds


@dataclass(frozen=True, eq=False)
class Exchange:
    """One round of messages of one rank (see the module docstring).

    Attributes:
        step: exchanges of one step are in flight together; steps run in order.
        input: index of the exchange whose receive buffer ``send_matrix`` reads after the B rows
            (None: B rows only).
        receive_slot: exchanges with the same slot share one receive buffer (double buffering of the
            pipelined layout); None: a buffer of its own.
        send_ranks, send_counts: destinations and rows sent to each (send_matrix rows in this order).
        recv_ranks, recv_counts: sources and rows received from each (receive_matrix columns in order).
        send_kinds, receive_kinds: the record kind of every sent and received row (``DIRECT_B`` ...
            ``AGGREGATE_C``), so an executor over another algebra (semiring SpGEMM) can tell copied
            B rows from computed C rows.
        receive_keys: the global key of every received row (column j of a B row, row i of a C
            row), so a deterministic executor can sum a C row in ascending column order.
    """

    step: int
    input: int | None
    receive_slot: int | None
    send_ranks: np.ndarray
    send_counts: np.ndarray
    send_matrix: sp.csr_array
    recv_ranks: np.ndarray
    recv_counts: np.ndarray
    receive_matrix: sp.csr_array
    send_kinds: np.ndarray
    receive_kinds: np.ndarray
    receive_keys: np.ndarray


@dataclass(frozen=True, eq=False)
class RankPlan:
    """Everything one rank needs to run its part of ``C = A @ B`` (see the module docstring).

    Counts are in rows of width k; byte volumes follow as rows * k * element size.
    ``setup_entries``: A entries this rank holds to compute partial C rows for others (they were
    sent to it once, at setup). ``setup_exchange_bytes``: what the planner's exchange delivered to this
    rank when it planned from its own rows (:func:`~sparsewire.plan.plan.build_rank_plan_collective`): (bytes
    as sent, coded or not; the same as int64 words) for the records all-to-all, (bytes, bytes) of the flat
    planner's arrays; (0, 0) for a plan built in one process.
    """

    rank: int
    strategy: Strategy
    layout: str
    row_partition: RowPartition
    col_partition: RowPartition
    groups: np.ndarray
    diagonal: sp.csr_array
    exchanges: tuple[Exchange, ...]
    setup_entries: int
    # (what building it measured, not part of the plan: a saved and loaded plan equals the one built)
    setup_exchange_bytes: tuple[int, int] = field(default=(0, 0), metadata={"measured": True})

    @property
    def n_ranks(self) -> int:
        """Number of ranks the plan was built for."""
        return self.row_partition.n_parts

    @property
    def local_shape(self) -> tuple[int, int]:
        """(rows of A and C owned, rows of B owned)."""
        return int(self.diagonal.shape[0]), int(self.diagonal.shape[1])

    def rows_sent_to(self) -> np.ndarray:
        """Not collective. Rows sent to each rank per multiply, summed over exchanges (length P)."""
        result = np.zeros(self.n_ranks, np.int64)
        for exchange in self.exchanges:
            np.add.at(result, exchange.send_ranks, exchange.send_counts)
        return result

    def equals(self, other: RankPlan) -> bool:
        """Not collective. Exact equality of every field (but ``setup_exchange_bytes``, what building it measured),
        including every index and value array."""
        return isinstance(other, RankPlan) and _equal(self, other)


def _equal(mine, theirs) -> bool:
    if type(mine) is not type(theirs):
        return False
    if isinstance(mine, (RankPlan, Exchange)):
        return all(_equal(getattr(mine, f.name), getattr(theirs, f.name)) for f in fields(mine) if not f.metadata.get("measured"))
    if isinstance(mine, tuple):
        return len(mine) == len(theirs) and all(_equal(a, b) for a, b in zip(mine, theirs))
    if isinstance(mine, sp.sparray):
        return mine.shape == theirs.shape and all(
            np.array_equal(getattr(mine, a), getattr(theirs, a)) for a in ("indptr", "indices", "data")
        )
    if isinstance(mine, np.ndarray):
        return np.array_equal(mine, theirs)
    if isinstance(mine, RowPartition):
        return np.array_equal(mine.offsets, theirs.offsets)
    return mine == theirs


@dataclass(frozen=True)
class CommPlan:
    """The plans of all ranks, built from the global matrix (for analysis and tests)."""

    strategy: Strategy
    row_partition: RowPartition
    col_partition: RowPartition
    ranks: tuple[RankPlan, ...]

    @property
    def n_ranks(self) -> int:
        """Number of ranks."""
        return len(self.ranks)


# ----------------------------------------------------------------------------------------------
# Records
