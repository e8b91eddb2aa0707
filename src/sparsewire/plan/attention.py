"""The graph-attention (GAT) plan, without MPI: which node sends what so that each destination's softmax over its
in-neighbours is exact while the fewest bytes move.

Rows of A are destinations, columns sources, both split by one partition; rank q owns its rows' features
``z_v`` (H heads of C channels), source scores ``s_v = <a_src, z_v>`` and destination scores ``t_v = <a_dst, z_v>``.
Per head, ``e_ij = LeakyReLU(s_j + t_i)`` and ``out_i = sum_j softmax_j(e_ij) z_j`` over row i's entries.

An entry of an off-diagonal block A(q, p) is served one of two ways:

* by its **column**: q fetches ``z_j`` (H C values) and computes the entry itself; backward it returns ``dz_j``;
* by its **row**: q sends ``t_i`` (H values) to p, which returns the partial softmax-aggregate of row i over the
  entries it serves, ``L = log sum exp(e_ij)`` and ``V = sum softmax(e_ij) z_j`` (H (C + 1) values); backward q sends
  the gradients of V and L (H (C + 1)) and p returns that of ``t_i`` (H). q merges its partials exactly:
  ``L_i = log sum_k exp(L_ik)``, ``out_i = sum_k exp(L_ik - L_i) V_ik``.

So per layer and training step (forward and backward) a block costs ``2 b H [C |cols| + (C + 2) |rows|]`` bytes for
the columns and rows it serves that way (b bytes per value). ``column`` serves every entry by its column (the halo
exchange of every other full-graph system), ``row`` by its row, and ``joint`` takes a minimum *weighted* vertex cover
of the block's bipartite graph (column weight C, row weight C + 2; :mod:`sparsewire.plan.cover`'s min cut), so it
never moves more than either; an entry whose column is in the cover is served by its column.

Two levels (``column-hier``, CoLa sec. 4.2 for attention): with the ranks in groups (nodes), every entry is served by
its column, but the sources that ranks of group h need from a rank q outside h cross the slow link once, to the proxy
of (q, h) (:func:`sparsewire.plan.hierarchy.local_proxies`), which forwards to each rank of h the rows it needs
(:func:`relayed_columns`); backward, the proxy sums the members' gradients of those rows and sends them across once.
Between groups a step then moves ``2 b H C sum_q sum_{h != group(q)} |union_{p in h} Cols(A(p, q))|`` bytes, never
more than ``column``; inside a group, the relayed rows ``2 b H C`` each once more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.partition.rows import RowPartition
from sparsewire.plan.blocks import entry_blocks
from sparsewire.plan.cover import minimum_vertex_cover

__all__ = ["ATTENTION_STRATEGIES", "HIERARCHICAL_ATTENTION", "AttentionBlock", "attention_pattern", "attention_bytes",
           "attention_blocks", "relayed_columns"]  # fmt: skip

#: How an attention plan serves its off-diagonal blocks (module docstring).
ATTENTION_STRATEGIES = ("column", "row", "joint", "column-hier")
#: The strategies that route through groups of ranks (they need a topology with groups).
HIERARCHICAL_ATTENTION = ("column-hier",)


def attention_pattern(local_rows: sp.csr_array, row_offset: int, self_loops: bool) -> sp.csr_array:
    """Not collective. The structure GAT attends over (values 1, sorted): with ``self_loops``, this rank's rows of A
    without their stored self-loops plus one per node (PyG's GAT rule: ``remove_self_loops`` then
    ``add_self_loops``); without, A's pattern as it is (stored self-loops kept, as PyG keeps them)."""
    coo = sp.coo_array(local_rows)
    rows, cols = coo.row, coo.col
    if self_loops:
        keep = cols != rows + row_offset
        own = np.arange(local_rows.shape[0])
        rows, cols = np.concatenate([rows[keep], own]), np.concatenate([cols[keep], own + row_offset])
    pattern = sp.csr_array((np.ones(rows.size, np.int8), (rows, cols)), shape=local_rows.shape)
    pattern.sum_duplicates()
    pattern.sort_indices()
    pattern.data[:] = 1
    return pattern


@dataclass(frozen=True)
class AttentionBlock:
    """How rank q's entries in the columns of one peer p are served.

    Attributes:
        peer: p.
        cols: the global columns fetched from p (served by their column), ascending.
        rows: q's local rows whose remaining entries p serves (by their row), ascending.
        column_entries: positions in q's CSR arrays of the entries served by their column.
        row_entries: positions of the entries p serves, ordered by row then column.
        row_of_entry: for each of ``row_entries``, its index into ``rows``.
    """

    peer: int
    cols: np.ndarray
    rows: np.ndarray
    column_entries: np.ndarray
    row_entries: np.ndarray
    row_of_entry: np.ndarray

    def bytes(self, heads: int, channels: int, value_bytes: int) -> tuple[int, int]:
        """Not collective. (forward, backward) bytes of this block per step: ``attention_bytes`` of its sets."""
        return attention_bytes(self.cols.size, self.rows.size, heads, channels, value_bytes)


def attention_bytes(n_cols: int, n_rows: int, heads: int, channels: int, value_bytes: int) -> tuple[int, int]:
    """Not collective. The (forward, backward) bytes of ``n_cols`` columns and ``n_rows`` rows served across ranks:
    each way ``b H (C |cols| + (C + 2) |rows|)`` (forward: z_j; t_i out, L and V back; backward: dz_j; the gradients
    of V and L out, that of t_i back), so ``2 b H [C |cols| + (C + 2) |rows|]`` per step."""
    one_way = value_bytes * heads * (channels * n_cols + (channels + 2) * n_rows)
    return one_way, one_way


def attention_blocks(
    local_rows: sp.csr_array, col_partition: RowPartition, rank: int, channels: int, strategy: str = "joint"
) -> tuple[np.ndarray, list[AttentionBlock]]:
    """Not collective. Rank ``rank``'s entries split by their column's owner: the positions (in ``local_rows``' CSR
    arrays) of those whose column it owns, and one :class:`AttentionBlock` per other owner, in rank order, served
    under ``strategy`` (module docstring; ``joint`` weighs a column C and a row C + 2; ``column-hier`` serves every
    entry by its column, as ``column``, and leaves the routing to the caller)."""
    if strategy not in ATTENTION_STRATEGIES:
        raise InputError(f"unknown attention strategy {strategy!r}; choose one of {', '.join(ATTENTION_STRATEGIES)}")
    if not isinstance(channels, (int, np.integer)) or channels < 1:
        raise InputError(f"channels per head must be a positive integer (got {channels!r})")
    entry_row, entry_col, diagonal, split = entry_blocks(local_rows, col_partition, rank)
    blocks = []
    for block in split:
        if strategy in ("column", "column-hier"):
            by_column = np.ones(block.entries.size, bool)
        elif strategy == "row":
            by_column = np.zeros(block.entries.size, bool)
        else:
            graph = sp.csr_array(
                (np.ones(block.entries.size, np.int8), (block.row_index, block.col_index)),
                shape=(block.rows.size, block.cols.size),
            )
            _, col_covered = minimum_vertex_cover(
                graph, np.full(block.rows.size, channels + 2, np.int64), np.full(block.cols.size, channels, np.int64)
            )
            by_column = col_covered[block.col_index]
        entries = block.entries
        served_rows, row_of_entry = np.unique(entry_row[entries[~by_column]], return_inverse=True)
        blocks.append(
            AttentionBlock(
                block.peer,
                np.unique(entry_col[entries[by_column]]),
                served_rows,
                entries[by_column],
                entries[~by_column],  # CSR order: by row, then column
                row_of_entry.astype(np.int64),
            )
        )
    return diagonal, blocks


def relayed_columns(wanted: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Not collective. What a proxy fetches from one source for its group: the union ``U`` of the members' ``wanted``
    columns (each ascending), ascending, and each member's positions in ``U`` (``U[positions[m]] == wanted[m]``)."""
    union = np.unique(np.concatenate([np.asarray(w, np.int64) for w in wanted])) if wanted else np.zeros(0, np.int64)
    return union, [np.searchsorted(union, w).astype(np.int64) for w in wanted]
