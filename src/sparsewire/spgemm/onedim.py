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
    C_p     = [A(p, p) | A_received] (+.x) [B_p ; R]                (R: the received rows)
    C_p   (+)= Place (+.second) R                                   (pushed partial C rows)

A stays on the left of every product, so non-commutative semirings are exact. The rows travel in
the hypersparse format of :mod:`sparsewire.spgemm.local`: empty rows cost nothing but the header,
which is what makes a sparse BFS frontier cheap. Each message goes point to point (header, then
indices and values: :mod:`sparsewire.spgemm.transfer`), and the bytes are counted from the receive
statuses. With ``overlap`` the diagonal product ``A(p, p) (+.x) B_p`` runs while the rows travel
and ``A_received (+.x) R`` is merged into it afterwards (measured slower here: the merge is a pass
over C).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.comm.lifetime import admit, free_communicators, release_now, track
from sparsewire.comm.runtime import agree_on_error
from sparsewire.errors import PlanMismatchError
from sparsewire.plan.plan import DIRECT_B, DIRECT_C, RankPlan
from sparsewire.profile.tracing import region
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import discard, import_messages, index_dtype, pack_row_ranges, row_counts, to_graphblas, wire_bytes
from sparsewire.spgemm.product import local_multiply, multiply_into
from sparsewire.spgemm.semirings import Semiring
from sparsewire.spgemm.traced import TracedTransfer
from sparsewire.spgemm.transfer import UNCODED, MessageCoding, SparseTransfer

__all__ = ["OneDimMultiplier"]


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
    ``C = A (+.x) B`` from its rows of B. Counts the bytes MPI delivered to it and the most stored
    entries it held at once.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        plan: RankPlan,
        semiring: Semiring,
        *,
        overlap: bool = False,
        coding: MessageCoding = UNCODED,
    ) -> None:
        """``coding``: what the messages code (:class:`~sparsewire.spgemm.transfer.MessageCoding`: the integers,
        :mod:`~sparsewire.spgemm.index_coding`, and bf16 values).
        ``overlap``: multiply the diagonal block while the rows travel and merge the received
        rows' product into it afterwards; otherwise (the default, measured faster: the merge is a
        pass over C, see docs/spgemm.md) one product ``[A(p, p) | A_received] (+.x) [B_p; R]``
        once the rows are in."""
        if plan.strategy.hierarchical or len(plan.exchanges) != 1:
            raise PlanMismatchError(
                f"1D SpGEMM runs flat single-exchange plans (column, row, joint); got {plan.strategy} with "
                f"{len(plan.exchanges)} exchanges"
            )
        if comm.Get_size() != plan.n_ranks or comm.Get_rank() != plan.rank:
            raise PlanMismatchError(
                f"plan for rank {plan.rank} of {plan.n_ranks} used on rank {comm.Get_rank()} of {comm.Get_size()}"
            )
        self.plan, self.semiring = plan, semiring
        exchange = plan.exchanges[0]
        dtype = semiring.dtype
        n_b = plan.local_shape[1]
        send = sp.csr_array(exchange.send_matrix[:, :n_b])
        send.sort_indices()
        copy_rows = exchange.send_kinds == DIRECT_B
        product_rows = exchange.send_kinds == DIRECT_C
        self.select = to_graphblas(_rows_only(send, copy_rows, ones=True), dtype)
        # The B row each copied row is (one entry per such row), for predictions from counts.
        self.copy_rows = np.flatnonzero(copy_rows)
        self.copy_sources = send.indices[send.indptr[self.copy_rows]].astype(np.int64)
        self.product_rows = np.flatnonzero(product_rows)
        terms = _rows_only(send, product_rows)
        self.terms = to_graphblas(terms, dtype) if product_rows.any() else None
        self.terms_csr = sp.csr_array(terms[self.product_rows]) if product_rows.any() else None
        receive = sp.csr_array(exchange.receive_matrix)
        received_terms = _columns_only(receive, exchange.receive_kinds == DIRECT_B)
        merged = exchange.receive_kinds == DIRECT_C
        self.place = to_graphblas(_columns_only(receive, merged), dtype) if merged.any() else None
        self.overlap = overlap
        if overlap:
            self.diagonal = to_graphblas(plan.diagonal, dtype)
            self.received_terms = to_graphblas(received_terms, dtype)
        else:
            self.combined = to_graphblas(sp.hstack([sp.csr_array(plan.diagonal), received_terms], format="csr"), dtype)
        self.send_ranks, self.recv_ranks = exchange.send_ranks, exchange.recv_ranks
        self.send_bounds = np.concatenate([[0], np.cumsum(exchange.send_counts)]).astype(np.int64)
        self.recv_offsets = np.concatenate([[0], np.cumsum(exchange.recv_counts)]).astype(np.int64)
        self.n_received = int(self.recv_offsets[-1])
        # Row positions in a message stay below the longest send or receive buffer of any rank.
        self.row_bound = comm.allreduce(max(int(self.send_bounds[-1]), self.n_received, 1), op=MPI.MAX)
        agree_on_error(comm, admit())  # what dropped plans held is freed; too many open is refused
        self.comm = comm.Dup()  # its own tag space
        self._finalizer = track(self, lambda held=self.comm: free_communicators(held))  # freed on collection too
        self.coding = coding
        self.bytes_received = self.payload_bytes_received = 0
        self.index_bytes_received = self.index_payload_bytes_received = 0
        self.peak_held_entries = 0
        self.tracer = None  # a Tracer while traced (sparsewire.trace)

    def free(self) -> None:
        """Collective (frees its communicator). Release the duplicated communicator (once)."""
        release_now(self, self._finalizer)

    def send_buffer(self, b_local: gb.Matrix) -> gb.Matrix:
        """Not collective. The rows this rank sends, grouped by destination: copied B rows and partial C rows."""
        semiring = self.semiring
        buffer = self.select.mxm(b_local, semiring.copy).new()
        if self.terms is not None:
            multiply_into(buffer, self.terms, b_local, semiring.operator, semiring.accumulate)
        return buffer

    def _copied_entries(self, counts: np.ndarray) -> np.ndarray:
        """Entries of every send-buffer row, set for the copied B rows (``counts``: B's row degrees)."""
        entries = np.zeros(int(self.send_bounds[-1]), np.int64)
        entries[self.copy_rows] = counts[self.copy_sources]
        return entries

    def _bytes(self, entries: np.ndarray, ncols: int) -> int:
        """Wire bytes of the messages whose send-buffer rows hold ``entries`` (a row is listed when
        it holds any)."""
        listed_per = _range_sums((entries > 0).astype(np.int64), self.send_bounds)
        entries_per = _range_sums(entries, self.send_bounds)
        index_bytes = index_dtype(self.row_bound, ncols).itemsize
        value_bytes = np.dtype(self.semiring.dtype).itemsize
        return int(sum(wire_bytes(int(listed), int(e), index_bytes, value_bytes) for listed, e in zip(listed_per, entries_per)))

    def predicted_bytes(self, b_local: gb.Matrix) -> int:
        """Not collective. Bytes :meth:`multiply` puts on the wire for this B, exactly, from counts: a copied row
        has its B row's entries; a partial C row has the entries of the pattern of its terms times
        B (a pattern-only product of those rows, made only for strategies that push partial rows)."""
        entries = self._copied_entries(row_counts(b_local))
        if self.terms is not None:
            pattern = self.terms.mxm(b_local, gb.semiring.any_pair[gb.dtypes.BOOL]).new(dtype=gb.dtypes.BOOL)
            entries[self.product_rows] = row_counts(pattern)[self.product_rows]
        return self._bytes(entries, b_local.ncols)

    def bytes_lower_bound(self, b_local: gb.Matrix) -> int:
        """Not collective. At most :meth:`predicted_bytes`, from counts only (no product): a partial C row has at
        least the entries of its longest term's B row."""
        counts = row_counts(b_local)
        entries = self._copied_entries(counts)
        if self.terms_csr is not None and self.terms_csr.nnz:
            longest = np.zeros(self.product_rows.size, np.int64)
            nonempty = np.flatnonzero(np.diff(self.terms_csr.indptr))
            longest[nonempty] = np.maximum.reduceat(counts[self.terms_csr.indices], self.terms_csr.indptr[nonempty])
            entries[self.product_rows] = longest
        return self._bytes(entries, b_local.ncols)

    def multiply(self, b_local: gb.Matrix, mask: gb.Matrix | None = None, held_elsewhere: int = 0) -> gb.Matrix:
        """Collective. This rank's rows of ``C = A (+.x) B`` (kept only where ``mask`` has an entry,
        if given). ``held_elsewhere``: entries of earlier phases' results, added to the peak count.

        Order: the receives' headers are posted; the send buffer is made and handed to MPI (one
        message per destination, point to point, header first); the incoming headers are awaited
        and the payload receives posted into one contiguous value array. With ``overlap`` the
        diagonal block is multiplied while the rows travel and the received rows' product merged
        in after; otherwise one product over B's rows stacked on the received rows. The received
        rows become one hypersparse matrix without further copies."""
        semiring = self.semiring
        dtype = np.dtype(semiring.dtype)
        itype = index_dtype(self.row_bound, b_local.ncols)
        transfer, tracer = SparseTransfer(itype, dtype, self.coding, self.comm), self.tracer
        if tracer is not None:
            transfer = TracedTransfer(transfer, tracer)
        incoming = [transfer.post_header(self.comm, int(source), 0) for source in self.recv_ranks]
        with region(tracer, "pack"):
            buffer = self.send_buffer(b_local)
            sent_entries = buffer.nvals
            messages = pack_row_ranges(buffer, self.send_bounds, itype, consume=True)
        for destination, message in zip(self.send_ranks, messages):
            transfer.send(self.comm, int(destination), 0, message)
        sizes = [transfer.wait_header(message) for message in incoming]
        value_starts = np.concatenate([[0], np.cumsum([entries for _, entries in sizes])]).astype(np.int64)
        values = np.empty(int(value_starts[-1]), dtype)
        for s, message in enumerate(incoming):
            transfer.post_payload(message, values[value_starts[s] : value_starts[s + 1]])
        mask_structure = None if mask is None else mask.S
        if self.overlap:  # the diagonal block needs no message: compute it while the rows travel
            with region(tracer, "local product"):
                result = local_multiply(self.diagonal, b_local, semiring.operator, mask_structure)
        pieces = [transfer.wait(message) for message in incoming]
        with region(tracer, "unpack"):
            received = import_messages(pieces, self.recv_offsets[:-1], self.n_received, b_local.ncols, dtype, values=values)
        transfer.finish_sends()
        self.bytes_received += transfer.bytes_received
        self.payload_bytes_received += transfer.payload_bytes_received
        self.index_bytes_received += transfer.index_bytes_received
        self.index_payload_bytes_received += transfer.index_payload_bytes_received
        held = b_local.nvals + sent_entries + received.nvals + held_elsewhere
        with region(tracer, "local product"):
            if not self.overlap:
                stacked = b_local if self.n_received == 0 else gb.ss.concat([[b_local], [received]])
                result = local_multiply(self.combined, stacked, semiring.operator, mask_structure)
            elif received.nvals:  # (an empty accumulation still costs GraphBLAS a pass over C)
                multiply_into(result, self.received_terms, received, semiring.operator, semiring.accumulate, mask_structure)
            if self.place is not None and received.nvals:
                result(accum=semiring.accumulate, **({} if mask is None else {"mask": mask_structure})) << self.place.mxm(
                    received, semiring.merge
                )
        self.peak_held_entries = max(self.peak_held_entries, held + result.nvals)
        discard(received, None if self.overlap else stacked, keep=(b_local,))
        return result


def _range_sums(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sums of ``values[bounds[d]:bounds[d+1]]`` (empty ranges give 0)."""
    cumulative = np.concatenate([[0], np.cumsum(values)])
    return cumulative[bounds[1:]] - cumulative[bounds[:-1]]
