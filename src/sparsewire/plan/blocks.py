"""A rank's rows of A split into the diagonal block and the off-process nonzeros.

Rank p owns rows ``R_p`` of A. Its diagonal block ``A(p, p)`` multiplies its own rows of B; every
other nonzero (i, j) lies in an off-diagonal block ``A(p, q)`` with q the owner of B row j
(CoLa sec. 2.2 eq. 3: local and remote sparse chunks; PETSc's diagonal / off-diagonal split).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import PlanMismatchError
from sparsewire.partition import RowPartition

__all__ = ["LocalBlocks", "EntryBlock", "split_local_rows", "entry_blocks", "check_partitions"]


@dataclass(frozen=True)
class LocalBlocks:
    """The rows of A owned by one rank, split by owner of the column.

    Attributes:
        rank: the owning rank p.
        diagonal: ``A(p, p)`` with local row and local column indices.
        rows: local row index of each off-diagonal nonzero (row-major order, columns ascending).
        cols: global column index of each off-diagonal nonzero.
        values: value of each off-diagonal nonzero.
        sources: owner q of column ``cols[e]`` (the rank holding that row of B).
    """

    rank: int
    diagonal: sp.csr_array
    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    sources: np.ndarray

    @property
    def n_local_rows(self) -> int:
        """Rows of A owned by this rank."""
        return int(self.diagonal.shape[0])


def split_local_rows(rank: int, local_rows: sp.sparray, col_partition: RowPartition) -> LocalBlocks:
    """Split a rank's rows (global column indices) into its diagonal block and off-diagonal nonzeros.

    Not collective. ``local_rows`` has shape (rows owned by ``rank``, global number of columns).
    """
    local = sp.csr_array(local_rows)
    if local.shape[1] != col_partition.n:
        raise PlanMismatchError(
            f"rank {rank}'s rows have {local.shape[1]} columns but the column partition covers {col_partition.n}; "
            "build both from the same matrix"
        )
    local.sum_duplicates()  # canonical: sorted columns, no duplicates, so every plan builder sees one order
    rows = np.repeat(np.arange(local.shape[0], dtype=np.int64), np.diff(local.indptr))
    cols = local.indices.astype(np.int64)
    sources = np.asarray(col_partition.owner(cols), dtype=np.int64)
    on_diagonal = sources == rank
    col_start, col_stop = col_partition.range(rank)
    if col_start == 0 and col_stop == local.shape[1] and on_diagonal.all():
        diagonal = local  # one rank owns every column (P = 1): share the arrays rather than copy the matrix
    else:
        diagonal = sp.csr_array(
            (local.data[on_diagonal], (rows[on_diagonal], cols[on_diagonal] - col_start)),
            shape=(local.shape[0], col_stop - col_start),
        )
    off = ~on_diagonal
    return LocalBlocks(rank, diagonal, rows[off], cols[off], local.data[off], sources[off])


@dataclass(frozen=True)
class EntryBlock:
    """The entries of one off-diagonal block ``A(p, q)`` by their positions in p's CSR arrays (SDDMM's and attention's
    planners serve them one by one).

    Attributes:
        peer: q, the owner of the block's columns.
        entries: the entries' positions in p's CSR arrays, ascending.
        rows: the block's local row numbers, ascending; ``row_index``: each entry's index into them.
        cols: the block's global columns, ascending; ``col_index``: each entry's index into them.
    """

    peer: int
    entries: np.ndarray
    rows: np.ndarray
    row_index: np.ndarray
    cols: np.ndarray
    col_index: np.ndarray


def entry_blocks(
    local_rows: sp.sparray, col_partition: RowPartition, rank: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[EntryBlock]]:
    """Not collective. Rank ``rank``'s entries split by the owner of their column: each entry's local row and global
    column, the positions of the entries whose column it owns, and one :class:`EntryBlock` per other owner, in rank
    order."""
    csr = sp.csr_array(local_rows)
    entry_row = np.repeat(np.arange(csr.shape[0], dtype=np.int64), np.diff(csr.indptr))
    entry_col = csr.indices.astype(np.int64)
    owner = np.searchsorted(col_partition.offsets, entry_col, side="right") - 1
    positions = np.arange(csr.nnz, dtype=np.int64)
    blocks = []
    for peer in np.unique(owner[owner != rank]).tolist():
        entries = positions[owner == peer]
        rows, row_index = np.unique(entry_row[entries], return_inverse=True)
        cols, col_index = np.unique(entry_col[entries], return_inverse=True)
        blocks.append(EntryBlock(int(peer), entries, rows, row_index.astype(np.int64), cols, col_index.astype(np.int64)))
    return entry_row, entry_col, positions[owner == rank], blocks


def check_partitions(shape: tuple[int, int], row_partition: RowPartition, col_partition: RowPartition) -> None:
    """Not collective. PlanMismatchError unless the partitions cover a matrix of ``shape`` with one rank count."""
    if row_partition.n != shape[0] or col_partition.n != shape[1]:
        raise PlanMismatchError(
            f"partitions cover {row_partition.n} rows and {col_partition.n} columns but the matrix is "
            f"{shape[0]} x {shape[1]}; build them with sparsewire.partition.partition on this matrix"
        )
    if row_partition.n_parts != col_partition.n_parts:
        raise PlanMismatchError(
            f"row partition has {row_partition.n_parts} parts but column partition {col_partition.n_parts}; use one rank count"
        )
