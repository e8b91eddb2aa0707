"""Records: every transferred row as (kind, sender, receiver, key, round), written by the rank that
receives it (:func:`request_records`), packed into int64 keys for sorting and matching
(:class:`RecordKeys`), deduplicated and sent to the ranks that must know them (:func:`outboxes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sparsewire._lib.distinct import concatenated_ranges
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.partition import RowPartition
from sparsewire.plan.blocks import LocalBlocks
from sparsewire.plan.strategies import Strategy
from sparsewire.plan.types import AGGREGATE_C, DIRECT_B, DIRECT_C, FETCH_B, FORWARD_B, PARTIAL_C, RecordKind

__all__ = [
    "Records",
    "make_records",
    "check_key_space",
    "positions_in",
    "BufferRows",
    "RecordKeys",
    "ColumnServing",
    "request_records",
    "unique_records",
    "outboxes",
    "deliver_all",
    "unpack_all",
    "packed_outboxes",
    "exchange_boxes",
]


class Records(NamedTuple):
    """Transferred rows (kind, sender, receiver, key, round) and the A entries (terms) of C rows.

    A tuple of arrays (the first five per record, the rest per term), so that joining and
    selecting many of them costs one C-level pass over the fields (planning at P = 1024 joins and
    splits them about a million times)."""

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
    def concat(parts: list[Records]) -> Records:
        """Not collective. The records of ``parts``, in order."""
        return Records(*(np.concatenate(column) for column in zip(*parts)))

    def select(self, records: np.ndarray, terms: np.ndarray) -> Records:
        """Not collective. The records at positions ``records`` and the terms at ``terms`` (indices or slices)."""
        return Records(*(v[records] for v in self[:5]), *(v[terms] for v in self[5:]))


def make_records(kind, sender, receiver, key, round_, terms=None) -> Records:
    """Not collective."""
    n = np.asarray(key).size
    full = lambda value: np.broadcast_to(np.asarray(value, np.int64), (n,)).copy()  # noqa: E731
    empty = np.zeros(0, np.int64)
    if terms is None:
        terms = (empty, empty, empty, empty, empty, np.zeros(0))
    return Records(full(kind), full(sender), full(receiver), full(key), full(round_), *terms)


def check_key_space(n_ranks: int, n_keys: int) -> None:
    """Not collective. InputError when P ranks and n rows (or columns) would overflow the
    planner's record keys ``((kind P + sender) P + receiver) n + key`` in int64 (6 P^2 n >= 2^63:
    two records would collide, e.g. at P = 2^20, n = 2^23)."""
    if len(RecordKind) * int(n_ranks) * int(n_ranks) * max(int(n_keys), 1) >= 2**63:
        raise InputError(
            f"P = {n_ranks} ranks and n = {n_keys} rows are beyond the planner's 64-bit record keys "
            f"(6 P^2 n must stay below 2^63); use fewer ranks or split the matrix"
        )


def positions_in(sorted_keys: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """Not collective. Positions of ``wanted`` in ``sorted_keys``, every one of which must be there (a missing
    one would silently take its neighbour's slot: a wrong product, not an error)."""
    positions = np.searchsorted(sorted_keys, wanted)
    found = positions < sorted_keys.size
    found[found] = sorted_keys[positions[found]] == wanted[found]
    if not found.all():
        raise PlanMismatchError(
            f"the plan lost {int((~found).sum())} {what}; the records of the ranks disagree (a planner bug: please report it)"
        )
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
class ColumnServing:
    """For every column-based nonzero of a rank: its local row, value and column, and the record
    that brings its B row (kind, sender, round)."""

    rows: np.ndarray
    values: np.ndarray
    cols: np.ndarray
    kind: np.ndarray
    sender: np.ndarray
    round: np.ndarray


def request_records(
    blocks: LocalBlocks,
    row_based: np.ndarray,
    hierarchical: bool,
    groups: np.ndarray,
    proxy: np.ndarray,
    aggregator: np.ndarray,
    relayed_cols: np.ndarray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy,
) -> tuple[Records, ColumnServing]:
    """Not collective. Receiver step of rank p: the records that serve its off-diagonal nonzeros, and for each
    column-based nonzero the record that brings its B row (kind, sender, round).

    Hierarchical strategies relay only what merges: a B row from outside p's group goes through the
    proxy when it is in ``relayed_cols`` (another member of p's group needs it too), and a partial
    C row of row i goes through the aggregator of the source group g when more than one rank of g
    contributes to i. Anything else crosses the slow link once either way and is sent directly, so
    the inter-group bytes are those of full relaying and the intra-group bytes and hops fewer."""
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
    cb_direct = direct[cb] | ~np.isin(j, relayed_cols)
    if strategy is Strategy.BLOCK:  # every B row of every other rank, used or not
        start, stop = col_partition.range(p)
        all_j = np.concatenate([np.arange(0, start), np.arange(stop, col_partition.n)]).astype(np.int64)
        all_q = np.asarray(col_partition.owner(all_j), np.int64)
        parts.append(make_records(DIRECT_B, all_q, p, all_j, (groups[all_q] - groups[p]) % n_groups))
    else:
        parts.append(make_records(DIRECT_B, q[cb_direct], p, j[cb_direct], rnd[cb_direct]))
    relay = proxy[q] if q.size else np.zeros(0, np.int64)
    fetched = ~cb_direct
    parts.append(make_records(FETCH_B, q[fetched], relay[fetched], j[fetched], rnd[fetched]))
    forwarded = fetched & (relay != p)
    parts.append(make_records(FORWARD_B, relay[forwarded], p, j[forwarded], rnd[forwarded]))
    serving_kind = np.where(cb_direct, DIRECT_B, np.where(forwarded, FORWARD_B, FETCH_B))
    serving_sender = np.where(cb_direct | ~forwarded, q, relay)
    column_serving = ColumnServing(blocks.rows[cb], blocks.values[cb], j, serving_kind, serving_sender, rnd)

    # Row-based: partial C rows, with their A entries as terms.
    rb = row_based
    q, i, j, v, rnd = blocks.sources[rb], blocks.rows[rb] + row_start, blocks.cols[rb], blocks.values[rb], rounds[rb]
    alone = np.zeros(q.size, bool)
    if q.size:  # a row i with partials from one rank of the source group only has nothing to sum there
        row_group = i * n_groups + groups[q]
        keys, contributors = np.unique(np.unique(np.stack([row_group, q]), axis=1)[0], return_counts=True)
        alone = contributors[np.searchsorted(keys, row_group)] == 1
    rb_direct = direct[rb] | alone
    agg = aggregator[groups[q]] if q.size else np.zeros(0, np.int64)
    # Direct: q computes p's row i.  Hierarchical: q computes a partial for its aggregator, or is it.
    term_kind = np.where(rb_direct, DIRECT_C, np.where(q == agg, AGGREGATE_C, PARTIAL_C))
    term_receiver = np.where(rb_direct, p, np.where(q == agg, p, agg))
    terms = (term_kind, q, term_receiver, i, j, v)
    partial = term_kind == PARTIAL_C
    parts.append(make_records(term_kind, q, term_receiver, i, rnd, terms))
    parts.append(make_records(AGGREGATE_C, agg[partial], p, i[partial], rnd[partial]))
    return Records.concat(parts), column_serving


def unique_records(records: Records, keys: RecordKeys) -> Records:
    """Not collective. One record per identity (the same B row can be requested by several nonzeros and ranks)."""
    identity = keys.identity(records.kind, records.sender, records.receiver, records.key)
    _, first = np.unique(identity, return_index=True)
    return records.select(first, np.arange(records.term_key.size))


def _destinations(records: Records, owner: int) -> tuple[np.ndarray, np.ndarray]:
    """(target, record index) of every copy of rank ``owner``'s records: each goes to its sender, and to its
    receiver when that is a relay (not ``owner``)."""
    relayed = np.flatnonzero((records.receiver != owner) & (records.receiver != records.sender))
    return np.concatenate([records.sender, records.receiver[relayed]]), np.concatenate([np.arange(records.key.size), relayed])


def _by_target(records: Records, owner: int, n_ranks: int) -> tuple[Records, np.ndarray, np.ndarray]:
    """Rank ``owner``'s records (and terms) ordered by the rank each copy goes to, each target's in the
    records' order, with the bounds of every target's records and terms."""
    targets, indices = _destinations(records, owner)
    order = np.lexsort((indices, targets))  # by target, then position: each box in the records' order
    record_bounds = np.searchsorted(targets[order], np.arange(n_ranks + 1))
    term_order = np.argsort(records.term_sender, kind="stable")
    term_bounds = np.searchsorted(records.term_sender[term_order], np.arange(n_ranks + 1))
    return records.select(indices[order], term_order), record_bounds, term_bounds  # one gather


def outboxes(records: Records, owner: int, n_ranks: int) -> list[Records | None]:
    """Not collective. Split rank ``owner``'s (unique) records by the ranks that need them: each record goes to its
    sender, and to its receiver when that is a relay (not ``owner``); terms go to their sender. Each box keeps
    the records' order."""
    chosen, record_bounds, term_bounds = _by_target(records, owner, n_ranks)
    boxes: list[Records | None] = [None] * n_ranks
    for target in np.flatnonzero(np.diff(record_bounds)).tolist():
        rows = slice(record_bounds[target], record_bounds[target + 1])
        boxes[target] = chosen.select(rows, slice(term_bounds[target], term_bounds[target + 1]))
    return boxes


def deliver_all(owned: dict[int, Records], n_ranks: int) -> dict[int, list[Records]]:
    """Not collective. What an all-to-all of every rank's :func:`outboxes` delivers, for all ranks at once
    (serial planning): per rank one Records holding its boxes from rank 0, 1, ... in that order, each box in
    its records' order, made by one sort over all records instead of a box per pair of ranks."""
    sources = sorted(owned)
    record_offsets = np.cumsum([0] + [owned[r].key.size for r in sources])
    targets, indices = [], []
    for position, source in enumerate(sources):
        target, index = _destinations(owned[source], source)
        targets.append(target)
        indices.append(index + record_offsets[position])
    targets, indices = np.concatenate(targets), np.concatenate(indices)
    order = np.lexsort((indices, targets))  # by target, then source, then position
    record_bounds = np.searchsorted(targets[order], np.arange(n_ranks + 1))
    term_senders = np.concatenate([owned[r].term_sender for r in sources])
    term_order = np.argsort(term_senders, kind="stable")  # by sender, then source, then position
    term_bounds = np.searchsorted(term_senders[term_order], np.arange(n_ranks + 1))
    picked = indices[order]
    del targets, indices, order, term_senders
    # Field by field, so that only one field of all ranks' records is held twice at a time.
    chosen = Records(
        *(
            np.concatenate([owned[r][field] for r in sources])[picked if field < 5 else term_order]
            for field in range(len(Records._fields))
        )
    )
    return {
        target: [chosen.select(slice(*record_bounds[target : target + 2]), slice(*term_bounds[target : target + 2]))]
        for target in range(n_ranks)
    }


# ----------------------------------------------------------------------------------------------
# The all-to-all as buffers. A box of n records and m terms is 2 + 5 n + 6 m int64 words:
# [n, m], the five record fields (n each), the five integer term fields and the term values' bits (m each).


def packed_outboxes(records: Records, owner: int, n_ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. Every :func:`outboxes` box packed (the format above) and laid end to end in target order, and
    each target's number of words (0 where it gets no box): packed by index arithmetic, no Python object per
    box (pickling 11 arrays per box was 90% of a rank's planning at P = 4096)."""
    chosen, record_bounds, term_bounds = _by_target(records, owner, n_ranks)
    n, m = np.diff(record_bounds), np.diff(term_bounds)
    if np.any(m[n == 0]):
        raise PlanMismatchError("planner terms bound for a rank that gets no records (a planner bug: please report it)")
    sizes = np.where(n > 0, 2 + 5 * n + 6 * m, 0).astype(np.int64)
    starts = (np.cumsum(sizes) - sizes).astype(np.int64)
    buffer = np.empty(int(sizes.sum()), np.int64)
    present = n > 0
    buffer[starts[present]], buffer[starts[present] + 1] = n[present], m[present]
    for field in range(5):
        buffer[concatenated_ranges(starts + 2 + field * n, n)] = chosen[field]
        buffer[concatenated_ranges(starts + 2 + 5 * n + field * m, m)] = chosen[5 + field]
    buffer[concatenated_ranges(starts + 2 + 5 * n + 5 * m, m)] = np.ascontiguousarray(chosen.term_value, np.float64).view(
        np.int64
    )
    return buffer, sizes


def unpack_all(received: np.ndarray, sizes: np.ndarray) -> Records:
    """Not collective. The packed boxes laid end to end in ``received`` (``sizes`` words each, zeros skipped) as one
    Records, the boxes' records in order, gathered field by field with index arithmetic, so that no Python
    object is made per box (at P = 16384 a rank receives 16,000 boxes). The values' bits come back as float64."""
    sizes = sizes[sizes > 0]
    starts = (np.cumsum(sizes) - sizes).astype(np.int64)
    n, m = received[starts], received[starts + 1]
    if np.any(2 + 5 * n + 6 * m != sizes):
        raise PlanMismatchError("received planner boxes whose sizes disagree with their headers (a planner bug)")
    fields = [received[concatenated_ranges(starts + 2 + field * n, n)] for field in range(5)]
    terms = [received[concatenated_ranges(starts + 2 + 5 * n + field * m, m)] for field in range(5)]
    return Records(*fields, *terms, received[concatenated_ranges(starts + 2 + 5 * n + 5 * m, m)].view(np.float64))


def exchange_boxes(comm, records: Records, owner: int, coded: bool = False) -> tuple[list[Records], tuple[int, int]]:
    """Collective. The planner's all-to-all as buffers: rank ``owner``'s :func:`packed_outboxes`, their counts by
    ``Alltoall`` and the words by one ``Alltoallv`` of int64; returns what the other ranks' boxes hold, as
    one Records in source order (none when nothing arrives), and the bytes this rank received: (as sent, as
    the int64 words). Per rank: O(P) counts, no object per box. ``coded``: each box travels as
    :func:`~sparsewire._lib.bitpacking.pack_words` codes it (the zigzag of each word's step from the previous,
    bit-packed: the fields are sorted or repeat, so most steps are small), one Alltoallv of bytes; lossless."""
    from mpi4py import MPI

    send, send_counts = packed_outboxes(records, owner, comm.Get_size())
    if coded:
        send, send_counts = _code_boxes(send, send_counts)
    recv_counts = np.empty(comm.Get_size(), np.int64)
    comm.Alltoall(send_counts, recv_counts)
    received = np.empty(int(recv_counts.sum()), np.uint8 if coded else np.int64)
    kind = MPI.BYTE if coded else MPI.INT64_T
    comm.Alltoallv([send, send_counts, kind], [received, recv_counts, kind])
    wire = received.nbytes
    if coded:
        received, recv_counts = _decode_boxes(received, recv_counts)
    return ([unpack_all(received, recv_counts)] if received.size else []), (wire, received.nbytes)


def _code_boxes(words: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each box of ``sizes`` words packed (:func:`~sparsewire._lib.bitpacking.pack_words`), end to end, and their bytes."""
    from sparsewire._lib.bitpacking import pack_words

    starts = np.cumsum(sizes) - sizes
    boxes = [pack_words(words[start : start + size]) if size else np.zeros(0, np.uint8) for start, size in zip(starts, sizes)]
    coded_sizes = np.array([box.size for box in boxes], np.int64)
    return (np.concatenate(boxes) if boxes else np.zeros(0, np.uint8)), coded_sizes


def _decode_boxes(data: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The words of each packed box of ``sizes`` bytes in ``data``, end to end, and their counts."""
    from sparsewire._lib.bitpacking import unpack_words

    starts = np.cumsum(sizes) - sizes
    boxes = [unpack_words(data[start : start + size]) if size else np.zeros(0, np.int64) for start, size in zip(starts, sizes)]
    return (np.concatenate(boxes) if boxes else np.zeros(0, np.int64)), np.array([box.size for box in boxes], np.int64)
