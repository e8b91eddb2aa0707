"""The attention plan without MPI (sparsewire.plan.attention): the byte formula on a hand-made block, every entry
served exactly once, and ``joint`` a minimum weighted cover, checked by brute force on small blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.partition import even_rows
from sparsewire.plan.attention import attention_blocks, attention_bytes, relayed_columns


def test_the_formula_counts_a_column_c_values_and_a_row_c_plus_two_per_head_each_way():
    # 3 columns and 2 rows, H = 4 heads of C = 8, float32: each way 4 * 4 * (8 * 3 + 10 * 2) = 704 bytes.
    assert attention_bytes(3, 2, heads=4, channels=8, value_bytes=4) == (704, 704)
    assert attention_bytes(0, 0, 4, 8, 4) == (0, 0)


def test_a_hand_made_block_is_served_by_the_cheaper_cover():
    # Rank 0 of 2 (columns 0-2 its own, 3-5 rank 1's). Row 0 reaches columns 3, 4, 5 (a star on one row); rows 1 and
    # 2 reach column 3 and column 4.
    #   column: 3 columns; row: 3 rows; joint: row 0 (weight C + 2) and columns 3, 4 (weight C each) would cost
    #   3C + 2; columns 3, 4, 5 cost 3C; rows 0, 1, 2 cost 3C + 6. With C = 1: columns (3) beat row 0 + 3, 4 (5).
    #   With a wider star (row 0 reaching 6 columns), row 0 plus the two shared columns wins.
    rows = sp.csr_array(
        (np.ones(7), np.array([0, 3, 4, 5, 3, 4, 2]), np.array([0, 4, 5, 7])),
        shape=(3, 6),
    )
    diagonal, (block,) = attention_blocks(rows, even_rows(6, 2), 0, channels=1, strategy="joint")
    assert diagonal.tolist() == [0, 6]
    assert block.peer == 1 and block.cols.tolist() == [3, 4, 5] and block.rows.size == 0
    wide = sp.csr_array((np.ones(9), np.array([6, 7, 8, 9, 10, 11, 6, 7, 0]), np.array([0, 6, 7, 9])), shape=(3, 12))
    _, (block,) = attention_blocks(wide, even_rows(12, 2), 0, channels=1, strategy="joint")
    # cover: row 0 (3) + columns 6, 7 (1 each) = 5 < six columns (6) < rows 0, 1, 2 (9)
    assert block.cols.tolist() == [6, 7] and block.rows.tolist() == [0]
    assert block.column_entries.tolist() == [0, 1, 6, 7] and block.row_entries.tolist() == [2, 3, 4, 5]
    assert block.row_of_entry.tolist() == [0, 0, 0, 0]
    assert block.bytes(1, 1, 8) == attention_bytes(2, 1, 1, 1, 8) == (8 * (2 + 3), 8 * (2 + 3))


def _cheapest_cover(graph: np.ndarray, channels: int) -> int:
    """The minimum weight of a vertex cover of a small dense bipartite graph, by trying every row subset."""
    n_rows, n_cols = graph.shape
    best = None
    for chosen in itertools.product([False, True], repeat=n_rows):
        chosen = np.array(chosen, bool)
        needed = graph[~chosen].any(axis=0)  # columns that must be covered: an edge from an unchosen row
        weight = (channels + 2) * int(chosen.sum()) + channels * int(needed.sum())
        best = weight if best is None else min(best, weight)
    return best


def test_every_entry_is_served_once_and_joint_is_a_minimum_weighted_cover(rng):
    for _ in range(25):
        n, ranks, channels = int(rng.integers(6, 14)), int(rng.integers(2, 4)), int(rng.integers(1, 6))
        matrix = sp.random_array((n, n), density=float(rng.uniform(0.1, 0.5)), rng=rng, format="csr")
        partition = even_rows(n, ranks)
        for rank in range(ranks):
            local = sp.csr_array(matrix[slice(*partition.range(rank))])
            totals = {}
            for strategy in ("column", "row", "joint"):
                diagonal, blocks = attention_blocks(local, partition, rank, channels, strategy)
                served = np.concatenate([diagonal, *(np.concatenate([b.column_entries, b.row_entries]) for b in blocks)])
                assert np.array_equal(np.sort(served), np.arange(local.nnz))  # every entry exactly once
                cols = local.indices
                for block in blocks:
                    assert np.array_equal(np.unique(cols[block.column_entries]), block.cols)
                    entry_rows = np.repeat(np.arange(local.shape[0]), np.diff(local.indptr))
                    assert np.array_equal(block.rows[block.row_of_entry], entry_rows[block.row_entries])
                totals[strategy] = sum(block.bytes(1, channels, 1)[0] for block in blocks)
            assert totals["joint"] <= min(totals["column"], totals["row"])
            # joint's total is the minimum weight of each block's cover (brute force over the rows)
            minimum = 0
            for peer in range(ranks):
                if peer == rank:
                    continue
                block = local[:, slice(*partition.range(peer))].toarray() != 0
                block = block[block.any(axis=1)][:, block.any(axis=0)]
                if block.size:
                    minimum += _cheapest_cover(block, channels)
            assert totals["joint"] == minimum


def test_attention_blocks_refuse_an_unknown_strategy_and_a_width_below_one():
    rows = sp.csr_array(np.eye(2))
    with pytest.raises(InputError, match="unknown attention strategy 'block'; choose one of column, row, joint"):
        attention_blocks(rows, even_rows(2, 1), 0, 4, "block")
    with pytest.raises(InputError, match="channels per head must be a positive integer"):
        attention_blocks(rows, even_rows(2, 1), 0, 0, "joint")


def test_a_proxy_fetches_the_union_of_its_members_columns_once_and_finds_each_members_rows_in_it(rng):
    union, positions = relayed_columns([np.array([2, 9]), np.array([], np.int64), np.array([1, 2, 7])])
    assert union.tolist() == [1, 2, 7, 9]
    assert [p.tolist() for p in positions] == [[1, 3], [], [0, 1, 2]]
    for _ in range(20):
        wanted = [np.unique(rng.integers(0, 50, rng.integers(0, 12))) for _ in range(rng.integers(1, 5))]
        union, positions = relayed_columns(wanted)
        assert np.array_equal(union, np.unique(np.concatenate(wanted)))
        for w, p in zip(wanted, positions):
            assert np.array_equal(union[p], w)
    assert relayed_columns([])[0].size == 0
