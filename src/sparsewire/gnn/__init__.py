"""Distributed full-graph GNN training on the SpMM plans (needs PyTorch; importing this starts MPI).

- :mod:`~sparsewire.gnn.propagate`: :class:`GraphOperator` and the differentiable
  :func:`propagate` (forward ``A X``, backward ``A^T G`` on the transposed plan), GCN and mean
  normalisation, :func:`scatter_rows` / :func:`gather_rows`.
- :mod:`~sparsewire.gnn.attention`: :class:`AttentionPlan` and the differentiable :func:`attend`, each
  destination's softmax-aggregate merged exactly from partials on the minimal-byte plan.
- :mod:`~sparsewire.gnn.layers`: :class:`GCNConv`, :class:`SAGEConv`, :class:`GATConv` (PyG's signatures),
  the model :class:`GNN`, dropout masks from global node ids.
- :mod:`~sparsewire.gnn.data`: Planetoid ``.npz`` graphs, OGB node-property datasets and synthetic features.
- :mod:`~sparsewire.gnn.distribute`: :func:`distribute_graph` (a whole graph on one rank, or an OGB cache read by
  rows on each).
- :mod:`~sparsewire.gnn.train`: :func:`train` (full batch, Adam).
"""

from sparsewire.gnn.attention import AttentionPlan, attend
from sparsewire.gnn.data import GraphData, load_graph, load_ogb, load_planetoid, synthetic_graph
from sparsewire.gnn.distribute import LocalGraph, distribute_graph, open_ogb_cache
from sparsewire.gnn.layers import GNN, GATConv, GCNConv, SAGEConv, hash_dropout
from sparsewire.gnn.propagate import GraphOperator, gather_rows, gcn_normalize, mean_normalize, propagate, scatter_rows
from sparsewire.gnn.train import TrainResult, evaluate, train

__all__ = [
    "AttentionPlan",
    "GATConv",
    "GNN",
    "GCNConv",
    "GraphData",
    "GraphOperator",
    "LocalGraph",
    "SAGEConv",
    "TrainResult",
    "distribute_graph",
    "attend",
    "evaluate",
    "gather_rows",
    "gcn_normalize",
    "hash_dropout",
    "load_graph",
    "load_ogb",
    "open_ogb_cache",
    "load_planetoid",
    "mean_normalize",
    "propagate",
    "scatter_rows",
    "synthetic_graph",
    "train",
]
