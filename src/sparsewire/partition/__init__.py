"""Partitioning: which rank owns which rows of A (and of B in ``C = A @ B``), and in which order.

One entry point, :func:`partition` (every partitioner of ``PARTITIONERS``), and one result type,
:class:`Partitioning` (the orders and the :class:`RowPartition` s over them). ``rows`` holds the
contiguous row ranges (:class:`RowPartition`, :func:`even_rows`, :func:`balanced_nnz`);
``reorder`` the partitioners.
"""

from sparsewire.partition.reorder import PARTITIONERS, Partitioning, nnz_imbalance, partition
from sparsewire.partition.rows import RowPartition, balanced_nnz, even_rows

__all__ = ["PARTITIONERS", "Partitioning", "RowPartition", "balanced_nnz", "even_rows", "nnz_imbalance", "partition"]
