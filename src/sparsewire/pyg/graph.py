"""A PyTorch Geometric graph on the ranks: its ``Data`` checked whole (:func:`from_pyg`), then split by rows
(:func:`distribute`) into this rank's node attributes and the graph handle (:class:`DistributedGraph`) that the
converted layers take where PyG's take ``edge_index``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, native_transport, problem_from, world
from sparsewire.distributed.matrix import DistributedMatrix
from sparsewire.distributed.matrix import distribute as distribute_matrix
from sparsewire.errors import InputError
from sparsewire.exec import ExecOptions, exec_options
from sparsewire.gnn import GraphData, GraphOperator, gcn_normalize, mean_normalize
from sparsewire.gnn.distribute import rows_from_cache
from sparsewire.io.ogb import OgbCache
from sparsewire.pyg.halo import Halo, through_halo

__all__ = ["PygGraph", "DistributedGraph", "EdgeWeights", "LocalData", "from_pyg", "to_pyg", "distribute", "halo_hook"]

_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}
_EDGE_INDEX_FIX = "coalesce it first (torch_geometric.utils.coalesce)"
#: The handle's own attributes (any other is a layer reading edge_index outside propagate).
_OWN_ATTRIBUTES = frozenset(
    {"matrix", "comm", "weighted", "options", "operators", "_pattern", "_halo", "symmetric", "symmetric_pattern"}
)


@dataclass
class PygGraph:
    """A whole graph on one rank, checked: what :func:`distribute` splits.

    Attributes:
        num_nodes: n.
        adjacency: n x n CSR, ``A[i, j]`` = the weight of the edge j -> i (PyG's ``edge_index = (j, i)``; 1 without
            edge weights); rows are targets, as in PyG's ``adj_t``.
        weighted: whether ``edge_weight`` was given (else every stored entry is 1).
        node_attributes: every node-level tensor by name (``x``, ``y``, the masks, ...), first dimension n.
        edge_attributes: names of the edge-level tensors that are not distributed (all but ``edge_index`` and
            ``edge_weight``).
    """

    num_nodes: int
    adjacency: sp.csr_array
    weighted: bool
    node_attributes: dict[str, torch.Tensor]
    edge_attributes: tuple[str, ...] = ()


def from_pyg(data=None, *, allow_nonfinite: bool = False, **tensors) -> PygGraph:
    """Not collective. A PyG ``Data`` (or its tensors as keywords: ``x=``, ``edge_index=``, ``y=``, ``edge_weight=``,
    ``num_nodes=``, masks and other node attributes) checked and turned into a :class:`PygGraph`.

    ``edge_index`` (2, E) integer, edge j -> i in column (j, i), every id in [0, n); duplicate edges are refused
    (PyG's GAT and mean aggregation count a duplicate twice, its softmax twice: coalesce first); NaN or infinite
    node features or edge weights are refused unless ``allow_nonfinite``. Every error is one
    :class:`~sparsewire.errors.InputError` naming the tensor and the fix."""
    if data is not None and tensors:
        raise InputError(f"give a PyG Data or its tensors as keywords, not both (got Data and {sorted(tensors)})")
    if data is not None:
        if not hasattr(data, "items") or not hasattr(data, "is_node_attr"):
            raise InputError(f"from_pyg takes a torch_geometric.data.Data (got {type(data).__name__})")
        num_nodes = data.num_nodes
        tensors = dict(data.items())
        node_keys = {key for key, value in tensors.items() if isinstance(value, torch.Tensor) and data.is_node_attr(key)}
    else:
        num_nodes = tensors.pop("num_nodes", None)
        edge_index = tensors.get("edge_index")
        if num_nodes is None:
            sizes = [v.shape[0] for k, v in tensors.items() if k not in ("edge_index", "edge_weight") and hasattr(v, "shape")]
            num_nodes = sizes[0] if sizes else (int(edge_index.max()) + 1 if edge_index is not None and edge_index.numel() else 0)
        node_keys = {k for k, v in tensors.items() if k not in ("edge_index", "edge_weight") and isinstance(v, torch.Tensor)}
    edge_index = tensors.get("edge_index")
    if not isinstance(edge_index, torch.Tensor):
        raise InputError(f"the graph has no edge_index tensor (got {type(edge_index).__name__}); give edge_index=(2, E)")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise InputError(
            f"edge_index must be an integer tensor of shape (2, E) (got {tuple(edge_index.shape)} {edge_index.dtype}); "
            "PyG's COO layout, edge j -> i in column (j, i)"
        )
    n = int(num_nodes)
    source, target = (edge_index[k].cpu().numpy().astype(np.int64) for k in (0, 1))
    if source.size and (min(source.min(), target.min()) < 0 or max(source.max(), target.max()) >= n):
        raise InputError(f"edge_index holds node ids outside [0, {n}) (the graph has {n} nodes); fix edge_index or num_nodes")
    weight = tensors.get("edge_weight")
    if weight is not None:
        if not isinstance(weight, torch.Tensor) or tuple(weight.shape) != (source.size,):
            shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else type(weight).__name__
            raise InputError(f"edge_weight must be a tensor of one value per edge, shape ({source.size},) (got {shape})")
        values = weight.detach().cpu().numpy().astype(np.float64)
        if not allow_nonfinite and not np.isfinite(values).all():
            raise InputError(
                f"edge_weight holds {int((~np.isfinite(values)).sum())} NaN or infinite values; fix them, or pass "
                "allow_nonfinite=True if you mean it"
            )
    else:
        values = np.ones(source.size)
    keys = target * n + source
    if np.unique(keys).size != keys.size:
        raise InputError(f"edge_index holds {keys.size - np.unique(keys).size} duplicate edges; {_EDGE_INDEX_FIX}")
    adjacency = sp.csr_array((values, (target, source)), shape=(n, n))
    adjacency.sort_indices()
    node_attributes = {}
    for key in sorted(node_keys - {"edge_index", "edge_weight"}):
        value = tensors[key]
        if value.dim() == 0 or value.shape[0] != n:
            raise InputError(f"node attribute {key!r} has shape {tuple(value.shape)}; its first dimension must be n = {n}")
        if key == "x" and value.is_floating_point() and not allow_nonfinite and not torch.isfinite(value).all():
            raise InputError(
                f"the features x hold {int((~torch.isfinite(value)).sum())} NaN or infinite values; fix the data, or "
                "pass allow_nonfinite=True if you mean it"
            )
        node_attributes[key] = value.detach().cpu()
    left = tuple(sorted(k for k, v in tensors.items() if isinstance(v, torch.Tensor) and k not in node_keys and
                        k not in ("edge_index", "edge_weight")))  # fmt: skip
    return PygGraph(n, adjacency, weight is not None, node_attributes, left)


def to_pyg(data: GraphData):
    """Not collective. sparsewire's :class:`~sparsewire.gnn.data.GraphData` (:func:`sparsewire.gnn.load_graph`:
    Planetoid, the shipped ``cora``, OGB) as a PyG ``Data``: ``x`` (dense float32), ``y``, ``edge_index`` (edge
    j -> i for ``A[i, j]``), ``train_mask``, ``val_mask``, ``test_mask``, for a script that trains on one process."""
    from torch_geometric.data import Data

    graph = _from_graph_data(data)
    coo = sp.coo_array(graph.adjacency)
    edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))
    attributes = dict(graph.node_attributes)
    attributes["x"] = attributes["x"].float()
    return Data(edge_index=edge_index, num_nodes=graph.num_nodes, **attributes)


def _from_graph_data(data: GraphData) -> PygGraph:
    """sparsewire's own :class:`~sparsewire.gnn.data.GraphData` (Planetoid, OGB) with PyG's attribute names."""
    features = data.features if isinstance(data.features, np.ndarray) else data.features.toarray()
    masks = {}
    for name, nodes in (("train_mask", data.train_idx), ("val_mask", data.val_idx), ("test_mask", data.test_idx)):
        masks[name] = torch.zeros(data.n, dtype=torch.bool)
        masks[name][torch.from_numpy(np.asarray(nodes, np.int64))] = True
    adjacency = sp.csr_array(data.adjacency, dtype=np.float64)
    adjacency.data[:] = 1.0
    attributes = {"x": torch.from_numpy(np.ascontiguousarray(features)), "y": torch.from_numpy(data.labels), **masks}
    return PygGraph(data.n, adjacency, False, attributes)


class EdgeWeights:
    """Stands in for ``edge_weight`` in the converted layers: the weights :func:`distribute` kept with the graph."""

    def __init__(self, graph: DistributedGraph):
        self.graph = graph

    def __repr__(self) -> str:
        return f"EdgeWeights(of {self.graph!r})"


class DistributedGraph:
    """A graph distributed by rows, standing in for ``edge_index`` in the layers :func:`~sparsewire.pyg.convert` swaps in.

    It holds this rank's rows of the adjacency (targets) and makes, on a layer's first use, the operator that layer
    needs: GCN's normalisation for its self-loop rule, the mean over in-neighbours, or the plain (weighted) adjacency
    for GAT and ``normalize=False``; each operator plans its first feature width and derives the others
    (:class:`~sparsewire.gnn.propagate.GraphOperator`). Collective where a layer's forward is: every rank runs the
    same layers in the same order.
    """

    def __init__(
        self, matrix: DistributedMatrix, weighted: bool, options: ExecOptions, symmetric: tuple[bool, bool] = (False, False)
    ):
        """Not collective. ``symmetric``: whether A's pattern, and A itself, equal their transposes (an undirected
        graph): the operators' backward then runs on their forward plans (:class:`~sparsewire.gnn.propagate.GraphOperator`)."""
        self.matrix, self.comm, self.weighted, self.options = matrix, matrix.comm, weighted, options
        self.symmetric_pattern, self.symmetric = symmetric
        local = matrix.local_rows
        if not weighted and local.dtype != np.float32 and np.all(local.data == 1):  # (an OGB cache's multi-edges count)
            local.data = np.ones(local.nnz, np.float32)  # (exact: half the bytes, and float32 operators share them)
        self._pattern = self._halo = None
        self.operators: dict[tuple, GraphOperator] = {}

    def __repr__(self) -> str:
        return (
            f"DistributedGraph({self.num_nodes} nodes, {self.matrix.nnz} edges, rank {self.comm.Get_rank()} of "
            f"{self.comm.Get_size()} holding {self.local_nodes} nodes)"
        )

    def __getattr__(self, name: str):
        # A layer treating the handle as an edge_index tensor (edge_index[1], .size(), ...) outside propagate.
        if name.startswith("__") or name in _OWN_ATTRIBUTES:
            raise AttributeError(name)
        raise _outside_propagate(f"edge_index.{name}")

    def __getitem__(self, key):
        raise _outside_propagate("edge_index[...]")

    @classmethod
    def __torch_function__(cls, function, types, args=(), kwargs=None):
        raise _outside_propagate(f"torch.{getattr(function, '__name__', function)}(edge_index)")

    @property
    def num_nodes(self) -> int:
        return self.matrix.shape[0]

    @property
    def local_nodes(self) -> int:
        return self.matrix.local_rows.shape[0]

    @property
    def node_ids(self) -> np.ndarray:
        """Original ids of this rank's nodes, in the order of its rows."""
        return self.matrix.row_ids()

    def weights(self, edge_weight) -> bool:
        """Not collective. Whether a layer given ``edge_weight`` propagates with the edge weights: None no, this
        graph's :class:`EdgeWeights` yes; a tensor is refused (its edges' order means nothing here)."""
        if edge_weight is None:
            return False
        if isinstance(edge_weight, EdgeWeights) and edge_weight.graph is self:
            if not self.weighted:
                raise InputError("this graph was distributed without edge weights; give data.edge_weight to distribute")
            return True
        raise InputError(
            f"a distributed graph takes its edge weights from distribute (pass data.edge_weight, the EdgeWeights of the "
            f"same graph), not a {type(edge_weight).__name__}: per-edge tensors are not split by rows"
        )

    def _matrix(self, weighted: bool) -> DistributedMatrix:
        if weighted or not self.weighted:
            return self.matrix
        if self._pattern is None:
            local = sp.csr_array(self.matrix.local_rows, copy=True)
            local.data[:] = 1.0
            m = self.matrix
            self._pattern = DistributedMatrix(m.comm, local, m.row_partition, m.col_partition, m.nnz, m.row_order, m.col_order)
        return self._pattern

    def operator(self, kind: str, dtype: torch.dtype, *, weighted: bool = False, self_loops: float = 1.0) -> GraphOperator:
        """Collective on first use of its arguments. The operator of ``kind``: ``gcn`` (``D^-1/2 (A + s I) D^-1/2``,
        self-loops of weight ``self_loops`` where a node has none, 0 for none; PyG's ``gcn_norm``), ``mean`` (the mean
        over in-neighbours, edge weights ignored) or ``adjacency`` (A itself, or its pattern)."""
        if dtype not in _NUMPY:
            raise InputError(f"features must be float32 or float64 tensors (got {dtype})")
        key = (kind, str(dtype), bool(weighted), float(self_loops))
        if key not in self.operators:
            matrix = self._matrix(weighted and kind != "mean")
            symmetric = self.symmetric or (self.symmetric_pattern and not (weighted and self.weighted and kind != "mean"))
            scale = np.ones(self.local_nodes) if symmetric else None  # (A^T = A: GCN's normalisation keeps it so)
            if kind == "gcn":
                matrix = gcn_normalize(matrix, _NUMPY[dtype], self_loops=self_loops)
            elif kind == "mean":
                scale = np.diff(matrix.local_rows.indptr) if symmetric else None  # (D^-1 P, P symmetric)
                matrix = mean_normalize(matrix, _NUMPY[dtype])
            elif kind != "adjacency":
                raise ValueError(f"unknown operator kind {kind!r}")
            self.operators[key] = GraphOperator(matrix, self.options, symmetric_scale=scale)
        return self.operators[key]

    def halo(self) -> Halo:
        """Collective on first use. The halo exchange that runs other message-passing layers (:mod:`sparsewire.pyg.halo`)."""
        if self._halo is None:
            self._halo = Halo(self._matrix(False))
        return self._halo

    @property
    def bytes(self) -> int:
        """Bytes delivered to this rank by every propagation, attention and halo fetch so far, forward and backward
        (MPI's receive statuses; under ``torchrun`` the sizes of the buffers received into)."""
        fetched = self._halo.bytes_received if self._halo is not None else 0
        return fetched + sum(op.bytes_forward + op.bytes_backward for op in self.operators.values())

    def close(self) -> None:
        """Collective. Free every operator's plans."""
        for operator in self.operators.values():
            operator.close()
        self.operators = {}


def halo_hook(module, inputs):
    """Not collective (the fetch it sets up is). PyG's ``propagate`` and ``edge_updater`` pre-hook that
    :func:`~sparsewire.pyg.convert` registers: inert on an ``edge_index``; on a :class:`DistributedGraph`, the layer's
    inputs through the graph's halo (:func:`~sparsewire.pyg.halo.through_halo`)."""
    edge_index, size, kwargs = inputs
    if not isinstance(edge_index, DistributedGraph):
        return None
    return through_halo(module, edge_index.halo(), size, kwargs)


def _outside_propagate(what: str) -> InputError:
    return InputError(
        f"a layer used {what} outside propagate: on a distributed graph a layer reads edge_index only through "
        "propagate (convert's layers, or a message-passing layer whose messages read node rows); compute it before "
        "distribute, or use a supported layer"
    )


class LocalData:
    """This rank's part of a graph, with PyG's attribute names: each node attribute's rows of this rank's nodes
    (``x``, ``y``, ``train_mask``, ...), ``edge_index`` (the :class:`DistributedGraph`), ``edge_weight``
    (:class:`EdgeWeights` where the graph had some), ``n_id`` (the original ids of the rows), ``num_nodes`` (of the
    whole graph)."""

    def __init__(self, graph: DistributedGraph, attributes: dict[str, torch.Tensor], edge_attributes: tuple[str, ...]):
        self.edge_index = graph
        self.edge_weight = EdgeWeights(graph) if graph.weighted else None
        self.n_id = torch.from_numpy(np.asarray(graph.node_ids, np.int64))
        self.num_nodes = graph.num_nodes
        self._attributes, self._edge_attributes = attributes, edge_attributes

    def __getattr__(self, name: str):
        attributes = self.__dict__.get("_attributes", {})
        if name in attributes:
            return attributes[name]
        if name in self.__dict__.get("_edge_attributes", ()):
            raise AttributeError(
                f"edge attribute {name!r} is not distributed: only edge_index and edge_weight travel with the graph"
            )
        if name.startswith("_"):
            raise AttributeError(name)
        return None  # as PyG's Data: an attribute the graph does not have (edge_attr of Cora) is None

    @property
    def num_features(self) -> int:
        """Not collective. The width of ``x`` (PyG's ``Data.num_features``), 0 without features."""
        x = self._attributes.get("x")
        return 0 if x is None else (1 if x.dim() == 1 else int(x.shape[1]))

    def keys(self) -> list[str]:
        """Not collective. The node attributes' names."""
        return sorted(self._attributes)

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Collective. The whole tensor on every rank from each rank's rows, row v = node v (as on one process)."""
        graph = self.edge_index
        parts = graph.comm.allgather(tensor.detach().cpu())
        ids = np.concatenate(graph.comm.allgather(graph.node_ids))
        whole = torch.empty((graph.num_nodes, *tensor.shape[1:]), dtype=tensor.dtype)
        whole[torch.from_numpy(np.asarray(ids, np.int64))] = torch.cat(parts)
        return whole

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={list(v.shape)}" for k, v in sorted(self._attributes.items()))
        return f"LocalData({shapes}, edge_index={self.edge_index!r})"


def distribute(
    data,
    *,
    partition="even",
    comm: MPI.Comm | None = None,
    root: int = 0,
    imbalance: float = 0.03,
    options: ExecOptions | None = None,
    allow_nonfinite: bool = False,
    **option_keywords,
) -> LocalData:
    """Collective. Split a graph by rows: each rank gets its nodes' rows of every node attribute and the handle
    (:class:`DistributedGraph`) that the converted layers take in place of ``edge_index``.

    ``data``: a PyG ``Data``, a :class:`PygGraph` (:func:`from_pyg`) or sparsewire's
    :class:`~sparsewire.gnn.data.GraphData` (:func:`sparsewire.gnn.load_ogb`, Planetoid), on ``root``; the other ranks
    may pass the same (a script that loads the dataset on every rank) or None: only ``root``'s is read. Or an OGB
    dataset's cache on every rank (:func:`sparsewire.gnn.open_ogb_cache`), from which each rank reads its own equal
    share of rows (``partition="even"``), so that no rank holds the whole graph.
    ``partition``: as :func:`sparsewire.distribute` (``even``, ``nnz``, ``metis``, ``rcm``, ...); a reordering one
    keeps the original ids in ``n_id``. ``options`` and the keywords (``strategy=``, ``threads=``, ``topology=``, ...)
    say how the propagations are planned and run (:class:`~sparsewire.exec.options.ExecOptions`; by default the torch
    backend on the CPU, one thread). ``comm``: MPI's world by default."""
    comm = world() if comm is None else comm
    rank = comm.Get_rank()
    options = exec_options(
        options or ExecOptions(backend="torch", threads=1, transport=native_transport(comm)), **option_keywords
    )
    from_cache = comm.allgather(isinstance(data, OgbCache))
    if any(from_cache):
        agree_on_error(comm, None if all(from_cache) and partition == "even" else (
            "an OGB cache is read by equal rows on every rank: pass it on every rank, with partition='even'"))  # fmt: skip
        return _from_cache(comm, data, options, allow_nonfinite)
    whole, problem = None, options if isinstance(options, str) else None
    if problem is None and rank == root:
        try:
            if data is None:
                raise InputError(f"rank {root} must pass the graph (a PyG Data)")
            whole = data if isinstance(data, PygGraph) else _from_graph_data(data) if isinstance(data, GraphData) else (
                from_pyg(data, allow_nonfinite=allow_nonfinite))  # fmt: skip
        except Exception as error:  # raised on every rank below
            problem = problem_from(error)
    agree_on_error(comm, problem)
    matrix = distribute_matrix(comm, whole.adjacency if rank == root else None, partition, root=root,
                               topology=options.topology, imbalance=imbalance)  # fmt: skip
    order = np.arange(matrix.shape[0]) if matrix.row_order is None else matrix.row_order  # position -> node id
    offsets = matrix.row_partition.offsets
    pieces = header = None
    if rank == root:
        pieces = []
        for p in range(comm.Get_size()):
            nodes = torch.from_numpy(np.asarray(order[offsets[p] : offsets[p + 1]], np.int64))
            pieces.append({key: value[nodes].clone() for key, value in whole.node_attributes.items()})
        header = (whole.weighted, whole.edge_attributes, _symmetry(whole.adjacency))
    weighted, edge_attributes, symmetric = comm.bcast(header, root=root)
    attributes = comm.scatter(pieces, root=root)
    graph = DistributedGraph(matrix, weighted, options, symmetric)
    on = torch.device(options.device)  # where the propagations run (cuda: this rank's GPU)
    return LocalData(graph, {key: value.to(on) for key, value in attributes.items()}, edge_attributes)


def _from_cache(comm: MPI.Comm, cache: OgbCache, options: ExecOptions, allow_nonfinite: bool) -> LocalData:
    """This rank's rows of an OGB dataset read from its cache, with PyG's attribute names."""
    matrix, features, labels, masks, _, _ = rows_from_cache(comm, cache, allow_nonfinite)
    on = torch.device(options.device)
    attributes = {"x": torch.from_numpy(np.ascontiguousarray(features)), "y": torch.from_numpy(labels)}
    attributes.update({f"{name}_mask": torch.from_numpy(mask) for name, mask in masks.items()})
    key = cache.meta.get("key", {})
    symmetric = bool(key.get("undirected") or key.get("add_inverse_edge"))  # (E and its reverse: equal counts both ways)
    graph = DistributedGraph(matrix, False, options, (symmetric, symmetric))
    return LocalData(graph, {k: v.to(on) for k, v in attributes.items()}, ())


def _symmetry(adjacency: sp.csr_array) -> tuple[bool, bool]:
    """Whether the pattern of ``adjacency``, and ``adjacency`` itself, equal their transposes."""
    pattern = sp.csr_array((np.ones(adjacency.nnz), adjacency.indices, adjacency.indptr), shape=adjacency.shape)
    if (pattern != pattern.T).nnz:
        return False, False
    return True, not (adjacency != adjacency.T).nnz
