"""1D sparsity-aware SpGEMM: the SpMM plans with sparse rows in place of dense ones.

Rank p owns rows R_p of A and C and rows C_p of B (B's rows follow A's column partition). The plan is
the SpMM :class:`~sparsewire.plan.RankPlan` of A's pattern for a flat strategy (``column``, ``row``
or ``joint``; CoLa sec. 3 / SHIRO sec. 3.2), built once and reused for every B:

* a ``DIRECT_B`` row of the plan is a B row the owner sends as it is (column-based: the receiver
  fetches only the rows its nonzero columns need);
* a ``DIRECT_C`` row is a partial C row the owner of the B rows computes from A entries it was given
  at setup (row-based), which the receiver merges with the semiring's addition.

So one multiply is, with (+.x) the semiring, (any.second) a row copy and (+.second) a row merge:

    send    = Select (any.second) B_p  (+)  Terms (+.x) B_p          (rows grouped by destination)
    C_p     = A(p, p) (+.x) B_p
    C_p   (+)= A_received (+.x) R  (+)  Place (+.second) R            (R: the received rows)

A stays on the left of every product, so non-commutative semirings are exact. The rows travel in
the hypersparse format of :mod:`sparsewire.spgemm.local`: empty rows cost nothing but the header,
which is what makes a sparse BFS frontier cheap. The exchange is one ``Neighbor_alltoall`` of the
sizes and two ``Ineighbor_alltoallv`` (indices, values) on the plan's neighbour graph, overlapped
with the diagonal product.
"""

from __future__ import annotations

import graphblas as gb
import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.errors import PlanMismatchError
from sparsewire.plan.plan import DIRECT_B, DIRECT_C, RankPlan
from sparsewire.spgemm.local import HEADER_BYTES, index_dtype, pack_row_ranges, to_graphblas, unpack
from sparsewire.spgemm.semirings import Semiring

__all__ = ["OneDimMultiplier"]

_INT_TYPES = {np.dtype(np.int32): MPI.INT32_T, np.dtype(np.int64): MPI.INT64_T}


def _rows_only(matrix: sp.csr_array, keep: np.ndarray, ones: bool = False) -> sp.csr_array:
    """``matrix`` with every row not in ``keep`` (a boolean mask) emptied; values 1 if ``ones``."""
    coo = sp.coo_array(matrix)
    chosen = keep[coo.row]
    values = np.ones(int(chosen.sum())) if ones else coo.data[chosen]
    return sp.csr_array((values, (coo.row[chosen], coo.col[chosen])), shape=matrix.shape)


def _columns_only(matrix: sp.csr_array, keep: np.ndarray) -> sp.csr_array:
    """``matrix`` with every column not in ``keep`` (a boolean mask) emptied."""
    coo = sp.coo_array(matrix)
    chosen = keep[coo.col]
    return sp.csr_array((coo.data[chosen], (coo.row[chosen], coo.col[chosen])), shape=matrix.shape)


class OneDimMultiplier:
    """Collective. One rank's side of 1D sparsity-aware SpGEMM for a flat SpMM plan.

    Build once per plan on every rank; :meth:`multiply` then computes this rank's rows of
    ``C = A (+.x) B`` from its rows of B. Counts the bytes it hands to MPI and the most stored
    entries it held at once.
    """

    def __init__(self, comm: MPI.Comm, plan: RankPlan, semiring: Semiring) -> None:
        if plan.strategy.hierarchical or len(plan.exchanges) != 1:
            raise PlanMismatchError(
                f"1D SpGEMM runs flat single-exchange plans (column, row, joint); got {plan.strategy} with "
                f"{len(plan.exchanges)} exchanges"
            )
        if comm.Get_size() != plan.n_ranks or comm.Get_rank() != plan.rank:
            raise PlanMismatchError(
                f"plan for rank {plan.rank} of {plan.n_ranks} used on rank {comm.Get_rank()} of {comm.Get_size()}"
            )
        self.comm, self.plan, self.semiring = comm, plan, semiring
        exchange = plan.exchanges[0]
        dtype = semiring.dtype
        n_b = plan.local_shape[1]
        send = sp.csr_array(exchange.send_matrix[:, :n_b])
        copy_rows = exchange.send_kinds == DIRECT_B
        product_rows = exchange.send_kinds == DIRECT_C
        self.select = to_graphblas(_rows_only(send, copy_rows, ones=True), dtype)
        self.terms = to_graphblas(_rows_only(send, product_rows), dtype) if product_rows.any() else None
        receive = sp.csr_array(exchange.receive_matrix)
        self.received_terms = to_graphblas(_columns_only(receive, exchange.receive_kinds == DIRECT_B), dtype)
        merged = exchange.receive_kinds == DIRECT_C
        self.place = to_graphblas(_columns_only(receive, merged), dtype) if merged.any() else None
        self.diagonal = to_graphblas(plan.diagonal, dtype)
        self.send_ranks, self.recv_ranks = exchange.send_ranks, exchange.recv_ranks
        self.send_bounds = np.concatenate([[0], np.cumsum(exchange.send_counts)]).astype(np.int64)
        self.recv_offsets = np.concatenate([[0], np.cumsum(exchange.recv_counts)]).astype(np.int64)
        self.n_received = int(self.recv_offsets[-1])
        self.graph = comm.Create_dist_graph_adjacent(
            self.recv_ranks.tolist(), self.send_ranks.tolist(), reorder=False
        )
        self.bytes_sent = 0
        self.peak_held_entries = 0

    def free(self) -> None:
        """Release the neighbour-graph communicator."""
        self.graph.Free()

    def send_buffer(self, b_local: gb.Matrix) -> gb.Matrix:
        """The rows this rank sends, grouped by destination: copied B rows and partial C rows."""
        semiring = self.semiring
        buffer = self.select.mxm(b_local, semiring.copy).new()
        if self.terms is not None:
            buffer(accum=semiring.accumulate) << self.terms.mxm(b_local, semiring.operator)
        return buffer

    def predicted_bytes(self, b_local: gb.Matrix) -> int:
        """Bytes :meth:`multiply` would send for this B (header, indices and values per message)."""
        buffer = self.send_buffer(b_local)
        _, _, listed, entries = pack_row_ranges(buffer, self.send_bounds)
        index_bytes = index_dtype(buffer.nrows, buffer.ncols).itemsize
        value_bytes = np.dtype(self.semiring.dtype).itemsize
        return int(
            HEADER_BYTES * listed.size + index_bytes * (2 * listed.sum() + entries.sum()) + value_bytes * entries.sum()
        )

    def multiply(self, b_local: gb.Matrix, mask: gb.Matrix | None = None, held_elsewhere: int = 0) -> gb.Matrix:
        """Collective. This rank's rows of ``C = A (+.x) B`` (kept only where ``mask`` has an entry,
        if given). ``held_elsewhere``: entries of earlier phases' results, added to the peak count."""
        semiring = self.semiring
        dtype = np.dtype(semiring.dtype)
        buffer = self.send_buffer(b_local)
        ints, values, listed, entries = pack_row_ranges(buffer, self.send_bounds)
        itype = index_dtype(buffer.nrows, buffer.ncols)
        sizes_out = np.stack([listed, entries], axis=1).astype(np.int64).ravel()
        sizes_in = np.zeros(2 * self.recv_ranks.size, np.int64)
        self.graph.Neighbor_alltoall(sizes_out, sizes_in)
        listed_in, entries_in = sizes_in[0::2], sizes_in[1::2]
        int_counts_in = 2 * listed_in + entries_in
        send_ints = np.concatenate(ints) if ints else np.zeros(0, itype)
        send_values = np.concatenate(values).astype(dtype) if values else np.zeros(0, dtype)
        recv_ints = np.empty(int(int_counts_in.sum()), itype)
        recv_values = np.empty(int(entries_in.sum()), dtype)
        int_counts_out = np.array([part.size for part in ints], np.int64)
        value_bytes_out = entries.astype(np.int64) * dtype.itemsize
        value_bytes_in = entries_in * dtype.itemsize
        int_type = _INT_TYPES[np.dtype(itype)]
        requests = [
            self.graph.Ineighbor_alltoallv(
                [send_ints, (int_counts_out, _starts(int_counts_out)), int_type],
                [recv_ints, (int_counts_in, _starts(int_counts_in)), int_type],
            ),
            self.graph.Ineighbor_alltoallv(
                [send_values.view(np.uint8), (value_bytes_out, _starts(value_bytes_out)), MPI.BYTE],
                [recv_values.view(np.uint8), (value_bytes_in, _starts(value_bytes_in)), MPI.BYTE],
            ),
        ]
        self.bytes_sent += int(HEADER_BYTES * listed.size + send_ints.nbytes + send_values.nbytes)
        # The diagonal block needs no message: compute it while the rows travel.
        if mask is None:
            result = self.diagonal.mxm(b_local, semiring.operator).new()
        else:
            result = self.diagonal.mxm(b_local, semiring.operator).new(mask=mask.S)
        MPI.Request.Waitall(requests)
        int_starts, value_starts = _starts(int_counts_in), _starts(entries_in)
        pieces = [
            (
                recv_ints[int_starts[s] : int_starts[s] + int_counts_in[s]],
                recv_values[value_starts[s] : value_starts[s] + entries_in[s]],
                int(listed_in[s]),
            )
            for s in range(self.recv_ranks.size)
        ]
        received = unpack(pieces, self.recv_offsets[:-1], self.n_received, b_local.ncols, dtype)
        held = b_local.nvals + buffer.nvals + received.nvals + result.nvals + held_elsewhere
        mask_arg = {} if mask is None else {"mask": mask.S}
        result(accum=semiring.accumulate, **mask_arg) << self.received_terms.mxm(received, semiring.operator)
        if self.place is not None:
            result(accum=semiring.accumulate, **mask_arg) << self.place.mxm(received, semiring.merge)
        self.peak_held_entries = max(self.peak_held_entries, held + result.nvals)
        return result


def _starts(counts: np.ndarray) -> np.ndarray:
    return (np.cumsum(counts) - counts).astype(np.int64)

