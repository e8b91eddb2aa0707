"""Sparse SUMMA on a pr x pc process grid, for any number of ranks (semiring SpGEMM paper sec. 2.1).

Rank r sits at grid position (i, j) = (r // pc, r % pc). A (n x m) is cut into pr row blocks and
pc column blocks, B (m x q) into pr row blocks and pc column blocks, and C (n x q) into A's row
blocks and B's column blocks; rank (i, j) holds A(i, j), B(i, j) and computes C(i, j).

The inner dimension m is cut twice: into pc pieces by A's column blocks and into pr pieces by B's
row blocks. On a rectangular grid these differ, so the stages are their *common refinement*: the
sorted union of both sets of boundaries, at most pr + pc - 1 stages. In the stage over inner
columns [lo, hi), the grid column ja holding A's columns lo..hi sends A(i, lo:hi) along each
grid row i, the grid row ib holding B's rows lo..hi sends B(lo:hi, j) along each grid column
j, and every rank multiply-accumulates ``C(i, j) (+)= A(i, lo:hi) (+.x) B(lo:hi, j)``. A stays on
the left in every product, so non-commutative semirings are exact. CombBLAS needs pr == pc; here
any factorisation works (3 ranks: 3 x 1 or 1 x 3).

Phases (CombBLAS's ``phases``): B's local columns are cut into N pieces and SUMMA runs once per
piece, so the stage blocks of B, the stage products and the partial C being accumulated are about
1/N as large; A is sent N times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from sparsewire.comm.lifetime import admit, free_communicators, release_now, track
from sparsewire.comm.runtime import agree_on_error
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition, even_rows
from sparsewire.profile.tracing import region
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import discard, empty, import_messages, index_dtype, pack_row_ranges, row_counts, wire_bytes
from sparsewire.spgemm.product import local_multiply, multiply_into
from sparsewire.spgemm.semirings import Semiring
from sparsewire.spgemm.traced import TracedTransfer
from sparsewire.spgemm.transfer import UNCODED, MessageCoding, SparseTransfer

__all__ = ["ProcessGrid", "choose_grid", "parse_grid", "summa_stages", "SummaMultiplier", "BlockLayout"]


@dataclass(frozen=True)
class ProcessGrid:
    """A pr x pc grid of ranks, row-major: rank r is at (r // cols, r % cols)."""

    rows: int
    cols: int

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self.rows * self.cols

    def position(self, rank: int) -> tuple[int, int]:
        """Not collective. (grid row, grid column) of ``rank``."""
        return rank // self.cols, rank % self.cols

    def __str__(self) -> str:
        return f"{self.rows}x{self.cols}"


def choose_grid(ranks: int) -> ProcessGrid:
    """Not collective. The most nearly square grid with pr >= pc and pr * pc = ranks (4: 2x2, 3: 3x1, 6: 3x2)."""
    if ranks < 1:
        raise InputError(f"cannot make a process grid of {ranks} ranks")
    cols = max(d for d in range(1, int(np.sqrt(ranks)) + 1) if ranks % d == 0)
    return ProcessGrid(ranks // cols, cols)


def parse_grid(text: str | None, ranks: int) -> ProcessGrid:
    """Not collective. ``RxC`` (rows x columns) or None for :func:`choose_grid`; R * C must equal the ranks."""
    if text is None or text == "auto":
        return choose_grid(ranks)
    try:
        rows, cols = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise InputError(f"--grid {text!r}: write ROWSxCOLS, e.g. 2x2 or 3x1") from None
    if rows < 1 or cols < 1 or rows * cols != ranks:
        raise InputError(f"--grid {text}: {rows} x {cols} != {ranks} ranks; give a grid whose product is the number of ranks")
    return ProcessGrid(rows, cols)


@dataclass(frozen=True)
class BlockLayout:
    """The 2D blocks of A, B and C: row and column boundaries of each (global indices)."""

    grid: ProcessGrid
    a_rows: RowPartition
    a_cols: RowPartition
    b_rows: RowPartition
    b_cols: RowPartition

    @staticmethod
    def even(grid: ProcessGrid, a_shape: tuple[int, int], b_shape: tuple[int, int]) -> BlockLayout:
        """Not collective. Even blocks: A rows and B rows into pr parts, A columns and B columns into pc parts."""
        return BlockLayout(
            grid,
            even_rows(a_shape[0], grid.rows),
            even_rows(a_shape[1], grid.cols),
            even_rows(b_shape[0], grid.rows),
            even_rows(b_shape[1], grid.cols),
        )

    def a_block(self, rank: int) -> tuple[slice, slice]:
        """Not collective. Global (rows, columns) of A held by ``rank``."""
        i, j = self.grid.position(rank)
        return slice(*self.a_rows.range(i)), slice(*self.a_cols.range(j))

    def b_block(self, rank: int) -> tuple[slice, slice]:
        """Not collective. Global (rows, columns) of B held by ``rank``."""
        i, j = self.grid.position(rank)
        return slice(*self.b_rows.range(i)), slice(*self.b_cols.range(j))

    def c_block(self, rank: int) -> tuple[slice, slice]:
        """Not collective. Global (rows, columns) of C computed by ``rank``."""
        i, j = self.grid.position(rank)
        return slice(*self.a_rows.range(i)), slice(*self.b_cols.range(j))


def summa_stages(a_cols: RowPartition, b_rows: RowPartition) -> list[tuple[int, int, int, int]]:
    """Not collective. The stages of the common refinement of A's column blocks and B's row blocks:
    (lo, hi, grid column owning A(:, lo:hi), grid row owning B(lo:hi, :)), empty ranges dropped."""
    if a_cols.n != b_rows.n:
        raise InputError(f"inner dimensions differ: A has {a_cols.n} columns, B has {b_rows.n} rows")
    bounds = np.union1d(a_cols.offsets, b_rows.offsets)
    stages = []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if hi > lo:
            stages.append((lo, hi, int(a_cols.owner(lo)), int(b_rows.owner(lo))))
    return stages


class SummaMultiplier:
    """Collective. One rank's side of Sparse SUMMA for fixed blocks of A, over a semiring.

    Build once per (A, grid) on every rank; :meth:`multiply` then runs ``C(i, j) = A(i, :) (+.x)
    B(:, j)`` for this rank's block of B. The stage blocks go point to point along the grid rows
    (A) and grid columns (B), all sends started at once. Stages are multiplied in groups of
    ``stages_per_product``; the receives of group g + 1 are posted before group g multiplies
    (double buffering: at most two groups' received blocks are held). The A stage blocks this rank
    owns are packed once, here. Counts the bytes MPI delivered to this rank and the most stored
    entries it held at once.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        layout: BlockLayout,
        a_block: gb.Matrix,
        semiring: Semiring,
        *,
        stages_per_product: int = 2,
        coding: MessageCoding = UNCODED,
    ) -> None:
        """``coding``: what the blocks' messages code (:class:`~sparsewire.spgemm.transfer.MessageCoding`).
        ``stages_per_product``: stages multiplied together, as one product over their blocks
        joined side by side (A) and stacked (B); each product after the first is merged into C, a
        pass over C, so fewer products are faster (docs/spgemm.md) and hold more received blocks at once."""
        if stages_per_product < 1:
            raise InputError(f"stages_per_product must be at least 1 (got {stages_per_product})")
        self.stages_per_product = stages_per_product
        self.comm, self.layout, self.semiring = comm, layout, semiring
        grid = layout.grid
        if comm.Get_size() != grid.size:
            raise InputError(f"grid {grid} needs {grid.size} ranks, the communicator has {comm.Get_size()}")
        self.row, self.col = grid.position(comm.Get_rank())
        # Ranks of one grid row share A's stage blocks, ranks of one grid column B's.
        agree_on_error(comm, admit())  # what dropped plans held is freed; too many open is refused
        self.row_comm = comm.Split(color=self.row, key=self.col)
        self.col_comm = comm.Split(color=self.col, key=self.row)
        self._finalizer = track(self, lambda held=(self.row_comm, self.col_comm): free_communicators(*held))
        self.a_block = a_block
        self.stages = summa_stages(layout.a_cols, layout.b_rows)
        self.itype = index_dtype(
            max(int(layout.a_rows.counts().max()), int(layout.b_rows.counts().max())),
            max(int(layout.a_cols.counts().max()), int(layout.b_cols.counts().max())),
        )
        a_start = int(layout.a_cols.offsets[self.col])
        owned = [s for s, stage in enumerate(self.stages) if stage[2] == self.col]
        # This rank's A stage blocks (GraphBLAS views for its own products, messages for its peers)
        # and their sizes from counts (the prediction does not look at the messages).
        self.a_pieces = {s: column_slice(a_block, self.stages[s][0] - a_start, self.stages[s][1] - a_start) for s in owned}
        self.a_messages = (
            {}
            if grid.cols == 1
            else {
                s: pack_row_ranges(piece, np.array([0, piece.nrows], np.int64), self.itype)[0]
                for s, piece in self.a_pieces.items()
            }
        )
        self.a_sizes = {s: (int((row_counts(p) > 0).sum()), int(p.nvals)) for s, p in self.a_pieces.items()}
        self.coding = coding
        self.bytes_received = self.payload_bytes_received = 0
        self.index_bytes_received = self.index_payload_bytes_received = 0
        self.peak_held_entries = 0
        self.tracer = None  # a Tracer while traced (sparsewire.trace)

    def free(self) -> None:
        """Collective (frees its row and column communicators). Release the grid row and column communicators (once)."""
        release_now(self, self._finalizer)

    def _b_stage_rows(self) -> list[tuple[int, int, int]]:
        """(stage, first, last local row of B) of the stages whose B block this rank owns."""
        start = int(self.layout.b_rows.offsets[self.row])
        return [(s, lo - start, hi - start) for s, (lo, hi, _, b_owner) in enumerate(self.stages) if b_owner == self.row]

    def predicted_bytes(self, b_block: gb.Matrix) -> int:
        """Not collective. Bytes this rank's stage blocks put on the wire in :meth:`multiply` (each to pc - 1 or
        pr - 1 receivers), from counts only: the A blocks' sizes found at setup, B's row degrees."""
        grid, value_bytes, index_bytes = self.layout.grid, np.dtype(self.semiring.dtype).itemsize, self.itype.itemsize
        total = sum(
            (grid.cols - 1) * wire_bytes(listed, entries, index_bytes, value_bytes) for listed, entries in self.a_sizes.values()
        )
        counts = row_counts(b_block)
        for _, first, last in self._b_stage_rows():
            piece = counts[first:last]
            total += (grid.rows - 1) * wire_bytes(int((piece > 0).sum()), int(piece.sum()), index_bytes, value_bytes)
        return int(total)

    def bytes_lower_bound(self, b_block: gb.Matrix) -> int:
        """Not collective. :meth:`predicted_bytes` (already exact from counts)."""
        return self.predicted_bytes(b_block)

    def multiply(self, b_block: gb.Matrix, mask: gb.Matrix | None = None, held_elsewhere: int = 0) -> gb.Matrix:
        """Collective over the grid. This rank's block C(i, j) (masked by ``mask`` if given: only
        entries where the mask has a stored entry are kept). ``held_elsewhere``: entries of earlier
        phases' results still held, added to the peak count."""
        layout, semiring, grid = self.layout, self.semiring, self.layout.grid
        n_rows = int(layout.a_rows.counts()[self.row])
        n_cols = b_block.ncols
        transfer, tracer = SparseTransfer(self.itype, semiring.dtype, self.coding, self.comm), self.tracer
        if tracer is not None:
            transfer = TracedTransfer(transfer, tracer)
        # Start every send at once: A blocks along the grid row, B blocks along the grid column.
        for s, message in self.a_messages.items():
            for peer in range(grid.cols):
                if peer != self.col:
                    transfer.send(self.row_comm, peer, s, message)
        b_stages = self._b_stage_rows()
        b_pieces = {}
        if b_stages:
            # The stages a grid row owns cover its B rows contiguously: one unpack of B packs them all.
            bounds = np.array([b_stages[0][1]] + [last for _, _, last in b_stages], np.int64)
            if grid.rows > 1:
                with region(tracer, "pack"):
                    packed = pack_row_ranges(b_block, bounds, self.itype)
                for (s, _, _), message in zip(b_stages, packed):
                    for peer in range(grid.rows):
                        if peer != self.row:
                            transfer.send(self.col_comm, peer, s, message)
            for s, first, last in b_stages:
                b_pieces[s] = row_slice(b_block, first, last)
        incoming: dict[tuple[str, int], object] = {}

        def post(stage: int) -> None:
            lo, hi, a_owner, b_owner = self.stages[stage]
            if a_owner != self.col:
                incoming["a", stage] = transfer.post_header(self.row_comm, a_owner, stage)
                transfer.post_payload(incoming["a", stage])
            if b_owner != self.row:
                incoming["b", stage] = transfer.post_header(self.col_comm, b_owner, stage)
                transfer.post_payload(incoming["b", stage])

        def piece(side: str, stage: int) -> gb.Matrix:
            lo, hi, a_owner, b_owner = self.stages[stage]
            if side == "a":
                if a_owner == self.col:
                    return self.a_pieces[stage]
                arrived = transfer.wait(incoming.pop(("a", stage)))
                with region(tracer, "unpack"):
                    return import_messages([arrived], [0], n_rows, hi - lo, semiring.dtype)
            if b_owner == self.row:
                return b_pieces[stage]
            arrived = transfer.wait(incoming.pop(("b", stage)))
            with region(tracer, "unpack"):
                return import_messages([arrived], [0], hi - lo, n_cols, semiring.dtype)

        size = self.stages_per_product
        groups = [list(range(g, min(g + size, len(self.stages)))) for g in range(0, len(self.stages), size)]
        result = None
        base = self.a_block.nvals + b_block.nvals + held_elsewhere
        mask_structure = None if mask is None else mask.S
        for group in groups[:1]:
            for stage in group:
                post(stage)
        for g, group in enumerate(groups):
            for stage in groups[g + 1] if g + 1 < len(groups) else []:
                post(stage)  # in flight while this group multiplies
            a_list = [piece("a", stage) for stage in group]
            b_list = [piece("b", stage) for stage in group]
            # One product per group of stages: [A_s | A_s+1] (+.x) [B_s ; B_s+1] needs no merge between them.
            with region(tracer, "local product", stages=len(group)):
                a_piece = a_list[0] if len(group) == 1 else gb.ss.concat([a_list])
                b_piece = b_list[0] if len(group) == 1 else gb.ss.concat([[b] for b in b_list])
                if result is None:
                    result = local_multiply(a_piece, b_piece, semiring.operator, mask_structure)
                elif a_piece.nvals and b_piece.nvals:  # (an empty accumulation still costs a pass over C)
                    multiply_into(result, a_piece, b_piece, semiring.operator, semiring.accumulate, mask_structure)
            waiting = sum(int(m.header[1]) for m in incoming.values())
            held = base + a_piece.nvals + b_piece.nvals + waiting + result.nvals
            self.peak_held_entries = max(self.peak_held_entries, held)
            discard(*a_list, *b_list, a_piece, b_piece, keep=(b_block, *self.a_pieces.values()))
        transfer.finish_sends()
        self.bytes_received += transfer.bytes_received
        self.payload_bytes_received += transfer.payload_bytes_received
        self.index_bytes_received += transfer.index_bytes_received
        self.index_payload_bytes_received += transfer.index_payload_bytes_received
        return empty(n_rows, n_cols, semiring.dtype) if result is None else result


def column_slice(block: gb.Matrix, start: int, stop: int) -> gb.Matrix:
    """Columns start:stop of a block; the block itself when that is all of it (no copy: on a square
    grid with equal partitions every stage is a whole block)."""
    return block if (start, stop) == (0, block.ncols) else block[:, start:stop].new()


def row_slice(block: gb.Matrix, start: int, stop: int) -> gb.Matrix:
    """Rows start:stop of a block; the block itself when that is all of it."""
    return block if (start, stop) == (0, block.nrows) else block[start:stop, :].new()
