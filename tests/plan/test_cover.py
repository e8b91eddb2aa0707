"""Vertex cover: validity, optimality against brute force, König's theorem."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.plan.cover import maximum_matching_size, minimum_vertex_cover


def brute_force_cover_weight(edges, n_rows, n_cols, row_weights, col_weights) -> int:
    best = None
    vertices = n_rows + n_cols
    weights = np.concatenate([row_weights, col_weights])
    for mask in itertools.product([False, True], repeat=vertices):
        chosen = np.array(mask)
        if all(chosen[i] or chosen[n_rows + j] for i, j in edges):
            weight = int(weights[chosen].sum())
            best = weight if best is None else min(best, weight)
    return best


def random_bipartite(rng, max_side=5):
    n_rows, n_cols = rng.integers(1, max_side + 1, 2)
    dense = rng.random((n_rows, n_cols)) < rng.uniform(0.1, 0.7)
    return sp.csr_array(dense.astype(np.int8)), list(zip(*np.nonzero(dense)))


def assert_valid(graph, row_in, col_in):
    rows, cols = graph.nonzero()
    assert np.all(row_in[rows] | col_in[cols]), "an edge is not covered"


@pytest.mark.parametrize("trial", range(40))
def test_unit_cover_is_optimal_and_equals_matching(rng, trial):
    graph, edges = random_bipartite(rng)
    row_in, col_in = minimum_vertex_cover(graph)
    assert_valid(graph, row_in, col_in)
    size = int(row_in.sum() + col_in.sum())
    assert size == maximum_matching_size(graph)
    assert size == brute_force_cover_weight(edges, *graph.shape, np.ones(graph.shape[0]), np.ones(graph.shape[1]))


@pytest.mark.parametrize("trial", range(40))
def test_weighted_cover_is_optimal(rng, trial):
    graph, edges = random_bipartite(rng)
    row_weights = rng.integers(1, 6, graph.shape[0])
    col_weights = rng.integers(1, 6, graph.shape[1])
    row_in, col_in = minimum_vertex_cover(graph, row_weights, col_weights)
    assert_valid(graph, row_in, col_in)
    weight = int(row_weights[row_in].sum() + col_weights[col_in].sum())
    assert weight == brute_force_cover_weight(edges, *graph.shape, row_weights, col_weights)


def test_shiro_figure_1d_block():
    # Rows 0..2 x columns 5..7 of SHIRO Fig. 1(d): b, c, d in row 0; c, f, h in column 6.
    graph = sp.csr_array(np.array([[1, 1, 1], [0, 1, 0], [0, 1, 0]], dtype=np.int8))
    row_in, col_in = minimum_vertex_cover(graph)
    assert row_in.tolist() == [True, False, False]
    assert col_in.tolist() == [False, True, False]


def test_weights_steer_the_cover():
    # A star: one row joined to three columns. Cheap row -> take the row; expensive row -> the columns.
    star = sp.csr_array(np.ones((1, 3), dtype=np.int8))
    row_in, col_in = minimum_vertex_cover(star, np.array([2]), np.array([1, 1, 1]))
    assert row_in.tolist() == [True] and not col_in.any()
    row_in, col_in = minimum_vertex_cover(star, np.array([4]), np.array([1, 1, 1]))
    assert not row_in.any() and col_in.all()


def test_empty_graph_and_isolated_vertices():
    row_in, col_in = minimum_vertex_cover(sp.csr_array((3, 4), dtype=np.int8))
    assert not row_in.any() and not col_in.any()
    assert maximum_matching_size(sp.csr_array((2, 2))) == 0


def test_larger_random_graph_matches_matching(rng):
    graph = sp.random_array((300, 200), density=0.02, rng=rng, format="csr")
    row_in, col_in = minimum_vertex_cover(graph)
    assert_valid(graph, row_in, col_in)
    assert row_in.sum() + col_in.sum() == maximum_matching_size(graph)
    # Unit weights given explicitly go through the min-cut path and must reach the same optimum.
    row_cut, col_cut = minimum_vertex_cover(graph, np.ones(300, int), np.ones(200, int))
    assert_valid(graph, row_cut, col_cut)
    assert row_cut.sum() + col_cut.sum() == row_in.sum() + col_in.sum()


@pytest.mark.parametrize("weights", [np.array([0, 1]), np.array([1.5, 1]), np.array([1])])
def test_bad_weights_are_rejected(weights):
    graph = sp.csr_array(np.ones((2, 2), dtype=np.int8))
    with pytest.raises(InputError, match="weights"):
        minimum_vertex_cover(graph, weights, np.ones(2, int))


@pytest.mark.parametrize("trial", range(6))
def test_alternating_reach_is_the_graph_searchs_set(rng, trial):
    """The level-by-level reach of König's construction equals scipy's breadth-first search over the directed
    alternating graph (the construction it replaced), and the cover of edges made in one step is the general
    path's cover, mask for mask."""
    from scipy.sparse.csgraph import breadth_first_order, maximum_bipartite_matching

    from sparsewire.plan.cover import _alternating_reach, _pattern, unit_cover_of_edges

    n_rows, n_cols = int(rng.integers(1, 60)), int(rng.integers(1, 60))
    edges = int(rng.integers(1, 3 * (n_rows + n_cols)))
    rows, cols = rng.integers(0, n_rows, edges), rng.integers(0, n_cols, edges)
    graph = _pattern(sp.csr_array((np.ones(edges), (rows, cols)), shape=(n_rows, n_cols)))
    match = maximum_bipartite_matching(graph, perm_type="column")
    matched, unmatched = np.flatnonzero(match >= 0), np.flatnonzero(match < 0)
    source = n_rows + n_cols
    edge_rows, edge_cols = graph.nonzero()
    tails = np.concatenate([edge_rows, n_rows + match[matched], np.full(unmatched.size, source)])
    heads = np.concatenate([n_rows + edge_cols, matched, unmatched])
    alternating = sp.csr_array((np.ones(tails.size, np.int8), (tails, heads)), shape=(source + 1, source + 1))
    reached = np.zeros(source + 1, bool)
    reached[breadth_first_order(alternating, source, directed=True, return_predecessors=False)] = True
    reached_rows, reached_cols = _alternating_reach(graph, match)
    assert np.array_equal(reached_rows, reached[:n_rows]) and np.array_equal(reached_cols, reached[n_rows:source])
    one_step = unit_cover_of_edges(rows, cols, (n_rows, n_cols))
    general = minimum_vertex_cover(sp.coo_array((np.ones(edges), (rows, cols)), shape=(n_rows, n_cols)))
    assert np.array_equal(one_step[0], general[0]) and np.array_equal(one_step[1], general[1])
