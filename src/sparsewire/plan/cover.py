"""Minimum (weighted) vertex cover of a bipartite graph, the optimiser behind the ``joint`` strategy.

The bipartite graph has one vertex per row and per column of a sparse block and one edge per
nonzero (SHIRO sec. V-B, V-C). A vertex cover picks rows (send a partial C row) and columns (send
a B row) so that every nonzero is served by at least one of them.

* Unit weights: a maximum matching (Hopcroft-Karp, ``scipy.sparse.csgraph``) and König's
  construction: with Z the vertices reachable from unmatched rows by alternating paths
  (any edge row -> column, matched edge column -> row), the cover is ``(rows \\ Z) | (cols & Z)``
  and its size equals the matching size (König's theorem).
* General positive integer weights: a minimum s-t cut in the network s -> row (capacity
  w_row), row -> column (infinite), column -> t (capacity w_col); the cover is the rows on the
  sink side plus the columns on the source side of the cut (SHIRO sec. V-C 2).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.distinct import concatenated_ranges, pattern_of_keys
from sparsewire.errors import InputError

__all__ = ["minimum_vertex_cover", "unit_cover_of_edges", "maximum_matching_size"]


def minimum_vertex_cover(
    biadjacency: sp.sparray,
    row_weights: np.ndarray | None = None,
    col_weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. Minimum-weight vertex cover of the bipartite graph whose edges are the nonzeros of ``biadjacency``.

    Args:
        biadjacency: n_rows x n_cols sparse matrix; every stored entry is an edge (values ignored).
        row_weights, col_weights: positive integer weights per vertex; both ``None`` means unit
            weights (solved by maximum matching and König), otherwise a minimum s-t cut is used.

    Returns:
        ``(row_in_cover, col_in_cover)``: boolean masks. Every edge (i, j) has
        ``row_in_cover[i] or col_in_cover[j]``; the total weight is minimum.
    """
    graph = _pattern(biadjacency)
    n_rows, n_cols = graph.shape
    if row_weights is None and col_weights is None:
        return _konig_cover(graph)
    row_weights = np.ones(n_rows, np.int64) if row_weights is None else np.asarray(row_weights)
    col_weights = np.ones(n_cols, np.int64) if col_weights is None else np.asarray(col_weights)
    if row_weights.shape != (n_rows,) or col_weights.shape != (n_cols,):
        raise InputError(
            f"cover weights must have one entry per row ({n_rows}) and per column ({n_cols}) "
            f"(got {row_weights.shape} and {col_weights.shape})"
        )
    for name, weights in (("row", row_weights), ("column", col_weights)):
        if weights.size and (np.any(weights <= 0) or np.any(np.mod(weights, 1) != 0)):
            raise InputError(f"{name} weights of the vertex cover must be positive integers; scale them to integers")
    return _min_cut_cover(graph, row_weights.astype(np.int64), col_weights.astype(np.int64))


def unit_cover_of_edges(row_vertex: np.ndarray, col_vertex: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. :func:`minimum_vertex_cover` with unit weights of the graph whose edges are
    ``(row_vertex[e], col_vertex[e])`` (repeats are one edge), its pattern made in one step (the same
    canonical CSR the general path makes through COO and :func:`_pattern`, so the same matching)."""
    keys = np.asarray(row_vertex, np.int64) * shape[1] + np.asarray(col_vertex, np.int64)
    return _konig_cover(pattern_of_keys(keys, shape, in_place=True))


def maximum_matching_size(biadjacency: sp.sparray) -> int:
    """Not collective. Size of a maximum matching of the bipartite graph (Hopcroft-Karp)."""
    graph = _pattern(biadjacency)
    if graph.nnz == 0:
        return 0
    from scipy.sparse.csgraph import maximum_bipartite_matching  # loaded when a cover is solved (10 MiB)

    return int(np.count_nonzero(maximum_bipartite_matching(graph, perm_type="column") >= 0))


def _pattern(biadjacency: sp.sparray) -> sp.csr_array:
    """The edge structure with value 1 per stored entry (values, even explicit zeros, are ignored)."""
    csr = sp.csr_array(biadjacency)
    csr.sum_duplicates()
    return sp.csr_array((np.ones(csr.nnz, np.int8), csr.indices, csr.indptr), shape=csr.shape)


def _konig_cover(graph: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    n_rows, n_cols = graph.shape
    if graph.nnz == 0:
        return np.zeros(n_rows, bool), np.zeros(n_cols, bool)
    from scipy.sparse.csgraph import maximum_bipartite_matching

    reached_rows, reached_cols = _alternating_reach(graph, maximum_bipartite_matching(graph, perm_type="column"))
    return ~reached_rows, reached_cols


def _alternating_reach(graph: sp.csr_array, match_of_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows and columns reachable from the unmatched rows by alternating paths (any edge row -> column,
    the matched edge column -> row), level by level: a set, whatever order the levels are walked in. A
    few array operations per level, where a graph search library call would first build the directed
    alternating graph (two sparse constructions per call; joint plans one cover per rank)."""
    n_rows, n_cols = graph.shape
    matched = np.flatnonzero(match_of_row >= 0)
    row_of_col = np.full(n_cols, -1, np.int64)
    row_of_col[match_of_row[matched]] = matched
    reached_rows = match_of_row < 0
    reached_cols = np.zeros(n_cols, bool)
    frontier = np.flatnonzero(reached_rows)
    indptr, indices = graph.indptr, graph.indices
    while frontier.size:
        starts = indptr[frontier].astype(np.int64)
        cols = indices[concatenated_ranges(starts, indptr[frontier + 1] - starts)]  # every neighbour of the frontier
        cols = np.unique(cols[~reached_cols[cols]])
        reached_cols[cols] = True
        rows = row_of_col[cols]
        frontier = rows[rows >= 0]  # distinct (a matching), and not reached: a reached matched row's column was
        reached_rows[frontier] = True
    return reached_rows, reached_cols


def _min_cut_cover(graph: sp.csr_array, row_weights: np.ndarray, col_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n_rows, n_cols = graph.shape
    if graph.nnz == 0:
        return np.zeros(n_rows, bool), np.zeros(n_cols, bool)
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    infinite = int(row_weights.sum() + col_weights.sum() + 1)
    if infinite >= np.iinfo(np.int32).max:
        raise InputError("vertex cover weights are too large for the max-flow solver (sum >= 2^31); scale them down")
    source, sink = n_rows + n_cols, n_rows + n_cols + 1
    size = n_rows + n_cols + 2
    edge_rows, edge_cols = graph.nonzero()
    rows, cols = np.arange(n_rows), np.arange(n_cols)
    tails = np.concatenate([np.full(n_rows, source), edge_rows, n_rows + cols])
    heads = np.concatenate([rows, n_rows + edge_cols, np.full(n_cols, sink)])
    capacity = np.concatenate([row_weights, np.full(edge_rows.size, infinite), col_weights]).astype(np.int32)
    network = sp.csr_array((capacity, (tails, heads)), shape=(size, size))
    flow = maximum_flow(network, source, sink, method="dinic").flow
    # Residual capacity: forward edges keep capacity - flow, reverse edges get the flow back.
    residual = sp.csr_array(network - flow)
    residual.data[residual.data < 0] = 0
    residual.eliminate_zeros()
    source_side = np.zeros(size, bool)
    source_side[breadth_first_order(residual, source, directed=True, return_predecessors=False)] = True
    return ~source_side[:n_rows], source_side[n_rows : n_rows + n_cols]
