"""Sparse SUMMA on a pr x pc process grid, for any number of ranks (semiring SpGEMM paper sec. 2.1).

Rank r sits at grid position (i, j) = (r // pc, r % pc). A (n x m) is cut into pr row blocks and
pc column blocks, B (m x q) into pr row blocks and pc column blocks, and C (n x q) into A's row
blocks and B's column blocks; rank (i, j) holds A(i, j), B(i, j) and computes C(i, j).

The inner dimension m is cut twice: into pc pieces by A's column blocks and into pr pieces by B's
row blocks. On a rectangular grid these differ, so the stages are their *common refinement*: the
sorted union of both sets of boundaries, at most pr + pc - 1 stages. In the stage over inner
columns [lo, hi), the grid column ja holding A's columns lo..hi broadcasts A(i, lo:hi) along each
grid row i, the grid row ib holding B's rows lo..hi broadcasts B(lo:hi, j) along each grid column
j, and every rank multiply-accumulates ``C(i, j) (+)= A(i, lo:hi) (+.x) B(lo:hi, j)``. A stays on
the left in every product, so non-commutative semirings are exact. CombBLAS needs pr == pc; here
any factorisation works (3 ranks: 3 x 1 or 1 x 3).

Phases (CombBLAS's ``phases``): B's local columns are cut into N pieces and SUMMA runs once per
piece, so the stage blocks of B, the stage products and the partial C being accumulated are about
1/N as large; A is broadcast N times.
"""

from __future__ import annotations

from dataclasses import dataclass

import graphblas as gb
import numpy as np
from mpi4py import MPI

from sparsewire.errors import InputError
from sparsewire.partition import RowPartition, even_rows
from sparsewire.spgemm.local import empty, index_dtype, pack, unpack, wire_bytes
from sparsewire.spgemm.semirings import Semiring

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
        """(grid row, grid column) of ``rank``."""
        return rank // self.cols, rank % self.cols

    def __str__(self) -> str:
        return f"{self.rows}x{self.cols}"


def choose_grid(ranks: int) -> ProcessGrid:
    """The most nearly square grid with pr >= pc and pr * pc = ranks (4: 2x2, 3: 3x1, 6: 3x2)."""
    if ranks < 1:
        raise InputError(f"cannot make a process grid of {ranks} ranks")
    cols = max(d for d in range(1, int(np.sqrt(ranks)) + 1) if ranks % d == 0)
    return ProcessGrid(ranks // cols, cols)


def parse_grid(text: str | None, ranks: int) -> ProcessGrid:
    """``RxC`` (rows x columns) or None for :func:`choose_grid`; R * C must equal the ranks."""
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
        """Even blocks: A rows and B rows into pr parts, A columns and B columns into pc parts."""
        return BlockLayout(
            grid,
            even_rows(a_shape[0], grid.rows),
            even_rows(a_shape[1], grid.cols),
            even_rows(b_shape[0], grid.rows),
            even_rows(b_shape[1], grid.cols),
        )

    def a_block(self, rank: int) -> tuple[slice, slice]:
        """Global (rows, columns) of A held by ``rank``."""
        i, j = self.grid.position(rank)
        return slice(*self.a_rows.range(i)), slice(*self.a_cols.range(j))

    def b_block(self, rank: int) -> tuple[slice, slice]:
        """Global (rows, columns) of B held by ``rank``."""
        i, j = self.grid.position(rank)
        return slice(*self.b_rows.range(i)), slice(*self.b_cols.range(j))

    def c_block(self, rank: int) -> tuple[slice, slice]:
        """Global (rows, columns) of C computed by ``rank``."""
        i, j = self.grid.position(rank)
        return slice(*self.a_rows.range(i)), slice(*self.b_cols.range(j))


def summa_stages(a_cols: RowPartition, b_rows: RowPartition) -> list[tuple[int, int, int, int]]:
    """The stages of the common refinement of A's column blocks and B's row blocks:
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
    B(:, j)`` for this rank's block of B. Counts the bytes this rank broadcasts (to every
    receiver) and the most stored entries it held at once.
    """

    def __init__(self, comm: MPI.Comm, layout: BlockLayout, a_block: gb.Matrix, semiring: Semiring) -> None:
        self.comm, self.layout, self.semiring = comm, layout, semiring
        grid = layout.grid
        if comm.Get_size() != grid.size:
            raise InputError(f"grid {grid} needs {grid.size} ranks, the communicator has {comm.Get_size()}")
        self.row, self.col = grid.position(comm.Get_rank())
        # Ranks of one grid row share A's stage blocks, ranks of one grid column B's.
        self.row_comm = comm.Split(color=self.row, key=self.col)
        self.col_comm = comm.Split(color=self.col, key=self.row)
        self.a_block = a_block
        self.stages = summa_stages(layout.a_cols, layout.b_rows)
        self.bytes_sent = 0
        self.peak_held_entries = 0

    def free(self) -> None:
        """Release the grid row and column communicators."""
        self.row_comm.Free()
        self.col_comm.Free()

    def _broadcast(self, comm: MPI.Comm, root: int, block: gb.Matrix | None, shape: tuple[int, int]) -> gb.Matrix:
        dtype = self.semiring.dtype
        header = np.zeros(2, np.int64)
        if comm.Get_rank() == root:
            ints, values, listed = pack(block)
            header[:] = (listed, values.size)
        comm.Bcast(header, root=root)
        listed, entries = int(header[0]), int(header[1])
        if comm.Get_rank() != root:
            ints = np.empty(2 * listed + entries, index_dtype(*shape))
            values = np.empty(entries, dtype)
        comm.Bcast(ints, root=root)
        comm.Bcast(values.view(np.uint8), root=root)
        if comm.Get_rank() == root:
            size = wire_bytes(listed, entries, ints.itemsize, values.itemsize)
            self.bytes_sent += (comm.Get_size() - 1) * size
            return block
        return unpack([(ints, values, listed)], np.zeros(1, np.int64), shape[0], shape[1], dtype)

    def predicted_bytes(self, b_block: gb.Matrix) -> int:
        """Bytes this rank's broadcasts in :meth:`multiply` would send for this B block: each stage
        block it owns, packed, times the receivers (pc - 1 for A, pr - 1 for B)."""
        layout, value_bytes = self.layout, np.dtype(self.semiring.dtype).itemsize
        a_start = int(layout.a_cols.offsets[self.col])
        b_start = int(layout.b_rows.offsets[self.row])
        total = 0
        for lo, hi, a_owner, b_owner in self.stages:
            if self.col == a_owner:
                ints, values, listed = pack(column_slice(self.a_block, lo - a_start, hi - a_start))
                total += (layout.grid.cols - 1) * wire_bytes(listed, values.size, ints.itemsize, value_bytes)
            if self.row == b_owner:
                ints, values, listed = pack(row_slice(b_block, lo - b_start, hi - b_start))
                total += (layout.grid.rows - 1) * wire_bytes(listed, values.size, ints.itemsize, value_bytes)
        return total

    def multiply(self, b_block: gb.Matrix, mask: gb.Matrix | None = None, held_elsewhere: int = 0) -> gb.Matrix:
        """Collective over the grid. This rank's block C(i, j) (masked by ``mask`` if given: only
        entries where the mask has a stored entry are kept). ``held_elsewhere``: entries of earlier
        phases' results still held, added to the peak count."""
        layout, semiring = self.layout, self.semiring
        a_col_start = int(layout.a_cols.offsets[self.col])
        b_row_start = int(layout.b_rows.offsets[self.row])
        n_rows = int(layout.a_rows.counts()[self.row])
        n_cols = b_block.ncols
        result = empty(n_rows, n_cols, semiring.dtype)
        base = self.a_block.nvals + b_block.nvals + held_elsewhere
        for lo, hi, a_owner, b_owner in self.stages:
            a_piece = None
            if self.col == a_owner:
                a_piece = column_slice(self.a_block, lo - a_col_start, hi - a_col_start)
            a_piece = self._broadcast(self.row_comm, a_owner, a_piece, (n_rows, hi - lo))
            b_piece = None
            if self.row == b_owner:
                b_piece = row_slice(b_block, lo - b_row_start, hi - b_row_start)
            b_piece = self._broadcast(self.col_comm, b_owner, b_piece, (hi - lo, n_cols))
            if mask is None:
                product = a_piece.mxm(b_piece, semiring.operator).new()
            else:
                product = a_piece.mxm(b_piece, semiring.operator).new(mask=mask.S)
            held = base + a_piece.nvals + b_piece.nvals + result.nvals + product.nvals
            self.peak_held_entries = max(self.peak_held_entries, held)
            result(accum=semiring.accumulate) << product
        return result


def column_slice(block: gb.Matrix, start: int, stop: int) -> gb.Matrix:
    """Columns start:stop of a block; the block itself when that is all of it (no copy: on a square
    grid with equal partitions every stage is a whole block)."""
    return block if (start, stop) == (0, block.ncols) else block[:, start:stop].new()


def row_slice(block: gb.Matrix, start: int, stop: int) -> gb.Matrix:
    """Rows start:stop of a block; the block itself when that is all of it."""
    return block if (start, stop) == (0, block.nrows) else block[start:stop, :].new()
