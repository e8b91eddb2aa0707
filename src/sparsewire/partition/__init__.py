"""Partitioning: which rank owns which rows of A (and of B in ``C = A @ B``), and in which order.

One entry point, :func:`partition` (every partitioner of ``PARTITIONERS``, and ``auto``, which picks
one of them by :func:`crossing_rows`), and one result type,
:class:`Partitioning` (the orders and the :class:`RowPartition` s over them). ``rows`` holds the
contiguous row ranges (:class:`RowPartition`, :func:`even_rows`, :func:`balanced_nnz`);
``reorder`` the partitioners.
"""

from sparsewire.partition.reorder import (
    AUTO_MIN_CUT,
    PARTITION_CHOICES,
    PARTITIONERS,
    Partitioning,
    choose_partitioning,
    crossing_rows,
    nnz_imbalance,
    partition,
)
from sparsewire.partition.rows import RowPartition, balanced_nnz, even_rows

__all__ = [
    "AUTO_MIN_CUT",
    "PARTITIONERS",
    "PARTITION_CHOICES",
    "Partitioning",
    "RowPartition",
    "balanced_nnz",
    "choose_partitioning",
    "crossing_rows",
    "even_rows",
    "nnz_imbalance",
    "partition",
]
