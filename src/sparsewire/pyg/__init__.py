"""PyTorch Geometric models on several ranks, full batch, exactly (needs PyG; importing this starts MPI).

A PyG script gains four lines: :func:`distribute` its ``Data`` (each rank keeps its nodes' rows and a graph handle
that stands in for ``edge_index``), :func:`convert` its model (``GCNConv``, ``SAGEConv``, ``GATConv`` and
``BatchNorm1d`` become distributed subclasses with the same parameters), take the loss with :func:`cross_entropy`
(the mean over every rank's nodes) and sum the gradients with :func:`allreduce_gradients`. The model's forward,
``model(data.x, data.edge_index)``, is unchanged. ``docs/pyg.md`` shows a script before and after.

- :mod:`~sparsewire.pyg.graph`: :func:`from_pyg`, :func:`distribute`, :class:`DistributedGraph`, :class:`LocalData`.
- :mod:`~sparsewire.pyg.layers`: :func:`convert` and the layers it swaps in.
- :mod:`~sparsewire.pyg.training`: losses, accuracy, gradients and initial weights over the ranks.
"""

from sparsewire.pyg.graph import DistributedGraph, EdgeWeights, LocalData, PygGraph, distribute, from_pyg, to_pyg
from sparsewire.pyg.layers import SUPPORTED, BatchNorm1d, GATConv, GCNConv, SAGEConv, convert
from sparsewire.pyg.training import (
    accuracy,
    all_reduce_sum,
    allreduce_gradients,
    broadcast_parameters,
    cross_entropy,
    mean_loss,
    nll_loss,
    rank,
    world_size,
)

__all__ = [
    "SUPPORTED",
    "BatchNorm1d",
    "DistributedGraph",
    "EdgeWeights",
    "GATConv",
    "GCNConv",
    "LocalData",
    "PygGraph",
    "SAGEConv",
    "accuracy",
    "all_reduce_sum",
    "allreduce_gradients",
    "broadcast_parameters",
    "convert",
    "cross_entropy",
    "distribute",
    "from_pyg",
    "mean_loss",
    "nll_loss",
    "rank",
    "to_pyg",
    "world_size",
]
