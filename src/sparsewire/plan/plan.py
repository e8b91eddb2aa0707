"""Communication plans for distributed SpMM ``C = A @ B`` with a 1D row partition.

A plan is computed once from the sparsity pattern, the partitions and the strategy and reused for
every multiply with that pattern. It holds, per rank, everything the executor needs:

* ``diagonal``: A(p, p) with local indices, multiplied by the rank's own rows of B.
* ``send_matrix`` (sender side): one sparse matrix whose product with the local B rows is the whole
  send buffer, destination by destination: for each destination first one selection row per B row
  it needs (a single 1 in that column: column-based), then one row per partial C row it gets
  (the rows of A(destination, rank) that are served row-based: row-based).
* ``receive_matrix`` (receiver side): one sparse matrix over the receive buffer (source by source:
  B rows, then partial C rows). Its columns for B rows hold the column-based nonzeros of A (the
  compressed ghost-column map of PETSc's MPIAIJ), and its columns for partial C rows hold a 1 at the
  C row they add to. So ``C_p = diagonal @ B_p + receive_matrix @ receive_buffer``.

Planning is split into a receiver step (rank p decides, from its own rows only, how each of its
off-diagonal nonzeros is served and what it needs from each source) and a sender step (rank q
assembles its send matrix from the requests it gets). :func:`build_plan` runs both for every rank
from the global matrix without MPI; :func:`build_rank_plan_collective` runs them on each rank over
MPI with one all-to-all of requests. Both call the same functions, so the plans are identical.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.partition import RowPartition
from sparsewire.plan.blocks import LocalBlocks, split_local_rows
from sparsewire.plan.strategies import Strategy, choose_row_based

__all__ = ["RankPlan", "CommPlan", "SourceRequest", "build_plan", "build_rank_plan_collective"]


@dataclass(frozen=True)
class SourceRequest:
    """What receiver p asks of one source q (the setup message of the inspector).

    Attributes:
        b_rows: q-local indices of the B rows q must send (ascending).
        c_row_count: number of partial C rows q must send.
        c_positions: for each row-based nonzero, the index of its C row among those ``c_row_count``.
        c_cols: q-local column of each row-based nonzero.
        c_values: value of each row-based nonzero (the A entries q needs at setup).
    """

    b_rows: np.ndarray
    c_row_count: int
    c_positions: np.ndarray
    c_cols: np.ndarray
    c_values: np.ndarray


@dataclass(frozen=True, eq=False)
class RankPlan:
    """Everything one rank needs to run its part of ``C = A @ B`` (see the module docstring).

    Counts are in rows of width k; byte volumes follow as rows * k * element size.
    """

    rank: int
    strategy: Strategy
    row_partition: RowPartition
    col_partition: RowPartition
    diagonal: sp.csr_array
    send_ranks: np.ndarray
    send_b_counts: np.ndarray
    send_c_counts: np.ndarray
    send_matrix: sp.csr_array
    recv_ranks: np.ndarray
    recv_b_counts: np.ndarray
    recv_c_counts: np.ndarray
    receive_matrix: sp.csr_array

    @property
    def n_ranks(self) -> int:
        """Number of ranks the plan was built for."""
        return self.row_partition.n_parts

    @property
    def local_shape(self) -> tuple[int, int]:
        """(rows of A and C owned, rows of B owned)."""
        return int(self.diagonal.shape[0]), int(self.diagonal.shape[1])

    def send_rows(self) -> np.ndarray:
        """Rows (B plus partial C) sent to each rank in ``send_ranks`` per multiply."""
        return self.send_b_counts + self.send_c_counts

    def recv_rows(self) -> np.ndarray:
        """Rows (B plus partial C) received from each rank in ``recv_ranks`` per multiply."""
        return self.recv_b_counts + self.recv_c_counts

    def setup_nonzeros_received(self) -> np.ndarray:
        """Row-based nonzeros of A(destination, rank) this rank holds for each destination
        (they were sent to it once, at setup)."""
        c_start = _exclusive_cumsum(self.send_rows()) + self.send_b_counts
        c_stop = c_start + self.send_c_counts
        indptr = self.send_matrix.indptr
        return (indptr[c_stop] - indptr[c_start]).astype(np.int64)

    def equals(self, other: RankPlan) -> bool:
        """Exact equality of every field, including every index and value array."""
        if not isinstance(other, RankPlan):
            return False
        for field in fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if isinstance(mine, sp.sparray):
                if mine.shape != theirs.shape or not all(
                    np.array_equal(getattr(mine, a), getattr(theirs, a)) for a in ("indptr", "indices", "data")
                ):
                    return False
            elif isinstance(mine, np.ndarray):
                if not np.array_equal(mine, theirs):
                    return False
            elif mine != theirs:
                return False
        return True


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


@dataclass(frozen=True)
class _ReceiverSide:
    diagonal: sp.csr_array
    recv_ranks: np.ndarray
    recv_b_counts: np.ndarray
    recv_c_counts: np.ndarray
    receive_matrix: sp.csr_array


def _exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    return (np.cumsum(counts) - counts).astype(np.int64)


def _plan_receiver(
    blocks: LocalBlocks, strategy: Strategy, col_partition: RowPartition
) -> tuple[_ReceiverSide, dict[int, SourceRequest]]:
    """Receiver step for rank p: decide how each off-diagonal nonzero is served and what to ask of
    each source; build the receive matrix over the receive buffer."""
    n_ranks = col_partition.n_parts
    rank = blocks.rank
    row_based = choose_row_based(strategy, blocks, n_ranks)
    column_based = ~row_based

    # B rows needed, as ascending global indices (so grouped by source, since ownership is contiguous).
    if strategy is Strategy.BLOCK:
        start, stop = col_partition.range(rank)
        b_cols = np.concatenate([np.arange(0, start), np.arange(stop, col_partition.n)]).astype(np.int64)
    else:
        b_cols = np.unique(blocks.cols[column_based])
    b_sources = np.asarray(col_partition.owner(b_cols), dtype=np.int64)
    b_counts = np.bincount(b_sources, minlength=n_ranks).astype(np.int64)

    # Partial C rows needed: unique (source, local row) pairs of the row-based nonzeros.
    rp_rows, rp_cols = blocks.rows[row_based], blocks.cols[row_based]
    rp_values, rp_sources = blocks.values[row_based], blocks.sources[row_based]
    n_local = blocks.n_local_rows
    c_keys, c_index = np.unique(rp_sources * max(n_local, 1) + rp_rows, return_inverse=True)
    c_sources = c_keys // max(n_local, 1)
    c_rows = c_keys % max(n_local, 1)
    c_counts = np.bincount(c_sources, minlength=n_ranks).astype(np.int64)

    # Receive buffer: source by source, its B rows then its partial C rows.
    base = _exclusive_cumsum(b_counts + c_counts)
    b_start, c_start = _exclusive_cumsum(b_counts), _exclusive_cumsum(c_counts)
    total = int((b_counts + c_counts).sum())
    cb_rows, cb_cols = blocks.rows[column_based], blocks.cols[column_based]
    cb_sources = blocks.sources[column_based]
    cb_slots = base[cb_sources] + np.searchsorted(b_cols, cb_cols) - b_start[cb_sources]
    c_slots = base[c_sources] + b_counts[c_sources] + np.arange(c_keys.size) - c_start[c_sources]
    receive_matrix = sp.csr_array(
        (
            np.concatenate([blocks.values[column_based], np.ones(c_keys.size)]),
            (np.concatenate([cb_rows, c_rows]), np.concatenate([cb_slots, c_slots])),
        ),
        shape=(n_local, total),
    )
    receiver = _ReceiverSide(
        diagonal=blocks.diagonal,
        recv_ranks=np.flatnonzero(b_counts + c_counts).astype(np.int64),
        recv_b_counts=b_counts[b_counts + c_counts > 0],
        recv_c_counts=c_counts[b_counts + c_counts > 0],
        receive_matrix=receive_matrix,
    )

    # Requests, per source, sorted by (C row position, column) for a canonical send matrix.
    order = np.lexsort((rp_cols, c_index))
    rp_sources, rp_positions = rp_sources[order], (c_index - c_start[c_sources[c_index]])[order]
    rp_cols, rp_values = rp_cols[order], rp_values[order]
    b_bounds = np.searchsorted(b_sources, np.arange(n_ranks + 1))
    c_bounds = np.searchsorted(rp_sources, np.arange(n_ranks + 1))
    requests = {}
    for source in receiver.recv_ranks.tolist():
        col_offset = col_partition.offsets[source]
        lo, hi = c_bounds[source], c_bounds[source + 1]
        requests[source] = SourceRequest(
            b_rows=b_cols[b_bounds[source] : b_bounds[source + 1]] - col_offset,
            c_row_count=int(c_counts[source]),
            c_positions=rp_positions[lo:hi],
            c_cols=rp_cols[lo:hi] - col_offset,
            c_values=rp_values[lo:hi],
        )
    return receiver, requests


def _plan_sender(rank: int, col_partition: RowPartition, requests: list[tuple[int, SourceRequest]]):
    """Sender step for rank q: one send matrix from the requests of every destination (ascending)."""
    n_local_cols = int(col_partition.counts()[rank])
    empty = np.zeros(0, np.int64)
    row_parts, col_parts, value_parts = [empty], [empty], [np.zeros(0)]
    send_ranks, b_counts, c_counts = [], [], []
    offset = 0
    for destination, request in requests:
        nb, nc = request.b_rows.size, request.c_row_count
        row_parts += [offset + np.arange(nb, dtype=np.int64), offset + nb + request.c_positions]
        col_parts += [request.b_rows, request.c_cols]
        value_parts += [np.ones(nb), request.c_values]
        send_ranks.append(destination)
        b_counts.append(nb)
        c_counts.append(nc)
        offset += nb + nc
    send_matrix = sp.csr_array(
        (np.concatenate(value_parts), (np.concatenate(row_parts), np.concatenate(col_parts))),
        shape=(offset, n_local_cols),
    )
    return (
        np.asarray(send_ranks, np.int64),
        np.asarray(b_counts, np.int64),
        np.asarray(c_counts, np.int64),
        send_matrix,
    )


def _assemble(rank, strategy, row_partition, col_partition, receiver: _ReceiverSide, sender) -> RankPlan:
    send_ranks, send_b, send_c, send_matrix = sender
    return RankPlan(
        rank=rank,
        strategy=strategy,
        row_partition=row_partition,
        col_partition=col_partition,
        diagonal=receiver.diagonal,
        send_ranks=send_ranks,
        send_b_counts=send_b,
        send_c_counts=send_c,
        send_matrix=send_matrix,
        recv_ranks=receiver.recv_ranks,
        recv_b_counts=receiver.recv_b_counts,
        recv_c_counts=receiver.recv_c_counts,
        receive_matrix=receiver.receive_matrix,
    )


def _check_executable(strategy: Strategy) -> Strategy:
    strategy = Strategy(strategy)
    if not strategy.executable:
        raise InputError(
            "strategy 'rowwise' is accounting only and has no plan; use sparsewire.plan.stats.rowwise_stats for its volumes"
        )
    return strategy


def build_plan(
    matrix: sp.sparray, row_partition: RowPartition, col_partition: RowPartition, strategy: Strategy | str
) -> CommPlan:
    """Plan every rank at once from the global matrix. Not collective; needs no MPI.

    Runs the receiver step of every rank p on ``matrix[rows of p]``, hands each request to its
    source, then runs every sender step: the same functions :func:`build_rank_plan_collective`
    runs on each rank, so ``build_plan(...).ranks[p]`` equals rank p's collective plan.
    """
    strategy = _check_executable(strategy)
    csr = sp.csr_array(matrix)
    if row_partition.n != csr.shape[0] or col_partition.n != csr.shape[1]:
        raise PlanMismatchError(
            f"partitions cover {row_partition.n} rows and {col_partition.n} columns but the matrix is "
            f"{csr.shape[0]} x {csr.shape[1]}; build them with partition_matrix on this matrix"
        )
    if row_partition.n_parts != col_partition.n_parts:
        raise PlanMismatchError(
            f"row partition has {row_partition.n_parts} parts but column partition {col_partition.n_parts}; use one rank count"
        )
    n_ranks = row_partition.n_parts
    receivers, inbox = [], [[] for _ in range(n_ranks)]
    for rank in range(n_ranks):
        start, stop = row_partition.range(rank)
        blocks = split_local_rows(rank, csr[start:stop], col_partition)
        receiver, requests = _plan_receiver(blocks, strategy, col_partition)
        receivers.append(receiver)
        for source, request in requests.items():
            inbox[source].append((rank, request))
    ranks = tuple(
        _assemble(rank, strategy, row_partition, col_partition, receivers[rank], _plan_sender(rank, col_partition, inbox[rank]))
        for rank in range(n_ranks)
    )
    return CommPlan(strategy, row_partition, col_partition, ranks)


def build_rank_plan_collective(
    comm, local_rows: sp.sparray, row_partition: RowPartition, col_partition: RowPartition, strategy: Strategy | str
) -> RankPlan:
    """Collective. Each rank plans from its own rows only; one all-to-all delivers the requests
    (which B rows to send, and the row-based A entries) to the sources.

    Args:
        comm: an mpi4py communicator whose size equals the partitions' number of parts.
        local_rows: this rank's rows of A, shape (rows owned, global columns), global column indices.
    """
    strategy = _check_executable(strategy)
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
    blocks = split_local_rows(rank, local_rows, col_partition)
    receiver, requests = _plan_receiver(blocks, strategy, col_partition)
    incoming = comm.alltoall([requests.get(destination) for destination in range(size)])
    inbox = [(source, request) for source, request in enumerate(incoming) if request is not None]
    return _assemble(rank, strategy, row_partition, col_partition, receiver, _plan_sender(rank, col_partition, inbox))
