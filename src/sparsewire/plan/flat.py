"""Flat plans (``column``, ``row``, ``joint``) built by each rank from its own rows in memory linear in them.

The records planner (:mod:`sparsewire.plan.records`) describes every transferred row by a 40-byte record,
keeps the requests, their distinct copy, the packed boxes, the receive buffer and the records unpacked from
it side by side (28-50x the rank's rows at P = 16384). A flat plan has one exchange, and both of its sides
follow from the rows directly:

* the receive side of rank p from p's rows alone: per owner q in rank order, the B rows p needs from q
  (its column-based columns, ascending) and then the partial C rows q computes for p (its rows with a
  row-based nonzero in q's columns, ascending);
* the send side of q is, per receiving rank p in rank order, the same lists: p's B rows of q (a single 1
  at the column) and p's partial C rows (p's A entries in q's columns, by row then column) -- exactly
  the order in which p can write them.

So every rank p sends each owner q, straight from its rows: (1) the columns of the B rows it needs (its
receive keys themselves, no copy), (2) the columns and (3) the values of the A entries q multiplies for
it, (4) the number of entries of each such partial row; four ``Alltoallv`` whose receive buffers, at the
displacements one ``Alltoall`` of those three counts per pair gives, are the send matrix's own CSR arrays
(indices, data, and row lengths that one cumulative sum turns into indptr). Besides the plan a rank holds
its outgoing entries and O(chunk) temporaries (the receive side is filled in chunks of nonzeros).

The plans equal those of :mod:`sparsewire.plan.plan`'s records planner (``RankPlan.equals``), with 32-bit
index arrays where they fit. The hierarchical strategies, ``block``, the ``pipelined`` layout over several
groups and the bit-packed setup exchange keep the records planner.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.distinct import concatenated_ranges, distinct
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition
from sparsewire.plan.strategies import Strategy, rank_cover_row_based
from sparsewire.plan.types import DIRECT_C, Exchange, RankPlan

__all__ = ["plans_flat", "build_flat_rank_plan"]

# Passes over the nonzeros where one pass would make int64 temporaries of every nonzero: about a sixteenth of
# them each (a few bytes per nonzero at any time), and never fewer than _MIN_CHUNK.
_PASSES, _MIN_CHUNK = 16, 4096
_MPI_COUNT_LIMIT = 2**31  # MPI's counts and displacements are C ints


def _chunk(total: int) -> int:
    return max(_MIN_CHUNK, -(-total // _PASSES))


def plans_flat(strategy: Strategy, layout: str, n_groups: int, code_setup: bool) -> bool:
    """Not collective. Whether :func:`build_flat_rank_plan` builds this plan (else the records planner does)."""
    flat = strategy in (Strategy.COLUMN, Strategy.ROW, Strategy.JOINT)
    return flat and not code_setup and (layout == "merged" or n_groups == 1)


def _index_dtype(bound: int):
    """32-bit indices where every index, and any sum of two of them an executor forms, stays below 2^31."""
    return np.int32 if 2 * bound < 2**31 else np.int64


def _row_counts(mask: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """The number of True entries of ``mask`` (one per stored nonzero) in every row of a CSR with ``indptr``."""
    running = np.cumsum(mask, dtype=np.int64 if mask.size >= 2**31 else np.int32)
    ends = indptr[1:]
    through = np.where(ends > 0, running[np.maximum(ends, 1) - 1] if running.size else 0, 0)
    return np.diff(through, prepend=0).astype(np.int64)


def _chunks(weights: np.ndarray, total: int):
    """Consecutive ranges [a, b) of ``weights``'s indices, each of about :func:`_chunk` weight (or one index)."""
    if weights.size == 0:
        return
    per_range = _chunk(total)
    bounds = np.searchsorted(np.cumsum(weights), np.arange(per_range, total, per_range), side="right")
    bounds = np.unique(np.concatenate([[0], bounds, [weights.size]]))
    yield from zip(bounds[:-1].tolist(), bounds[1:].tolist())


def _diagonal(local: sp.csr_array, on: np.ndarray, col_start: int, n_b: int) -> sp.csr_array:
    """``A(p, p)`` with local indices (as :func:`~sparsewire.plan.blocks.split_local_rows` makes it)."""
    if col_start == 0 and n_b == local.shape[1] and on.all():
        return local  # one rank owns every column: share the arrays
    indptr = np.concatenate([[0], np.cumsum(_row_counts(on, local.indptr))]).astype(local.indptr.dtype)
    indices = local.indices[on]
    indices -= indices.dtype.type(col_start)
    return sp.csr_array((local.data[on], indices, indptr), shape=(local.shape[0], n_b))


def _row_based(strategy: Strategy, local: sp.csr_array, off: np.ndarray, cols: RowPartition, size: int) -> np.ndarray:
    """Per stored nonzero: served row-based (as :func:`~sparsewire.plan.strategies.choose_row_based` decides).
    ``joint``'s cover is solved per range of owners: the blocks of different owners share no vertex, so the
    cover of each range is that range's part of the whole one, and the solver's temporaries (about 100
    bytes per nonzero) exist for one range at a time."""
    if strategy is Strategy.COLUMN:
        return np.zeros(off.size, bool)
    if strategy is Strategy.ROW:
        return off.copy()
    row_based = np.zeros(off.size, bool)
    per_owner = np.zeros(size, np.int64)
    step = _chunk(off.size)
    for first in range(0, off.size, step):
        chosen = local.indices[first : first + step][off[first : first + step]]
        per_owner += np.bincount(cols.owner(chosen), minlength=size)
    for low, high in _chunks(per_owner, int(per_owner.sum())):
        in_range = (local.indices >= cols.offsets[low]) & (local.indices < cols.offsets[high])
        in_range &= off
        positions = np.flatnonzero(in_range)
        del in_range
        if positions.size == 0:
            continue
        rows = np.searchsorted(local.indptr, positions, side="right") - 1
        columns = local.indices[positions].astype(np.int64)
        chosen = rank_cover_row_based(rows, np.asarray(cols.owner(columns), np.int64), columns, size)
        row_based[positions[chosen]] = True
    return row_based


class _Requests:
    """What rank p asks of every owner q (arrays of length P are per q):

    * ``b_cols``: the global columns of its column-based nonzeros, distinct, ascending (so by owner);
      ``b_from[q]`` of them from q;
    * the partial rows: one per run of row-based nonzeros of one row in one owner's columns (row-major:
      ``pair_row``, ``pair_owner``, ``pair_terms``); ``c_from[q]`` of them and ``t_from[q]`` terms from q;
      ``by_owner``: the pairs in owner-major order (stable);
    * ``term_positions``: the stored positions of the row-based nonzeros in (owner, row, column) order.

    Made in passes over parts of the nonzeros (:func:`_chunk`): no temporary of every nonzero beyond the row-based positions.
    """

    def __init__(self, local: sp.csr_array, column_based: np.ndarray, row_based: np.ndarray, cols: RowPartition):
        size = cols.n_parts
        self.b_cols = distinct(local.indices[column_based], in_place=True)
        self.b_from = np.diff(np.searchsorted(self.b_cols, cols.offsets)).astype(np.intc)
        self.b_per_row = np.zeros(local.shape[0], np.int64)  # column-based nonzeros of every row
        position = _index_dtype(local.nnz)
        row_based_at = np.empty(int(np.count_nonzero(row_based)), position)  # stored position of each
        starts, pair_rows, pair_owners = [], [], []
        done, last = 0, (-1, -1)
        step = _chunk(local.nnz)
        for first in range(0, local.nnz, step):
            here_b = np.flatnonzero(column_based[first : first + step]) + first
            self.b_per_row += np.bincount(np.searchsorted(local.indptr, here_b, side="right") - 1, minlength=local.shape[0])
            positions = np.flatnonzero(row_based[first : first + step]) + first
            if positions.size == 0:
                continue
            rows = np.searchsorted(local.indptr, positions, side="right") - 1
            owners = np.asarray(cols.owner(local.indices[positions]), np.int64)
            new = np.empty(positions.size, bool)
            new[0] = (int(rows[0]), int(owners[0])) != last
            new[1:] = (rows[1:] != rows[:-1]) | (owners[1:] != owners[:-1])
            here = np.flatnonzero(new)
            starts.append((here + done).astype(position))
            pair_rows.append(rows[here].astype(np.intc))
            pair_owners.append(owners[here].astype(np.intc))
            row_based_at[done : done + positions.size] = positions
            done += positions.size
            last = (int(rows[-1]), int(owners[-1]))
        join = lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype)  # noqa: E731
        starts = join(starts, position)
        self.pair_row, self.pair_owner = join(pair_rows, np.intc), join(pair_owners, np.intc)
        self.pair_terms = np.diff(np.append(starts, done)).astype(np.intc)
        self.c_from = np.bincount(self.pair_owner, minlength=size).astype(np.intc)
        self.t_from = np.bincount(self.pair_owner, weights=self.pair_terms, minlength=size).astype(np.intc)
        self.by_owner = np.argsort(self.pair_owner, kind="stable").astype(position)
        self.term_positions = np.empty(done, position)
        written = 0
        for low, high in _chunks(self.pair_terms[self.by_owner], done):
            pairs = self.by_owner[low:high]
            taken = row_based_at[concatenated_ranges(starts[pairs], self.pair_terms[pairs])]
            self.term_positions[written : written + taken.size] = taken
            written += taken.size


def _exclusive(counts: np.ndarray, dtype=np.int64) -> np.ndarray:
    return (np.cumsum(counts, dtype=np.int64) - counts).astype(dtype)


def _logical_or():
    from mpi4py import MPI

    return MPI.LOR


def _alltoallv(comm, send: np.ndarray, send_counts: np.ndarray, receive: np.ndarray, recv_counts, recv_displs) -> None:
    """One ``Alltoallv`` of ``send`` (laid out by target, ``send_counts`` C ints) into ``receive`` at ``recv_displs``."""
    from mpi4py import MPI

    # the predefined MPI datatype of the arrays' element type (mpi4py's from_numpy_dtype returns a duplicate, 0.4 KB
    # that its caller must free)
    kind = MPI.Datatype.fromcode(send.dtype.char)
    comm.Alltoallv([send, (send_counts, _exclusive(send_counts, np.intc)), kind], [receive, (recv_counts, recv_displs), kind])


def _send_side(comm, requests: _Requests, local: sp.csr_array, col_start: int, cols_dtype, n_b: int):
    """The exchange of the requests; returns (send matrix, send kinds, send ranks and counts, bytes received, terms held).
    Counts and displacements are C ints (MPI's), P of each at a time."""
    size = comm.Get_size()
    counts = np.empty((size, 3), np.intc)
    counts[:, 0], counts[:, 1], counts[:, 2] = requests.b_from, requests.t_from, requests.c_from
    received = np.empty_like(counts)
    comm.Alltoall(counts, received)
    del counts
    b_in, t_in, c_in = (np.ascontiguousarray(received[:, field]) for field in range(3))
    del received
    n_rows = int(b_in.sum(dtype=np.int64) + c_in.sum(dtype=np.int64))
    n_terms = int(t_in.sum(dtype=np.int64))
    n_entries = int(b_in.sum(dtype=np.int64)) + n_terms
    # Checked by every rank together, before any Alltoallv (one rank raising alone would leave the rest waiting).
    sent = max(requests.b_cols.size + requests.term_positions.size, requests.pair_row.size)
    if comm.allreduce(max(sent, n_entries, n_rows) >= _MPI_COUNT_LIMIT, op=_logical_or()):
        raise InputError(
            f"a rank's share of the planner's exchange reaches {_MPI_COUNT_LIMIT:,} entries, beyond MPI's int counts "
            "and displacements; plan with more ranks"
        )
    index = _index_dtype(max(n_entries, n_rows, n_b))

    # Each plan array made just before its stream arrives, the largest outgoing stream first, so that
    # as little as possible of the plan and the outgoing entries exist at once.
    terms_start = _exclusive(b_in + t_in, np.intc)
    terms_start += b_in  # where each source's terms start in the send matrix's entries
    data = np.ones(n_entries)
    outgoing = local.data[requests.term_positions].astype(np.float64, copy=False)
    _alltoallv(comm, outgoing, requests.t_from, data, t_in, terms_start)
    del outgoing
    indices = np.empty(n_entries, cols_dtype)
    outgoing = local.indices[requests.term_positions].astype(cols_dtype, copy=False)
    del requests.term_positions
    _alltoallv(comm, outgoing, requests.t_from, indices, t_in, terms_start)
    del outgoing, requests.t_from
    terms_start -= b_in
    _alltoallv(comm, requests.b_cols.astype(cols_dtype, copy=False), requests.b_from, indices, b_in, terms_start)
    del terms_start
    lengths = np.ones(n_rows + 1, index)
    lengths[0] = 0
    row_start = _exclusive(b_in + c_in, np.intc)
    row_start += b_in  # where each source's partial rows start
    outgoing = requests.pair_terms[requests.by_owner].astype(index)
    del requests.pair_terms
    _alltoallv(comm, outgoing, requests.c_from, lengths[1:], c_in, row_start)
    del outgoing, row_start
    np.cumsum(lengths, out=lengths)
    indices -= cols_dtype(col_start)
    send_matrix = sp.csr_array((data, indices.astype(index, copy=False), lengths), shape=(n_rows, n_b))
    kinds = np.repeat(np.tile(np.array([0, DIRECT_C], np.int8), size), np.column_stack([b_in, c_in]).ravel())
    wire = n_entries * indices.itemsize + n_terms * data.itemsize + int(c_in.sum(dtype=np.int64)) * lengths.itemsize
    ranks = np.flatnonzero(b_in | c_in)
    del t_in
    counts = b_in[ranks].astype(np.int64)
    counts += c_in[ranks]
    return send_matrix, kinds, ranks, counts, wire, n_terms


def _receive_side(requests: _Requests, local: sp.csr_array, column_based: np.ndarray, row_start: int, n_rows_global: int):
    """The receive keys, kinds, ranks, counts and matrix (every buffer by owner, then B rows before C rows, then key)."""
    b_from, c_from = requests.b_from, requests.c_from
    n_slots, n_pairs = int(b_from.sum(dtype=np.int64) + c_from.sum(dtype=np.int64)), requests.pair_row.size
    index = _index_dtype(max(n_slots, local.nnz + n_pairs, n_rows_global))
    # Owner q's B rows start after every earlier owner's rows, so the k-th requested column (k counts B rows
    # only) sits k + (C rows of earlier owners) in, and the t-th partial row in owner order t + (B rows of
    # q and earlier owners).
    b_slot = None  # the slot of b_cols[k]: k itself when no owner sends partial rows
    if n_pairs:
        b_slot = np.repeat(_exclusive(c_from, index), b_from)
        b_slot += np.arange(b_slot.size, dtype=index)
    c_slot = np.empty(n_pairs, index)  # the slot of every pair (row-major)
    c_slot[requests.by_owner] = np.cumsum(b_from, dtype=index)[requests.pair_owner[requests.by_owner]] + np.arange(
        n_pairs, dtype=index
    )
    key_type = _index_dtype(n_rows_global)
    if n_pairs == 0:  # the buffer is the B rows alone: its keys are the requested columns (no copy where they fit)
        keys = requests.b_cols.astype(key_type, copy=False)
    else:
        keys = np.empty(n_slots, key_type)
        keys[b_slot] = requests.b_cols
    kinds = np.zeros(n_slots, np.int8)
    keys[c_slot] = requests.pair_row + row_start
    kinds[c_slot] = DIRECT_C

    # The matrix: per row its column-based entries (in column order), then its pairs (in owner order);
    # sorted by slot at the end where pairs make the two interleave.
    n_local = local.shape[0]
    b_per_row = requests.b_per_row
    pairs_per_row = np.bincount(requests.pair_row, minlength=n_local).astype(np.int64)
    indptr = np.zeros(n_local + 1, index)
    np.cumsum(b_per_row + pairs_per_row, out=indptr[1:])
    out_indices, out_values = np.empty(int(indptr[-1]), index), np.empty(int(indptr[-1]))
    pairs_before = indptr[:-1] - _exclusive(b_per_row)  # where row i's column-based entries start, less their rank
    done = 0
    step = _chunk(local.nnz)
    for first in range(0, local.nnz, step):
        chosen = np.flatnonzero(column_based[first : first + step]) + first
        slots = np.searchsorted(requests.b_cols, local.indices[chosen])
        if b_slot is not None:
            slots = b_slot[slots]
        where = np.arange(done, done + chosen.size)
        if n_pairs:
            where += pairs_before[np.searchsorted(local.indptr, chosen, side="right") - 1]
        out_indices[where], out_values[where] = slots, local.data[chosen]
        done += chosen.size
    if n_pairs:
        where = np.arange(n_pairs) + np.cumsum(b_per_row)[requests.pair_row]
        out_indices[where], out_values[where] = c_slot, 1.0
        del where
    matrix = sp.csr_array((out_values, out_indices, indptr), shape=(n_local, n_slots))
    if n_pairs:
        matrix.sort_indices()
    ranks = np.flatnonzero(b_from | c_from)  # (P-long arrays are a tenth of the rows' size each at P = 16384)
    counts = b_from[ranks].astype(np.int64)
    counts += c_from[ranks]
    return keys, kinds, ranks, counts, matrix


def build_flat_rank_plan(
    comm,
    local_rows: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy,
    groups,
    layout: str,
) -> RankPlan:
    """Collective. Rank ``comm.Get_rank()``'s plan of a flat strategy (:func:`plans_flat`) from its own rows: one
    ``Alltoall`` of three counts per pair and four ``Alltoallv`` into the plan's arrays (module docstring).
    ``setup_exchange_bytes`` is what those ``Alltoallv`` delivered."""
    rank, size = comm.Get_rank(), comm.Get_size()
    local = sp.csr_array(local_rows)
    local.sum_duplicates()  # canonical, as the records planner sees it
    col_start, col_stop = (int(v) for v in col_partition.range(rank))
    n_b = col_stop - col_start
    on = (local.indices >= col_start) & (local.indices < col_stop)
    diagonal = _diagonal(local, on, col_start, n_b)
    np.logical_not(on, out=on)  # now: off the diagonal block
    row_based = _row_based(strategy, local, on, col_partition, size)
    column_based = on
    column_based &= ~row_based
    requests = _Requests(local, column_based, row_based, col_partition)
    del row_based
    cols_dtype = np.int32 if col_partition.n < 2**31 else np.int64
    send_matrix, send_kinds, send_ranks, send_counts, wire, terms = _send_side(comm, requests, local, col_start, cols_dtype, n_b)
    row_start = int(row_partition.offsets[rank])
    keys, receive_kinds, recv_ranks, recv_counts, receive_matrix = _receive_side(
        requests, local, column_based, row_start, row_partition.n
    )
    exchange = Exchange(
        step=0,
        input=None,
        receive_slot=None,
        send_ranks=send_ranks,
        send_counts=send_counts,
        send_matrix=send_matrix,
        recv_ranks=recv_ranks,
        recv_counts=recv_counts,
        receive_matrix=receive_matrix,
        send_kinds=send_kinds,
        receive_kinds=receive_kinds,
        receive_keys=keys,
    )
    return RankPlan(
        rank=rank,
        strategy=strategy,
        layout=layout,
        row_partition=row_partition,
        col_partition=col_partition,
        groups=groups,
        diagonal=diagonal,
        exchanges=(exchange,),
        setup_entries=terms,
        setup_exchange_bytes=(wire, wire),
    )
