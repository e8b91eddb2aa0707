"""Communication plans for distributed SpMM ``C = A @ B`` with a 1D row partition.

A plan is computed once from the sparsity pattern, the partitions, the strategy and the topology,
and reused for every multiply with that pattern. Per rank it holds the diagonal block A(p, p) and a
list of :class:`Exchange` s. Each exchange is one round of messages:

* ``send_matrix`` packs: ``send_buffer = send_matrix @ [B_p ; receive buffer of input]``. A row of it
  is a B row (a single 1: select), a partial C row (A entries: multiply), a relayed B row (a 1 on a
  row of the input exchange's receive buffer: forward) or a summed partial C row (A entries and 1s
  on received partial rows: aggregate). Rows are grouped by destination.
* ``receive_matrix`` unpacks: ``C_p += receive_matrix @ receive_buffer`` (A entries on received B
  rows, 1s on received C rows; all-zero rows of it belong to rows this rank only relays).

So ``C_p = diagonal @ B_p + sum_e receive_matrix_e @ receive_buffer_e``.

Every transferred row is one *record* (kind, sender, receiver, key, round): key is the global column
j for B rows and the global row i for C rows; round is the group offset (group of the B owner minus
group of the C owner, modulo the number of groups). The kinds:

==============  ==========================================================  ===
kind            meaning                                                     hop
==============  ==========================================================  ===
``DIRECT_B``    owner q sends B row j to p (column-based)                   1
``DIRECT_C``    q sends p's partial row i (row-based)                       1
``FETCH_B``     q sends B row j to the proxy of p's group (hierarchical)    1
``PARTIAL_C``   q sends its partial row i to its group's aggregator          1
``FORWARD_B``   the proxy forwards B row j to p                             2
``AGGREGATE_C`` the aggregator sends p the sum of its group's partials of i  2
==============  ==========================================================  ===

Layouts: ``merged`` puts every hop-1 record in exchange 0 and every hop-2 record in exchange 1 (SHIRO
Alg. 1: stage I = inter-group B fetch with intra-group C aggregation, stage II = inter-group C with
intra-group B distribution). ``pipelined`` (CoLa Alg. 3) has one exchange for round 0 (traffic
inside groups) and, per remote round d, an exchange for its hop 1 (step d-1, double-buffered
receives) and one for its hop 2 (step d), so the slow transfer of round d+1 is in flight while
round d is distributed and computed. Exchanges of one step run concurrently.

Planning is receiver-driven: rank p decides how each of its off-diagonal nonzeros is served and
writes the records that serve it; one all-to-all hands each record to its sender (and to a relaying
receiver); every rank then assembles its matrices from the records it knows. :func:`build_plan` runs
this for all ranks without MPI, :func:`build_rank_plan_collective` on each rank over MPI; both run
the same code (:func:`_plan_ranks`), so the plans are identical.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Callable, NamedTuple

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.partition import RowPartition
from sparsewire.plan import hierarchy
from sparsewire.plan.blocks import LocalBlocks, split_local_rows
from sparsewire.plan.strategies import Strategy, choose_row_based
from sparsewire.topology import Topology

__all__ = [
    "Exchange",
    "RankPlan",
    "CommPlan",
    "LAYOUTS",
    "RECORD_KINDS",
    "RecordKind",
    "RecordKeys",
    "BufferRows",
    "check_key_space",
    "DIRECT_B",
    "DIRECT_C",
    "FETCH_B",
    "PARTIAL_C",
    "FORWARD_B",
    "AGGREGATE_C",
    "build_plan",
    "build_rank_plan_collective",
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
_HOP = np.array([kind.hop for kind in RecordKind])  # hop of a kind, indexable by arrays of kinds


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
    sent to it once, at setup).
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
        """Not collective. Exact equality of every field, including every index and value array."""
        return isinstance(other, RankPlan) and _equal(self, other)


def _equal(mine, theirs) -> bool:
    if type(mine) is not type(theirs):
        return False
    if isinstance(mine, (RankPlan, Exchange)):
        return all(_equal(getattr(mine, f.name), getattr(theirs, f.name)) for f in fields(mine))
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


@dataclass
class _Records:
    """Transferred rows (kind, sender, receiver, key, round) and the A entries (terms) of C rows."""

    kind: np.ndarray
    sender: np.ndarray
    receiver: np.ndarray
    key: np.ndarray
    round: np.ndarray
    term_kind: np.ndarray
    term_sender: np.ndarray
    term_receiver: np.ndarray
    term_key: np.ndarray
    term_col: np.ndarray
    term_value: np.ndarray

    @staticmethod
    def concat(parts: list[_Records]) -> _Records:
        return _Records(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(_Records)))

    def select(self, records: np.ndarray, terms: np.ndarray) -> _Records:
        values = [getattr(self, f.name) for f in fields(_Records)]
        return _Records(*(v[records] for v in values[:5]), *(v[terms] for v in values[5:]))


def _records(kind, sender, receiver, key, round_, terms=None) -> _Records:
    n = np.asarray(key).size
    full = lambda value: np.broadcast_to(np.asarray(value, np.int64), (n,)).copy()  # noqa: E731
    empty = np.zeros(0, np.int64)
    if terms is None:
        terms = (empty, empty, empty, empty, empty, np.zeros(0))
    return _Records(full(kind), full(sender), full(receiver), full(key), full(round_), *terms)


def check_key_space(n_ranks: int, n_keys: int) -> None:
    """Not collective. InputError when P ranks and n rows (or columns) would overflow the
    planner's record keys ``((kind P + sender) P + receiver) n + key`` in int64 (6 P^2 n >= 2^63:
    two records would collide, e.g. at P = 2^20, n = 2^23)."""
    if len(RecordKind) * int(n_ranks) * int(n_ranks) * max(int(n_keys), 1) >= 2**63:
        raise InputError(
            f"P = {n_ranks} ranks and n = {n_keys} rows are beyond the planner's 64-bit record keys "
            f"(6 P^2 n must stay below 2^63); use fewer ranks or split the matrix"
        )


def _positions(sorted_keys: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """Positions of ``wanted`` in ``sorted_keys``, every one of which must be there (a missing
    one would silently take its neighbour's slot: a wrong product, not an error)."""
    positions = np.searchsorted(sorted_keys, wanted)
    found = positions < sorted_keys.size
    found[found] = sorted_keys[positions[found]] == wanted[found]
    if not found.all():
        raise PlanMismatchError(f"the plan lost {int((~found).sum())} {what}; the records of the ranks disagree (a planner bug: please report it)")
    return positions


class BufferRows(NamedTuple):
    """The rows of one exchange's buffer decoded from their packed order keys."""

    peer: np.ndarray
    kind: np.ndarray
    key: np.ndarray


class RecordKeys:
    """The one place records are packed into int64 keys (for sorting and matching at NumPy speed)
    and unpacked again; the constructor checks the packing cannot overflow (:func:`check_key_space`).

    * identity ``((kind P + sender) P + receiver) n + key``: equal for equal records;
    * buffer order ``(peer K + kind) n + key`` (K kinds): a buffer's rows by peer, kind, key.
    """

    def __init__(self, n_ranks: int, n_keys: int) -> None:
        self.n_ranks, self.n_keys = n_ranks, max(n_keys, 1)
        check_key_space(n_ranks, n_keys)

    def identity(self, kind, sender, receiver, key):
        """Not collective. The identity key of records."""
        return ((kind * self.n_ranks + sender) * self.n_ranks + receiver) * self.n_keys + key

    def order(self, peer, kind, key):
        """Not collective. Position keys inside one exchange's buffer: by peer, then kind, then key."""
        return (peer * len(RecordKind) + kind) * self.n_keys + key

    def rows_of(self, order_keys: np.ndarray) -> BufferRows:
        """Not collective. (peer, kind, key) of every packed buffer order key (:meth:`order` inverted)."""
        key = order_keys % self.n_keys
        rest = order_keys // self.n_keys
        return BufferRows(rest // len(RecordKind), rest % len(RecordKind), key)


@dataclass
class _ColumnServing:
    """For every column-based nonzero of a rank: its local row, value and column, and the record
    that brings its B row (kind, sender, round)."""

    rows: np.ndarray
    values: np.ndarray
    cols: np.ndarray
    kind: np.ndarray
    sender: np.ndarray
    round: np.ndarray


def _request_records(
    blocks: LocalBlocks,
    row_based: np.ndarray,
    hierarchical: bool,
    groups: np.ndarray,
    proxy: np.ndarray,
    aggregator: np.ndarray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy,
) -> tuple[_Records, _ColumnServing]:
    """Receiver step of rank p: the records that serve its off-diagonal nonzeros, and for each
    column-based nonzero the record that brings its B row (kind, sender, round)."""
    p = blocks.rank
    n_groups = int(groups.max(initial=0)) + 1
    row_start = int(row_partition.offsets[p])
    column_based = ~row_based
    rounds = (groups[blocks.sources] - groups[p]) % n_groups
    direct = np.logical_or(not hierarchical, groups[blocks.sources] == groups[p])
    parts = []

    # Column-based: B rows.
    cb = column_based
    q, j, rnd = blocks.sources[cb], blocks.cols[cb], rounds[cb]
    cb_direct = direct[cb]
    if strategy is Strategy.BLOCK:  # every B row of every other rank, used or not
        start, stop = col_partition.range(p)
        all_j = np.concatenate([np.arange(0, start), np.arange(stop, col_partition.n)]).astype(np.int64)
        all_q = np.asarray(col_partition.owner(all_j), np.int64)
        parts.append(_records(DIRECT_B, all_q, p, all_j, (groups[all_q] - groups[p]) % n_groups))
    else:
        parts.append(_records(DIRECT_B, q[cb_direct], p, j[cb_direct], rnd[cb_direct]))
    relay = proxy[q] if q.size else np.zeros(0, np.int64)
    fetched = ~cb_direct
    parts.append(_records(FETCH_B, q[fetched], relay[fetched], j[fetched], rnd[fetched]))
    forwarded = fetched & (relay != p)
    parts.append(_records(FORWARD_B, relay[forwarded], p, j[forwarded], rnd[forwarded]))
    serving_kind = np.where(cb_direct, DIRECT_B, np.where(forwarded, FORWARD_B, FETCH_B))
    serving_sender = np.where(cb_direct | ~forwarded, q, relay)
    column_serving = _ColumnServing(blocks.rows[cb], blocks.values[cb], j, serving_kind, serving_sender, rnd)

    # Row-based: partial C rows, with their A entries as terms.
    rb = row_based
    q, i, j, v, rnd = blocks.sources[rb], blocks.rows[rb] + row_start, blocks.cols[rb], blocks.values[rb], rounds[rb]
    rb_direct = direct[rb]
    agg = aggregator[groups[q]] if q.size else np.zeros(0, np.int64)
    # Direct: q computes p's row i.  Hierarchical: q computes a partial for its aggregator, or is it.
    term_kind = np.where(rb_direct, DIRECT_C, np.where(q == agg, AGGREGATE_C, PARTIAL_C))
    term_receiver = np.where(rb_direct, p, np.where(q == agg, p, agg))
    terms = (term_kind, q, term_receiver, i, j, v)
    partial = term_kind == PARTIAL_C
    parts.append(_records(term_kind, q, term_receiver, i, rnd, terms))
    parts.append(_records(AGGREGATE_C, agg[partial], p, i[partial], rnd[partial]))
    return _Records.concat(parts), column_serving


def _unique_records(records: _Records, keys: RecordKeys) -> _Records:
    """One record per identity (the same B row can be requested by several nonzeros and ranks)."""
    identity = keys.identity(records.kind, records.sender, records.receiver, records.key)
    _, first = np.unique(identity, return_index=True)
    return records.select(first, np.arange(records.term_key.size))


def _outboxes(records: _Records, owner: int, n_ranks: int) -> list[_Records | None]:
    """Split rank ``owner``'s (unique) records by the ranks that need them: each record goes to its
    sender, and to its receiver when that is a relay (not ``owner``); terms go to their sender."""
    relayed = np.flatnonzero((records.receiver != owner) & (records.receiver != records.sender))
    targets = np.concatenate([records.sender, records.receiver[relayed]])
    indices = np.concatenate([np.arange(records.key.size), relayed])
    order = np.argsort(targets, kind="stable")  # one sort instead of a scan per target
    record_bounds = np.searchsorted(targets[order], np.arange(n_ranks + 1))
    term_order = np.argsort(records.term_sender, kind="stable")
    term_bounds = np.searchsorted(records.term_sender[term_order], np.arange(n_ranks + 1))
    boxes: list[_Records | None] = [None] * n_ranks
    for target in np.unique(targets).tolist():
        chosen = np.sort(indices[order[record_bounds[target] : record_bounds[target + 1]]])
        boxes[target] = records.select(chosen, term_order[term_bounds[target] : term_bounds[target + 1]])
    return boxes


# ----------------------------------------------------------------------------------------------
# Layout


def _exchange_of(hop: np.ndarray, round_: np.ndarray, layout: str, hierarchical: bool) -> np.ndarray:
    if layout == "merged":
        return hop - 1
    if not hierarchical:
        return round_.copy()
    return np.where(round_ == 0, 0, 2 * round_ - 2 + hop)


def _layout(layout: str, hierarchical: bool, n_groups: int) -> list[tuple[int, int | None, int | None]]:
    """(step, input, receive_slot) of every exchange."""
    if layout == "merged":
        return [(0, None, None), (1, 0, None)] if hierarchical else [(0, None, None)]
    result = [(0, None, None)]
    for d in range(1, n_groups):
        result.append((d - 1, None, d % 2))
        if hierarchical:
            result.append((d, len(result) - 1, None))
    return result


def _assemble(
    rank: int,
    blocks: LocalBlocks,
    known: _Records,
    column_serving: _ColumnServing,
    strategy: Strategy,
    layout: str,
    groups: np.ndarray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    keys: RecordKeys,
) -> RankPlan:
    """Sender and receiver matrices of every exchange of one rank from the records it knows."""
    known = _unique_records(known, keys)
    hierarchical = strategy.hierarchical
    exchange_of = _exchange_of(_HOP[known.kind], known.round, layout, hierarchical)
    n_groups = int(groups.max(initial=0)) + 1
    specs = _layout(layout, hierarchical, n_groups)
    n_b = int(col_partition.counts()[rank])
    n_c = blocks.n_local_rows
    col_start, row_start = int(col_partition.offsets[rank]), int(row_partition.offsets[rank])
    served = column_serving
    served_exchange = _exchange_of(_HOP[served.kind], served.round, layout, hierarchical)

    receive_orders = []
    exchanges = []
    for index, (step, input_index, slot) in enumerate(specs):
        mine = exchange_of == index
        # Receive side: buffer ordered by (sender, kind, key).
        incoming = np.flatnonzero(mine & (known.receiver == rank))
        recv_order = np.sort(keys.order(known.sender[incoming], known.kind[incoming], known.key[incoming]))
        receive_orders.append(recv_order)
        received = keys.rows_of(recv_order)
        recv_ranks, recv_counts = np.unique(received.peer, return_counts=True)
        on = served_exchange == index
        b_slots = _positions(recv_order, keys.order(served.sender[on], served.kind[on], served.cols[on]), "received B rows")
        c_slots = np.flatnonzero(np.isin(received.kind, (DIRECT_C, AGGREGATE_C)))
        receive_matrix = sp.csr_array(
            (
                np.concatenate([served.values[on], np.ones(c_slots.size)]),
                (np.concatenate([served.rows[on], received.key[c_slots] - row_start]), np.concatenate([b_slots, c_slots])),
            ),
            shape=(n_c, recv_order.size),
        )

        # Send side: rows ordered by (receiver, kind, key).
        outgoing = np.flatnonzero(mine & (known.sender == rank))
        send_order = np.sort(keys.order(known.receiver[outgoing], known.kind[outgoing], known.key[outgoing]))
        sent = keys.rows_of(send_order)
        send_kind, send_key = sent.kind, sent.key
        send_ranks, send_counts = np.unique(sent.peer, return_counts=True)
        rows, cols, values = [], [], []
        selected = np.flatnonzero(np.isin(send_kind, (DIRECT_B, FETCH_B)))
        rows.append(selected)
        cols.append(send_key[selected] - col_start)
        values.append(np.ones(selected.size))
        term_on = known.term_sender == rank
        # A term's round: from this rank's group to the group owning its C row.
        term_round = (groups[rank] - groups[row_partition.owner(known.term_key[term_on])]) % n_groups
        term_exchange = _exchange_of(_HOP[known.term_kind[term_on]], term_round, layout, hierarchical)
        term_here = term_exchange == index
        rows.append(_positions(send_order, keys.order(
            known.term_receiver[term_on][term_here], known.term_kind[term_on][term_here], known.term_key[term_on][term_here]
        ), "partial C rows"))
        cols.append(known.term_col[term_on][term_here] - col_start)
        values.append(known.term_value[term_on][term_here])
        if input_index is not None:
            input_order = receive_orders[input_index]
            _, input_kind, input_key = keys.rows_of(input_order)
            forwards = np.flatnonzero(send_kind == FORWARD_B)
            owners = np.asarray(col_partition.owner(send_key[forwards]), np.int64)
            rows.append(forwards)
            cols.append(n_b + _positions(input_order, keys.order(owners, FETCH_B, send_key[forwards]), "forwarded B rows"))
            values.append(np.ones(forwards.size))
            partial_slots = np.flatnonzero(input_kind == PARTIAL_C)
            aggregates = np.flatnonzero(send_kind == AGGREGATE_C)
            by_key = aggregates[np.argsort(send_key[aggregates], kind="stable")]
            rows.append(by_key[_positions(send_key[by_key], input_key[partial_slots], "aggregated C rows")])
            cols.append(n_b + partial_slots)
            values.append(np.ones(partial_slots.size))
            n_input = input_order.size
        else:
            n_input = 0
        send_matrix = sp.csr_array(
            (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
            shape=(send_order.size, n_b + n_input),
        )
        exchanges.append(
            Exchange(
                step=step,
                input=input_index,
                receive_slot=slot,
                send_ranks=send_ranks.astype(np.int64),
                send_counts=send_counts.astype(np.int64),
                send_matrix=send_matrix,
                recv_ranks=recv_ranks.astype(np.int64),
                recv_counts=recv_counts.astype(np.int64),
                receive_matrix=receive_matrix,
                send_kinds=send_kind.astype(np.int8),
                receive_kinds=received.kind.astype(np.int8),
                receive_keys=received.key.astype(np.int64),
            )
        )
    setup_entries = int(np.count_nonzero(known.term_sender == rank))
    return RankPlan(
        rank=rank,
        strategy=strategy,
        layout=layout,
        row_partition=row_partition,
        col_partition=col_partition,
        groups=groups,
        diagonal=blocks.diagonal,
        exchanges=tuple(exchanges),
        setup_entries=setup_entries,
    )


# ----------------------------------------------------------------------------------------------
# One planning procedure for both paths


GroupCall = Callable[[dict, Callable[[list], list]], dict]
AllToAll = Callable[[dict], dict]


def _plan_ranks(
    local_blocks: dict[int, LocalBlocks],
    strategy: Strategy,
    row_partition: RowPartition,
    col_partition: RowPartition,
    groups: np.ndarray,
    layout: str,
    proxy_policy: str,
    group_call: GroupCall,
    alltoall: AllToAll,
) -> dict[int, RankPlan]:
    """Plan the ranks in ``local_blocks`` (all of them, or this MPI rank's).

    ``group_call(values, function)`` hands the values of each group's ranks (a list in rank order)
    to ``function`` once per group and returns each rank's entry of the result; ``alltoall(boxes)``
    delivers ``boxes[rank][target]`` to ``target``.
    """
    n_ranks = row_partition.n_parts
    n_groups = int(groups.max(initial=0)) + 1
    hierarchical = strategy.hierarchical
    keys = RecordKeys(n_ranks, max(row_partition.n, col_partition.n))

    row_based = {rank: choose_row_based(strategy, blocks, n_ranks) for rank, blocks in local_blocks.items()}
    if strategy is Strategy.JOINT_GROUP and n_groups > 1:
        off_group = {rank: groups[b.sources] != groups[rank] for rank, b in local_blocks.items()}
        values = {
            rank: (b.rows[off] + row_partition.offsets[rank], b.cols[off], groups[b.sources[off]])
            for (rank, b), off in zip(local_blocks.items(), off_group.values())
        }
        decided = group_call(
            values, lambda members: hierarchy.group_cover_row_based(*map(list, zip(*members)), n_groups)
        )
        for rank, mask in decided.items():
            row_based[rank][off_group[rank]] = mask

    proxies: dict[int, np.ndarray] = {}
    if hierarchical and proxy_policy == "balanced":
        needs = {}
        for rank, b in local_blocks.items():
            wanted = ~row_based[rank] & (groups[b.sources] != groups[rank])
            needs[rank] = np.unique(b.cols[wanted])

        def balance(members: list) -> list:
            # Rows the whole group needs from each source: the union over its ranks.
            needed = np.unique(np.concatenate(members))
            rows_from_source = np.bincount(col_partition.owner(needed), minlength=n_ranks).astype(np.int64)
            return [rows_from_source] * len(members)

        counts = group_call(needs, balance)
        proxies = {rank: hierarchy.balanced_proxies(groups, int(groups[rank]), counts[rank]) for rank in local_blocks}
    elif hierarchical:
        proxies = {rank: hierarchy.local_proxies(groups, int(groups[rank])) for rank in local_blocks}

    serving, boxes = {}, {}
    for rank, blocks in local_blocks.items():
        proxy = proxies.get(rank, np.full(n_ranks, -1, np.int64))
        aggregator = hierarchy.aggregators(groups, rank) if hierarchical else np.full(n_groups, -1, np.int64)
        records, serving[rank] = _request_records(
            blocks, row_based[rank], hierarchical, groups, proxy, aggregator, row_partition, col_partition, strategy
        )
        own = _unique_records(records, keys)
        boxes[rank] = (_outboxes(own, rank, n_ranks), own)
    delivered = alltoall({rank: box[0] for rank, box in boxes.items()})
    plans = {}
    for rank, blocks in local_blocks.items():
        parts = [boxes[rank][1]] + [r for r in delivered[rank] if r is not None]
        plans[rank] = _assemble(
            rank, blocks, _Records.concat(parts), serving[rank], strategy, layout, groups, row_partition, col_partition, keys
        )
    return plans


def _check_inputs(strategy, layout: str, proxy: str, topology: Topology | None, n_ranks: int) -> tuple[Strategy, np.ndarray]:
    strategy = Strategy(strategy)
    if not strategy.executable:
        raise InputError(
            "strategy 'rowwise' is accounting only and has no plan; use sparsewire.plan.stats.rowwise_stats for its volumes"
        )
    if layout not in LAYOUTS:
        raise InputError(f"unknown plan layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    if proxy not in PROXY_POLICIES:
        raise InputError(f"unknown proxy policy {proxy!r}; choose from {', '.join(PROXY_POLICIES)}")
    if strategy.hierarchical and topology is None:
        raise InputError(f"strategy {strategy.value!r} needs a topology; pass topology=Topology.nodes(G) or a preset")
    groups = (topology or Topology.flat()).groups(n_ranks)
    return strategy, groups


def build_plan(
    matrix: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy | str,
    topology: Topology | None = None,
    *,
    layout: str = "merged",
    proxy: str = "local",
) -> CommPlan:
    """Plan every rank at once from the global matrix. Not collective; needs no MPI.

    Runs the same procedure as :func:`build_rank_plan_collective` with the group step and the
    all-to-all done in memory, so ``build_plan(...).ranks[p]`` equals rank p's collective plan.

    Args:
        topology: groups of ranks; required by hierarchical strategies. Flat strategies use it only
            for the ``pipelined`` layout's rounds.
        layout: ``merged`` (for the bulk and overlap modes) or ``pipelined`` (the pipelined mode).
        proxy: ``local`` (CoLa's local-rank matching) or ``balanced`` (even bytes per proxy).
    """
    csr = sp.csr_array(matrix)
    if row_partition.n != csr.shape[0] or col_partition.n != csr.shape[1]:
        raise PlanMismatchError(
            f"partitions cover {row_partition.n} rows and {col_partition.n} columns but the matrix is "
            f"{csr.shape[0]} x {csr.shape[1]}; build them with sparsewire.partition.partition on this matrix"
        )
    if row_partition.n_parts != col_partition.n_parts:
        raise PlanMismatchError(
            f"row partition has {row_partition.n_parts} parts but column partition {col_partition.n_parts}; use one rank count"
        )
    n_ranks = row_partition.n_parts
    strategy, groups = _check_inputs(strategy, layout, proxy, topology, n_ranks)
    local_blocks = {
        rank: split_local_rows(rank, csr[slice(*row_partition.range(rank))], col_partition) for rank in range(n_ranks)
    }

    def group_call(values: dict, function) -> dict:
        result = {}
        for members in hierarchy.group_members(groups):
            outputs = function([values[int(r)] for r in members])
            result.update({int(r): out for r, out in zip(members, outputs)})
        return result

    def alltoall(boxes: dict) -> dict:
        return {target: [boxes[source][target] for source in range(n_ranks)] for target in range(n_ranks)}

    plans = _plan_ranks(local_blocks, strategy, row_partition, col_partition, groups, layout, proxy, group_call, alltoall)
    return CommPlan(strategy, row_partition, col_partition, tuple(plans[r] for r in range(n_ranks)))


def build_rank_plan_collective(
    comm,
    local_rows: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy | str,
    topology: Topology | None = None,
    *,
    layout: str = "merged",
    proxy: str = "local",
) -> RankPlan:
    """Collective. Each rank plans from its own rows only: group leaders gather what a group-level
    decision needs (``joint-group``'s cover, ``balanced`` proxies) and one all-to-all delivers the
    records to the ranks that send or relay them. Arguments as :func:`build_plan`.

    Args:
        comm: an mpi4py communicator whose size equals the partitions' number of parts.
        local_rows: this rank's rows of A, shape (rows owned, global columns), global column indices.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    problem = None
    if row_partition.n_parts != size or col_partition.n_parts != size:
        problem = (
            f"the partitions have {row_partition.n_parts} and {col_partition.n_parts} parts but the communicator has "
            f"{size} ranks; partition for {size} ranks"
        )
    elif local_rows.shape != (int(row_partition.counts()[rank]), col_partition.n):
        problem = (
            f"rank {rank} holds a {local_rows.shape[0]} x {local_rows.shape[1]} block but the partitions say "
            f"{int(row_partition.counts()[rank])} x {col_partition.n}; give each rank exactly its rows of A"
        )
    problems = [p for p in comm.allgather(problem) if p]
    if problems:
        raise PlanMismatchError(problems[0])
    strategy, groups = _check_inputs(strategy, layout, proxy, topology, size)
    blocks = split_local_rows(rank, local_rows, col_partition)
    group_comm = comm.Split(int(groups[rank]), rank)

    def group_call(values: dict, function) -> dict:
        gathered = group_comm.gather(values[rank], root=0)
        outputs = function(gathered) if group_comm.Get_rank() == 0 else None
        return {rank: group_comm.scatter(outputs, root=0)}

    def alltoall(boxes: dict) -> dict:
        return {rank: comm.alltoall(boxes[rank])}

    try:
        plans = _plan_ranks(
            {rank: blocks}, strategy, row_partition, col_partition, groups, layout, proxy, group_call, alltoall
        )
    finally:
        group_comm.Free()
    return plans[rank]
