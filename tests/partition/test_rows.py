"""Row partitions."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.partition import RowPartition, balanced_nnz, even_rows, partition


@pytest.mark.parametrize("n, parts", [(10, 3), (7, 7), (2, 4), (0, 3), (1000, 32), (5, 1)])
def test_even_rows_is_floor_formula(n, parts):
    partition = even_rows(n, parts)
    assert partition.offsets.tolist() == [p * n // parts for p in range(parts + 1)]
    assert partition.counts().sum() == n and partition.n_parts == parts


def test_owner_and_ranges():
    partition = RowPartition(np.array([0, 0, 3, 5]))  # rank 0 owns nothing
    assert partition.owner(np.array([0, 2, 3, 4])).tolist() == [1, 1, 2, 2]
    assert partition.owner(4) == 2
    assert partition.range(0) == (0, 0) and partition.range(1) == (0, 3)


def test_balanced_nnz_balances(rng):
    weights = rng.integers(0, 50, 1000)
    weights[10] = 5000  # one heavy row
    partition = balanced_nnz(weights, 8)
    assert partition.offsets[0] == 0 and partition.offsets[-1] == 1000
    assert np.all(np.diff(partition.offsets) >= 0)
    loads = np.add.reduceat(weights, partition.offsets[:-1]) * (np.diff(partition.offsets) > 0)
    # Every boundary is at the first row reaching its target, so no part exceeds target + one row.
    assert loads.max() <= weights.sum() / 8 + weights.max()
    assert balanced_nnz(np.zeros(5, int), 2) == even_rows(5, 2)


def test_rectangular_partitions_columns_separately():
    matrix = sp.csr_array(np.ones((6, 10)))
    rows, cols = partition(matrix, 4, "even").partitions
    assert rows == even_rows(6, 4) and cols == even_rows(10, 4)
    square_rows, square_cols = partition(sp.csr_array(np.ones((6, 6))), 4, "nnz").partitions
    assert square_rows is square_cols


@pytest.mark.parametrize("offsets", [[1, 2], [0, 3, 2], [0]])
def test_invalid_offsets_rejected(offsets):
    with pytest.raises(InputError):
        RowPartition(np.array(offsets))


def test_fractional_offsets_are_refused_not_truncated():
    with pytest.raises(InputError, match=r"whole numbers of rows \(got float64 \[0. , 2.5, 5. \]\)"):
        RowPartition(np.array([0, 2.5, 5]))
    for bad in ([0, np.nan, 5], [0, np.inf], ["0", "5"]):
        with pytest.raises(InputError, match="whole numbers of rows"):
            RowPartition(np.array(bad))
    # whole numbers in a float array are fine (JSON and NumPy arithmetic give them)
    assert RowPartition(np.array([0.0, 2.0, 5.0])).offsets.tolist() == [0, 2, 5]


def test_bad_arguments():
    with pytest.raises(InputError, match="at least 1"):
        even_rows(5, 0)
    with pytest.raises(InputError, match="unknown partition"):
        partition(sp.csr_array((3, 3)), 2, "bogus")
