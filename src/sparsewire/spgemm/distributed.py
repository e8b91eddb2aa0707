"""Distributed ``C = A (+.x) B``: distribution of the operands, the algorithm, phases, gathering.

:class:`DistributedSpgemm` is built collectively from A on rank 0 for one algorithm:

* ``summa``: 2D blocks on a pr x pc grid (:mod:`sparsewire.spgemm.summa`);
* ``1d``: rows (:mod:`sparsewire.spgemm.onedim`) with a flat SpMM plan (``column``, ``row`` or
  ``joint``).

:func:`keep_fewest_bytes` builds the candidates (:func:`candidate_names`) and keeps the one that
would move the fewest bytes for the given B (ties go to the earlier candidate in ``summa, 1d/column, 1d/joint, 1d/row``). The
bytes come from counts, not trial products: SUMMA's and the column strategy's exactly from the
blocks' row degrees; for the strategies that push partial C rows a lower bound from counts first,
and the exact figure (a pattern-only product of the pushed rows) only when that bound could win.
"""

from __future__ import annotations

import resource

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire._lib.heap import keep_freed_heap
from sparsewire.comm.runtime import limit_threads_per_rank, node_ids
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition, even_rows
from sparsewire.plan.plan import build_rank_plan_collective
from sparsewire.plan.strategies import Strategy
from sparsewire.profile.tracing import region
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import discard, to_graphblas, to_scipy
from sparsewire.spgemm.onedim import OneDimMultiplier
from sparsewire.spgemm.semirings import Semiring
from sparsewire.spgemm.summa import BlockLayout, ProcessGrid, SummaMultiplier, choose_grid
from sparsewire.spgemm.transfer import UNCODED, MessageCoding

__all__ = [
    "ALGORITHMS",
    "ONE_DIM_STRATEGIES",
    "DistributedSpgemm",
    "candidate_names",
    "keep_fewest_bytes",
    "choose_algorithm",
    "rows_to_blocks",
    "blocks_to_rows",
    "peak_rss_bytes",
]

ALGORITHMS = ("summa", "1d", "auto")
ONE_DIM_STRATEGIES = (Strategy.COLUMN, Strategy.JOINT, Strategy.ROW)


def peak_rss_bytes(comm: MPI.Comm) -> int:
    """Collective. The largest peak resident set size of any rank, in bytes (Linux ru_maxrss is KiB)."""
    return int(comm.allreduce(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, op=MPI.MAX))


class DistributedSpgemm:
    """Collective. ``C = A (+.x) B`` distributed over ``comm`` with one algorithm.

    Building one caps this rank's GraphBLAS and BLAS threads at cores / ranks on the node
    (:func:`~sparsewire.comm.runtime.limit_threads_per_rank`), and has the process's C heap keep freed blocks,
    large ones too (:func:`~sparsewire._lib.heap.keep_freed_heap`): each multiply allocates C's arrays about as
    large as the last one's, which glibc would otherwise unmap when freed (blocks above 32 MiB) and fault in again,
    page by page (docs/spgemm.md, "Memory between multiplies").

    Rank 0 passes the global A (other ranks None). ``b_shape`` is B's (rows, columns); B itself
    comes later, per multiply, in this object's B layout (:meth:`scatter_b` hands it out from
    rank 0, or callers build their local B directly, as BFS does with its frontier).
    """

    def __init__(
        self,
        comm: MPI.Comm,
        a_global: sp.csr_array | None,
        b_shape: tuple[int, int],
        semiring: Semiring,
        algorithm: str,
        *,
        strategy: Strategy = Strategy.COLUMN,
        grid: ProcessGrid | None = None,
        a_local: sp.csr_array | None = None,
        a_shape: tuple[int, int] | None = None,
        partitions: tuple[RowPartition, RowPartition] | None = None,
        overlap: bool = False,
        stages_per_product: int = 2,
        coding: MessageCoding = UNCODED,
    ) -> None:
        """Rank 0 passes the global A (others None), or every rank passes its own block
        ``a_local`` of the A layout (:meth:`a_block`) and ``a_shape``: a C computed earlier is
        already in that layout when A and B are square (C rows = A rows, C columns = B columns).
        ``partitions``: the 1D algorithm's (row, column) partitions of A (default: even).
        ``overlap``: 1D only, multiply the diagonal block while the rows travel and merge after
        (:class:`~sparsewire.spgemm.onedim.OneDimMultiplier`; off by default, measured slower).
        ``stages_per_product``: SUMMA only, stages multiplied together
        (:class:`~sparsewire.spgemm.summa.SummaMultiplier`). ``coding``: what the messages code
        (:class:`~sparsewire.spgemm.transfer.MessageCoding`: the integers, losslessly, and bf16 values)."""
        self.comm, self.semiring, self.algorithm = comm, semiring, algorithm
        limit_threads_per_rank(comm)  # GraphBLAS would otherwise run (cores) threads in every rank
        keep_freed_heap()
        size = comm.Get_size()
        if a_local is None:
            a_shape = comm.bcast(a_global.shape if comm.Get_rank() == 0 else None, root=0)
        if a_shape[1] != b_shape[0]:
            raise InputError(f"shapes do not match: A is {a_shape[0]} x {a_shape[1]}, B is {b_shape[0]} x {b_shape[1]}")
        self.a_shape, self.b_shape = tuple(a_shape), tuple(b_shape)
        self.strategy = strategy if algorithm == "1d" else None
        if algorithm == "summa":
            self.grid = grid or choose_grid(size)
            self.layout = BlockLayout.even(self.grid, self.a_shape, self.b_shape)
        elif algorithm == "1d":
            self.grid = ProcessGrid(size, 1)
            if partitions is None:
                partitions = (even_rows(a_shape[0], size), even_rows(a_shape[1], size))
            self.row_partition, self.col_partition = partitions
        else:
            raise InputError(f"unknown SpGEMM algorithm {algorithm!r}; choose summa or 1d")
        if a_local is None:
            a_local = self._scatter(a_global, self.a_block)
        if algorithm == "summa":
            self.multiplier = SummaMultiplier(
                comm,
                self.layout,
                to_graphblas(a_local, semiring.dtype),
                semiring,
                stages_per_product=stages_per_product,
                coding=coding,
            )
        else:
            plan = build_rank_plan_collective(comm, a_local, self.row_partition, self.col_partition, strategy)
            self.multiplier = OneDimMultiplier(comm, plan, semiring, overlap=overlap, coding=coding)

    def a_block(self, rank: int) -> tuple[slice, slice]:
        """Not collective. Global (rows, columns) of A held by ``rank``."""
        if self.algorithm == "summa":
            return self.layout.a_block(rank)
        return slice(*self.row_partition.range(rank)), slice(0, self.a_shape[1])

    @property
    def name(self) -> str:
        """``summa`` or ``1d/<strategy>``."""
        return "summa" if self.algorithm == "summa" else f"1d/{self.strategy.value}"

    def free(self) -> None:
        """Collective (frees the communicators the algorithm made). Release the communicators the algorithm made."""
        self.multiplier.free()

    def _scatter(self, matrix: sp.sparray | None, block_of) -> sp.csr_array:
        comm = self.comm
        pieces = None
        if comm.Get_rank() == 0:
            csr = sp.csr_array(matrix)
            pieces = []
            for p in range(comm.Get_size()):
                rows, cols = block_of(p)
                pieces.append(sp.csr_array(csr[rows][:, cols]))
        return comm.scatter(pieces, root=0)

    def b_block(self, rank: int) -> tuple[slice, slice]:
        """Not collective. Global (rows, columns) of B held by ``rank``."""
        if self.algorithm == "summa":
            return self.layout.b_block(rank)
        return slice(*self.col_partition.range(rank)), slice(0, self.b_shape[1])

    def c_block(self, rank: int) -> tuple[slice, slice]:
        """Not collective. Global (rows, columns) of C computed by ``rank``."""
        if self.algorithm == "summa":
            return self.layout.c_block(rank)
        return slice(*self.row_partition.range(rank)), slice(0, self.b_shape[1])

    def scatter_b(self, b_global: sp.sparray | None) -> gb.Matrix:
        """Collective. This rank's block of B (rank 0 passes the global B)."""
        return to_graphblas(self._scatter(b_global, self.b_block), self.semiring.dtype)

    def scatter_like_c(self, matrix: sp.sparray | None) -> gb.Matrix:
        """Collective. This rank's block of a matrix shaped like C (a mask), from rank 0."""
        return to_graphblas(self._scatter(matrix, self.c_block), np.bool_)

    def _phase_columns(self, b_local: gb.Matrix, phases: int) -> list[tuple[int, int]]:
        if not 1 <= phases <= max(self.b_shape[1], 1):
            # Each phase is a whole collective multiply: more phases than B has columns only adds empty rounds.
            raise InputError(f"--phases {phases}: give 1 to {max(self.b_shape[1], 1)} (B has {self.b_shape[1]} columns)")
        bounds = even_rows(b_local.ncols, phases).offsets
        return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))

    def multiply(self, b_local: gb.Matrix, *, phases: int = 1, mask: gb.Matrix | None = None) -> gb.Matrix:
        """Collective. This rank's block of C; with ``phases`` > 1, B's local columns are cut into
        that many pieces, multiplied one after another and joined (peak memory ~1/phases)."""
        if phases == 1:
            return self._multiply_one(b_local, mask, 0)
        pieces, held = [], 0
        for lo, hi in self._phase_columns(b_local, phases):
            piece_mask = None if mask is None else mask[:, lo:hi].new()
            b_piece = b_local[:, lo:hi].new()
            piece = self._multiply_one(b_piece, piece_mask, held)
            held += piece.nvals
            pieces.append(piece)
            discard(b_piece, piece_mask)
        joined = gb.ss.concat([pieces])
        discard(*pieces)
        return joined

    def _multiply_one(self, b_local: gb.Matrix, mask: gb.Matrix | None, held: int) -> gb.Matrix:
        """Collective. One multiply of the algorithm (a ``multiply`` span of the trace, when traced)."""
        tracer = self.multiplier.tracer
        if tracer is None:
            return self.multiplier.multiply(b_local, mask, held_elsewhere=held)
        tracer.begin_multiply()
        with region(tracer, "multiply"):
            return self.multiplier.multiply(b_local, mask, held_elsewhere=held)

    def start_tracing(self, tracer) -> None:
        """Collective (learns which ranks share a node). Record the following multiplies into ``tracer``
        (:func:`sparsewire.trace`; the transfers through :class:`~sparsewire.spgemm.traced.TracedTransfer`)."""
        if self.multiplier.tracer is not None:
            raise InputError("this SpGEMM plan is being traced already; end that trace block before starting another")
        self._nodes = node_ids(self.comm)
        self.multiplier.tracer = tracer

    def stop_tracing(self) -> None:
        """Not collective. Multiplies run untraced again."""
        self.multiplier.tracer = None

    def link_of(self, peer: int) -> str:
        """Not collective (after :meth:`start_tracing`). Whether ``peer`` shares this rank's node (shared memory) or not."""
        return "same node" if self._nodes[peer] == self._nodes[self.comm.Get_rank()] else "another node"

    def predicted_bytes(self, b_local: gb.Matrix, phases: int = 1, *, lower_bound: bool = False) -> int:
        """Collective. Bytes :meth:`multiply` will put on the wire for this B, summed over ranks
        (header, indices and values of every message, :func:`~sparsewire.spgemm.local.wire_bytes`),
        from counts. ``lower_bound``: a bound from counts alone, never above the exact figure (the
        same as it for SUMMA and the column strategy)."""
        total = 0
        for lo, hi in self._phase_columns(b_local, phases):
            piece = b_local if (lo, hi) == (0, b_local.ncols) else b_local[:, lo:hi].new()
            predict = self.multiplier.bytes_lower_bound if lower_bound else self.multiplier.predicted_bytes
            total += predict(piece)
        return int(self.comm.allreduce(total, op=MPI.SUM))

    @property
    def bytes_received(self) -> int:
        """Bytes MPI delivered to this rank so far (its receive statuses); summed over the ranks,
        the bytes moved."""
        return self.multiplier.bytes_received

    @property
    def payload_bytes_received(self) -> int:
        """The same messages' bytes uncoded (equal to :attr:`bytes_received` without coding): what the
        predictions count."""
        return self.multiplier.payload_bytes_received

    @property
    def index_bytes_received(self) -> tuple[int, int]:
        """The messages' integer arrays alone, so far: (bytes MPI counted on the wire, bytes decoded); equal without
        coding."""
        return self.multiplier.index_bytes_received, self.multiplier.index_payload_bytes_received

    @property
    def peak_held_entries(self) -> int:
        """The most stored entries this rank held at once (inputs, received blocks, products, C)."""
        return self.multiplier.peak_held_entries

    def gather_c(
        self, c_local: gb.Matrix, root: int = 0, row_order: np.ndarray | None = None, col_order: np.ndarray | None = None
    ) -> sp.csr_array | None:
        """Collective. The global C on ``root`` (None elsewhere); with ``row_order`` /
        ``col_order`` (position -> original index), rows and columns in the original order."""
        comm = self.comm
        rows, cols = self.c_block(comm.Get_rank())
        coo = sp.coo_array(to_scipy(c_local))
        parts = comm.gather((coo.row + rows.start, coo.col + cols.start, coo.data), root=root)
        if comm.Get_rank() != root:
            return None
        row = np.concatenate([p[0] for p in parts])
        col = np.concatenate([p[1] for p in parts])
        data = np.concatenate([p[2] for p in parts])
        if row_order is not None:
            row = np.asarray(row_order)[row]
        if col_order is not None:
            col = np.asarray(col_order)[col]
        shape = (self.a_shape[0], self.b_shape[1])
        result = sp.csr_array((data, (row, col)), shape=shape)  # blocks are disjoint: no duplicates
        result.sort_indices()
        return result


def candidate_names(algorithm: str, strategy: str = "auto") -> list[tuple[str, Strategy | None]]:
    """Not collective. The (algorithm, 1D strategy) candidates ``algorithm`` and ``strategy`` allow,
    in the order ties are broken: ``summa``, then the 1D strategies column, joint, row (``1d`` with
    strategy ``auto``: all three; another strategy: that one)."""
    if algorithm not in ALGORITHMS:
        raise InputError(f"unknown SpGEMM algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    candidates: list[tuple[str, Strategy | None]] = [("summa", None)] if algorithm in ("summa", "auto") else []
    if algorithm in ("1d", "auto"):
        if strategy == "auto":
            candidates.extend(("1d", s) for s in ONE_DIM_STRATEGIES)
        else:
            try:
                chosen = Strategy(strategy)
            except ValueError:
                chosen = None
            if chosen not in ONE_DIM_STRATEGIES:
                raise InputError(f"SpGEMM strategy {strategy!r}: 1D SpGEMM runs column, row, joint or auto")
            candidates.append(("1d", chosen))
    return candidates


def keep_fewest_bytes(builders, phases: int) -> tuple[DistributedSpgemm, gb.Matrix, dict[str, int], list[str]]:
    """Collective. Build each candidate in turn (``builders``: callables returning a
    :class:`DistributedSpgemm` and its local B), predict its bytes for this B from counts (see the
    module docstring) and keep the fewest, freeing the others; ties go to the earlier candidate.
    Returns (the chosen algorithm, its local B, predicted bytes per candidate, the candidates whose
    figure is only a lower bound because it already lost)."""
    best, best_b, predictions, bounded = None, None, {}, []
    for build in builders:
        built, b_local = build()
        predicted, exact = _predict(built, b_local, phases, None if best is None else predictions[best.name])
        predictions[built.name] = predicted
        if not exact:
            bounded.append(built.name)
        if best is None or predicted < predictions[best.name]:
            if best is not None:
                best.free()
            best, best_b = built, b_local
        else:
            built.free()
    return best, best_b, predictions, bounded


def choose_algorithm(
    comm: MPI.Comm,
    a_global: sp.csr_array | None,
    b_global: sp.csr_array | None,
    semiring: Semiring,
    algorithm: str,
    *,
    grid: ProcessGrid | None = None,
    partitions: tuple[RowPartition, RowPartition] | None = None,
) -> tuple[DistributedSpgemm, gb.Matrix, dict[str, int], list[str]]:
    """Collective. :func:`keep_fewest_bytes` over the candidates ``algorithm`` allows, built from A
    and B on rank 0 (the graph algorithms' entry; distributed operands go through
    :func:`sparsewire.distributed.spgemm.plan_spgemm`). ``partitions``: the 1D row and column partitions
    (default: even)."""
    b_shape = comm.bcast(b_global.shape if comm.Get_rank() == 0 else None, root=0)

    def builder(name: str, strategy: Strategy | None):
        def build():
            built = DistributedSpgemm(
                comm, a_global, b_shape, semiring, name, strategy=strategy or Strategy.COLUMN, grid=grid, partitions=partitions
            )
            return built, built.scatter_b(b_global)

        return build

    return keep_fewest_bytes([builder(name, strategy) for name, strategy in candidate_names(algorithm)], 1)


def _predict(candidate: DistributedSpgemm, b_local: gb.Matrix, phases: int, best: int | None) -> tuple[int, bool]:
    """Collective. (bytes, exact): the candidate's exact bytes, or its lower bound from counts when
    that already loses to ``best`` (then no pattern product is made)."""
    if best is not None and candidate.algorithm == "1d":
        bound = candidate.predicted_bytes(b_local, phases, lower_bound=True)
        if bound >= best:
            return bound, False
    return candidate.predicted_bytes(b_local, phases), True


def _redistribute(comm: MPI.Comm, entries: tuple[np.ndarray, np.ndarray, np.ndarray], owners: np.ndarray) -> tuple:
    """Collective. Send every (row, col, value) entry to the rank ``owners`` names; returns the
    entries this rank receives (global indices)."""
    size = comm.Get_size()
    order = np.argsort(owners, kind="stable")
    bounds = np.searchsorted(owners[order], np.arange(size + 1))
    outgoing = [tuple(part[order][bounds[d] : bounds[d + 1]] for part in entries) for d in range(size)]
    incoming = comm.alltoall(outgoing)
    return tuple(np.concatenate([piece[i] for piece in incoming]) for i in range(3))


def _block_owners(rows: np.ndarray, cols: np.ndarray, block_of, size: int) -> np.ndarray:
    owners = np.full(rows.size, -1, np.int64)
    for destination in range(size):
        row_slice, col_slice = block_of(destination)
        inside = (rows >= row_slice.start) & (rows < row_slice.stop) & (cols >= col_slice.start) & (cols < col_slice.stop)
        owners[inside] = destination
    return owners


def _entries(matrix: sp.sparray, row_offset: int = 0, col_offset: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    coo = sp.coo_array(matrix)
    return coo.row.astype(np.int64) + row_offset, coo.col.astype(np.int64) + col_offset, coo.data


def rows_to_blocks(comm: MPI.Comm, rows_held: sp.sparray, row_offset: int, block_of) -> sp.csr_array:
    """Collective. 1D rows -> 2D blocks: every rank passes the rows it holds (global columns, its
    first row ``row_offset``) and gets the block ``block_of(rank)`` (a (rows, columns) pair of
    slices, e.g. :meth:`DistributedSpgemm.a_block`) of the whole, with block-local indices."""
    entries = _entries(rows_held, row_offset)
    received = _redistribute(comm, entries, _block_owners(entries[0], entries[1], block_of, comm.Get_size()))
    row_slice, col_slice = block_of(comm.Get_rank())
    shape = (row_slice.stop - row_slice.start, col_slice.stop - col_slice.start)
    return sp.csr_array((received[2], (received[0] - row_slice.start, received[1] - col_slice.start)), shape=shape)


def blocks_to_rows(
    comm: MPI.Comm, block: sp.sparray, row_start: int, col_start: int, rows: RowPartition, n_cols: int
) -> sp.csr_array:
    """Collective. 2D blocks -> 1D rows, the inverse of :func:`rows_to_blocks`: every rank passes its
    block (first global row ``row_start``, first column ``col_start``) and gets its rows
    ``rows.range(rank)`` of the whole, with global column indices."""
    entries = _entries(block, row_start, col_start)
    received_rows, received_cols, values = _redistribute(comm, entries, rows.owner(entries[0]))
    start, stop = rows.range(comm.Get_rank())
    return sp.csr_array((values, (received_rows - start, received_cols)), shape=(stop - start, n_cols))
