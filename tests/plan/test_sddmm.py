"""SDDMM's pure planner (sparsewire.plan.sddmm) and its local kernel (sparsewire.kernels.sampled): each block's
bytes by the formula on a hand-made matrix, the ways each strategy gives, and sampled dot products against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.kernels.sampled import CHUNK_ENTRIES, sampled_dots
from sparsewire.partition import even_rows
from sparsewire.plan.sddmm import choose_way, sddmm_blocks, way_bytes


def test_a_hand_made_rank_splits_its_entries_by_the_owner_of_their_column():
    # Rank 0 of 3 owns columns 0-1; rank 1 columns 2-3; rank 2 columns 4-5. Its two rows:
    #   row 0: columns 0, 2, 3, 4        row 1: columns 1, 2, 5
    rows = sp.csr_array((np.ones(7), np.array([0, 2, 3, 4, 1, 2, 5]), np.array([0, 4, 7])), shape=(2, 6))
    columns = even_rows(6, 3)
    diagonal, blocks = sddmm_blocks(rows, columns, 0, d=4, value_bytes=8, strategy="column")
    assert diagonal.tolist() == [0, 4]
    assert [block.peer for block in blocks] == [1, 2]
    one, two = blocks
    assert one.rows.tolist() == [0, 1] and one.cols.tolist() == [2, 3] and one.entries.tolist() == [1, 2, 5]
    assert one.entry_rows.tolist() == [0, 0, 1] and one.entry_cols.tolist() == [0, 1, 0]
    assert two.rows.tolist() == [0, 1] and two.cols.tolist() == [4, 5] and two.entries.tolist() == [3, 6]
    # column: 8 d |cols| = 64 each; row: 8 (d |rows| + nnz) = 8 (8 + 3) = 88 and 8 (8 + 2) = 80
    assert [block.bytes(4, 8) for block in blocks] == [64, 64]
    _, rows_way = sddmm_blocks(rows, columns, 0, d=4, value_bytes=8, strategy="row")
    assert [block.bytes(4, 8) for block in rows_way] == [88, 80]


def test_auto_takes_the_fewer_bytes_and_column_on_a_tie():
    assert way_bytes(n_rows=1, n_cols=5, nnz=5, d=8, value_bytes=4) == (4 * 8 * 5, 4 * (8 + 5))
    assert choose_way("auto", 160, 52) == "row" and choose_way("auto", 52, 160) == "column"
    assert choose_way("auto", 100, 100) == "column"
    assert choose_way("row", 1, 1000) == "row" and choose_way("column", 1000, 1) == "column"
    with pytest.raises(InputError, match="unknown SDDMM strategy 'rows'; choose one of column, row, auto"):
        choose_way("rows", 1, 1)


def test_auto_never_moves_more_than_either_way_on_random_matrices(rng):
    for _ in range(20):
        n, m, ranks = int(rng.integers(5, 60)), int(rng.integers(5, 60)), int(rng.integers(2, 5))
        matrix = sp.random_array((n, m), density=float(rng.uniform(0.02, 0.4)), rng=rng, format="csr")
        rows, columns = even_rows(n, ranks), even_rows(m, ranks)
        d = int(rng.integers(1, 9))
        for rank in range(ranks):
            local = matrix[slice(*rows.range(rank))]
            totals = {}
            for strategy in ("column", "row", "auto"):
                diagonal, blocks = sddmm_blocks(local, columns, rank, d, 8, strategy)
                covered = np.concatenate([diagonal, *(block.entries for block in blocks)])
                assert np.array_equal(np.sort(covered), np.arange(local.nnz))  # every entry exactly once
                totals[strategy] = sum(block.bytes(d, 8) for block in blocks)
            assert totals["auto"] <= min(totals["column"], totals["row"])


def test_sddmm_blocks_refuse_a_width_below_one():
    with pytest.raises(InputError, match="d, the width of X and Y, must be a positive integer"):
        sddmm_blocks(sp.csr_array((2, 2)), even_rows(2, 1), 0, d=0, value_bytes=8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sampled_dots_equal_numpy_across_chunks(rng, dtype):
    x = rng.integers(-5, 6, (40, 7)).astype(dtype)
    y = rng.integers(-5, 6, (30, 7)).astype(dtype)
    n = CHUNK_ENTRIES + 123  # two chunks
    rows, cols = rng.integers(0, 40, n), rng.integers(0, 30, n)
    out = sampled_dots(x, y, rows, cols, np.empty(n, dtype))
    assert out.dtype == dtype and np.array_equal(out, (x[rows] * y[cols]).sum(axis=1))
    assert sampled_dots(x, y, rows[:0], cols[:0], np.empty(0, dtype)).size == 0
