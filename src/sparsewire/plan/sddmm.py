"""SDDMM's plan, without MPI: ``S = A ∘ (X Yᵀ)``, the products ``<x_i, y_j>`` sampled at A's stored entries and
scaled by them, for A split by rows over P ranks, X (n x d) split as A's rows and Y (m x d) as A's columns (B's rows
in ``A @ B``).

Rank q computes the entries of its rows. An entry whose column q owns needs nothing; the entries of an off-diagonal
block A(q, p) (q's rows, the columns p owns) take one of two ways, the block's sampled values being what SpMM's
column and row strategies are for its product (Bharadwaj, Buluç and Demmel, IPDPS 2022, move whole dense blocks
instead, sparsity-oblivious):

* ``column``: q fetches the rows of Y the block names, ``b d |cols|`` bytes;
* ``row``: q sends p the rows of X the block names, p samples the block and sends its ``nnz`` values back,
  ``b (d |rows| + nnz)`` bytes, in two rounds.

``auto`` takes the way of fewer bytes per block (``column`` on a tie: one round, not two), so it never moves more
than either; b is the element's bytes. The planner is pure: :func:`sddmm_blocks` reads this rank's rows only, and
the ranks exchange what each block needs when the plan is made (:mod:`sparsewire.distributed.sddmm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.partition.rows import RowPartition
from sparsewire.plan.blocks import entry_blocks

__all__ = ["SDDMM_STRATEGIES", "SddmmBlock", "way_bytes", "choose_way", "sddmm_blocks"]

#: The strategies an SDDMM plan offers: every block one way, or each block the way of fewer bytes.
SDDMM_STRATEGIES = ("column", "row", "auto")


@dataclass(frozen=True)
class SddmmBlock:
    """One off-diagonal block A(q, p) of rank q's rows, and the way its values are made.

    Attributes:
        peer: p, the rank that owns the block's columns.
        way: ``"column"`` or ``"row"`` (module docstring).
        rows: q's local row numbers that hold an entry of the block, ascending.
        cols: the block's global column numbers, ascending.
        entries: the positions of the block's entries in q's CSR arrays (``local_rows.data``), ascending.
        entry_rows, entry_cols: for each of those entries, its index into ``rows`` and into ``cols``.
    """

    peer: int
    way: str
    rows: np.ndarray
    cols: np.ndarray
    entries: np.ndarray
    entry_rows: np.ndarray
    entry_cols: np.ndarray

    def bytes(self, d: int, value_bytes: int) -> int:
        """Not collective. The bytes this block's way moves per SDDMM (module docstring)."""
        column, row = way_bytes(self.rows.size, self.cols.size, self.entries.size, d, value_bytes)
        return column if self.way == "column" else row


def way_bytes(n_rows: int, n_cols: int, nnz: int, d: int, value_bytes: int) -> tuple[int, int]:
    """Not collective. The bytes of a block of ``nnz`` entries on ``n_rows`` rows and ``n_cols`` columns, each way:
    ``(b d |cols|, b (d |rows| + nnz))``."""
    return value_bytes * d * n_cols, value_bytes * (d * n_rows + nnz)


def choose_way(strategy: str, column_bytes: int, row_bytes: int) -> str:
    """Not collective. The way of a block under ``strategy`` (``auto``: the fewer bytes, ``column`` on a tie)."""
    if strategy not in SDDMM_STRATEGIES:
        raise InputError(f"unknown SDDMM strategy {strategy!r}; choose one of {', '.join(SDDMM_STRATEGIES)}")
    if strategy == "auto":
        return "row" if row_bytes < column_bytes else "column"
    return strategy


def sddmm_blocks(
    local_rows: sp.csr_array, col_partition: RowPartition, rank: int, d: int, value_bytes: int, strategy: str = "auto"
) -> tuple[np.ndarray, list[SddmmBlock]]:
    """Not collective. Rank ``rank``'s entries split by the owner of their column: the positions (in
    ``local_rows``' CSR arrays) of the entries whose column it owns, and one :class:`SddmmBlock` per other rank
    that owns a column of its rows, in rank order, each with its way under ``strategy``."""
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise InputError(f"d, the width of X and Y, must be a positive integer (got {d!r})")
    choose_way(strategy, 0, 0)  # the name checked before any work
    diagonal, blocks = entry_blocks(local_rows, col_partition, rank)[2:]
    ways = []
    for block in blocks:
        column_bytes, row_bytes = way_bytes(block.rows.size, block.cols.size, block.entries.size, d, value_bytes)
        way = choose_way(strategy, column_bytes, row_bytes)
        ways.append(SddmmBlock(block.peer, way, block.rows, block.cols, block.entries, block.row_index, block.col_index))
    return diagonal, ways
