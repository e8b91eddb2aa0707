"""A graph's nodes handed to the ranks for training: the adjacency distributed by rows and normalised for the model,
each rank's features, labels and split masks, from a whole graph on one rank or from an OGB dataset's cache read by
rows on each rank."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, native_transport
from sparsewire.distributed.matrix import distribute
from sparsewire.exec import ExecOptions, exec_options
from sparsewire.gnn.data import GraphData
from sparsewire.gnn.propagate import GraphOperator, gcn_normalize, mean_normalize
from sparsewire.io.ogb import OgbCache, open_ogb
from sparsewire.io.readers import nonfinite_entries
from sparsewire.partition import even_rows

__all__ = ["LocalGraph", "distribute_graph", "open_ogb_cache", "rows_from_cache"]


@dataclass
class LocalGraph:
    """This rank's part of a graph: the operator, its nodes' features and labels, split masks."""

    operator: GraphOperator
    features: torch.Tensor  # sparse COO when at most a quarter of the entries are nonzero
    labels: torch.Tensor
    masks: dict[str, torch.Tensor]
    totals: dict[str, int]
    classes: int
    n: int


def distribute_graph(
    comm: MPI.Comm,
    data: GraphData | OgbCache | None,
    model: str = "gcn",
    *,
    partition="even",
    root: int = 0,
    imbalance: float = 0.03,
    dtype: torch.dtype = torch.float32,
    options: ExecOptions | None = None,
    allow_nonfinite: bool = False,
    **option_keywords,
) -> LocalGraph:
    """Collective. Hand every rank its nodes: ``data`` on ``root`` (None elsewhere), or an OGB dataset's cache
    (:func:`sparsewire.io.ogb.open_ogb`, the same on every rank), from which each rank reads only its own rows
    (equal rows: ``partition="even"``), so that no rank holds the whole graph. The adjacency
    is distributed by rows and normalised for the model (GCN: ``D^-1/2 (A + I) D^-1/2``; SAGE: the
    mean over in-neighbours; GAT: kept, its pattern is what the attention plans read), features as
    rows of ``dtype`` (float32 by default, as PyTorch trains; float64 for results that must match
    another float64 code to 1e-6), sparse COO when mostly zero.
    The model :func:`train` builds, and every propagation's plan, take the features' dtype.

    ``options`` (:class:`~sparsewire.exec.options.ExecOptions`; by default the torch backend on the CPU
    with one thread), with any of its fields given as keywords (``strategy=``, ``topology=``,
    ``threads=``, ``transport=``, ``backend=``, ``device=``, ...) replacing the options', say how
    the propagations are planned and run; the topology also guides the partitioner.

    NaN or infinite values in the adjacency or the features are refused (training on them gives
    nonsense and still reports an accuracy) unless ``allow_nonfinite``; so is an empty training
    split.

    ``threads`` (default 1) are the executor's threads per rank; give PyTorch the same
    (``torch.set_num_threads``, as ``sparsewire gcn --threads`` does).

    ``transport``: how the propagations' messages move, ``mpi`` or ``torch`` (torch.distributed).
    ``backend`` and ``device``: what runs the propagations' local products (and the first layer's
    sparse input): ``torch`` (default: PyTorch's sparse CSR products on ``device``, ``cpu`` or
    ``cuda``/``cuda:N``, where the features, labels and masks are put and :func:`train` puts the
    model; one thread pool, PyTorch's) or ``numpy`` (the compiled kernels; see :func:`sparsewire.distributed.spmm.plan_spmm`). In
    ``bench/peers/gnn.py`` (float32, 2-core machine) their epochs take the same time, and the torch
    backend's process never loads Numba and LLVM: at P = 1 its peak memory was 0.77-0.87x that of
    PyG's process, the NumPy backend's 0.90-1.11x. The transfer calibration says which messages
    are staged through host memory (:mod:`sparsewire.wire.paths`)."""
    rank = comm.Get_rank()
    options = exec_options(
        options or ExecOptions(backend="torch", threads=1, transport=native_transport(comm)), **option_keywords
    )
    from_cache = comm.allgather(isinstance(data, OgbCache))
    problem = options if isinstance(options, str) else None
    if problem:
        pass  # named below, on every rank
    elif dtype not in (torch.float32, torch.float64):
        problem = f"dtype must be torch.float32 or torch.float64 (got {dtype})"
    elif model not in ("gcn", "sage", "gat"):
        problem = f"unknown model {model!r}; choose gcn, sage or gat"
    elif any(from_cache) and not all(from_cache):
        problem = "an OGB cache is read by rows on every rank: pass it on every rank (open_ogb on each)"
    elif all(from_cache) and partition != "even":
        problem = (
            f"an OGB cache is read by equal rows on each rank, not partition={partition!r}; for another partitioner "
            "load the whole graph on one rank with load_ogb"
        )
    elif not all(from_cache) and rank == root and data is None:
        problem = f"rank {root} must pass the graph data"
    elif not all(from_cache) and rank == root:
        problem = _data_problem(data, allow_nonfinite)
    agree_on_error(comm, problem)
    if all(from_cache):
        matrix, features, labels, masks, totals, classes = rows_from_cache(comm, data, allow_nonfinite)
    else:
        matrix, features, labels, masks, totals, classes = _scattered(comm, data, partition, root, options, imbalance)
    values = np.float32 if dtype == torch.float32 else np.float64
    if model == "gcn":
        matrix = gcn_normalize(matrix, values)
    elif model == "sage":
        matrix = mean_normalize(matrix, values)
    operator = GraphOperator(matrix, options)
    on = getattr(operator.kernels, "device", "cpu")  # cuda names this rank's GPU there
    return LocalGraph(
        operator,
        _feature_tensor(features, dtype).to(on),
        torch.from_numpy(labels).to(on),
        {name: torch.from_numpy(mask).to(on) for name, mask in masks.items()},
        totals,
        classes,
        matrix.shape[0],
    )


def open_ogb_cache(
    comm: MPI.Comm,
    directory: str,
    *,
    undirected: bool = False,
    add_inverse_edge: bool | None = None,
    split: str | None = None,
    root: int = 0,
    progress=None,
) -> OgbCache:
    """Collective. The cache of the OGB dataset in ``directory`` on every rank (:func:`sparsewire.io.ogb.open_ogb`):
    ``root`` converts the raw files if no cache matches them, then every rank opens the cache (the directory must
    be one every rank sees, as the raw files). A damaged dataset is the same error on every rank. Pass the result
    to :func:`distribute_graph`, which reads each rank's rows alone. ``progress``: as :func:`open_ogb`'s, on ``root``."""
    options = {"undirected": undirected, "add_inverse_edge": add_inverse_edge, "split": split}
    problem = None
    if comm.Get_rank() == root:
        try:
            open_ogb(directory, **options, progress=progress)
        except Exception as error:  # (InputError, or an OSError writing the cache) raised on every rank below
            problem = error
    agree_on_error(comm, problem)
    return open_ogb(directory, **options)


def _scattered(comm: MPI.Comm, data: GraphData | None, partition, root: int, options: ExecOptions, imbalance: float):
    """The whole graph on ``root``, partitioned there and scattered: the matrix and this rank's rows."""
    rank, size = comm.Get_rank(), comm.Get_size()
    matrix = distribute(
        comm, data.adjacency if rank == root else None, partition, root=root, topology=options.topology, imbalance=imbalance
    )
    offsets = matrix.row_partition.offsets
    order = np.arange(matrix.shape[0]) if matrix.row_order is None else matrix.row_order  # position -> node id
    pieces = None
    if rank == root:
        masks = {}
        for name, nodes in (("train", data.train_idx), ("val", data.val_idx), ("test", data.test_idx)):
            mask = np.zeros(data.n, bool)
            mask[nodes] = True
            masks[name] = mask
        pieces = []
        for p in range(size):
            nodes = order[offsets[p] : offsets[p + 1]]
            pieces.append(
                (_rows_of(data.features, nodes), data.labels[nodes], {name: mask[nodes] for name, mask in masks.items()})
            )
        header = ({name: int(mask.sum()) for name, mask in masks.items()}, data.classes)
    else:
        header = None
    totals, classes = comm.bcast(header, root=root)
    features, labels, masks = comm.scatter(pieces, root=root)
    return matrix, features, labels, masks, totals, classes


def rows_from_cache(comm: MPI.Comm, cache: OgbCache, allow_nonfinite: bool = False):
    """Collective. This rank's equal share of rows read from ``cache``, no rank holding more: the distributed
    adjacency, this rank's features, labels and split masks (``train``, ``val``, ``test``), each split's total and
    the classes. NaN or infinite values and an empty training split are one error on every rank."""
    rank, size = comm.Get_rank(), comm.Get_size()
    offsets = even_rows(cache.n, size).offsets
    start, stop = int(offsets[rank]), int(offsets[rank + 1])
    rows = cache.rows(start, stop)
    split = cache.split()
    problem = None
    if not allow_nonfinite:
        for what, values in (("adjacency", rows.adjacency), ("features", rows.features)):
            problem = problem or _nonfinite_problem(what, values, start)
    if problem is None and split["train"].size == 0:
        problem = "the training split is empty: no labelled node to train on"
    agree_on_error(comm, problem)
    masks = {}
    for name, part in (("train", "train"), ("val", "valid"), ("test", "test")):
        nodes = split[part]
        mask = np.zeros(stop - start, bool)
        mask[nodes[(nodes >= start) & (nodes < stop)] - start] = True
        masks[name] = mask
    totals = {name: int(split[part].size) for name, part in (("train", "train"), ("val", "valid"), ("test", "test"))}
    matrix = distribute(comm, rows.adjacency, row_offsets=offsets)
    return matrix, rows.features, rows.labels, masks, totals, int(cache.meta["classes"])


def _nonfinite_problem(what: str, values, first_row: int = 0) -> str | None:
    """The line that refuses NaN or infinite ``values`` (sparse or dense, rows from ``first_row``), or None."""
    if isinstance(values, np.ndarray):
        bad = ~np.isfinite(values)
        count = int(bad.sum())
        first = int(np.flatnonzero(bad.any(axis=1))[0]) if count else 0
    else:
        values = sp.csr_array(values)
        count = nonfinite_entries(values)
        first_entry = np.flatnonzero(~np.isfinite(values.data))[0] if count else 0
        first = int(np.searchsorted(values.indptr, first_entry, side="right") - 1)
    if not count:
        return None
    return (
        f"the {what} holds {count} NaN or infinite values (the first in row {first_row + first}); fix the data, "
        "or pass allow_nonfinite=True if you mean it"
    )


def _data_problem(data: GraphData, allow_nonfinite: bool) -> str | None:
    """What makes ``data`` unfit to train on, or None."""
    if not allow_nonfinite:
        for what, values in (("adjacency", data.adjacency), ("features", data.features)):
            problem = _nonfinite_problem(what, values)
            if problem:
                return problem
    if len(data.train_idx) == 0:
        return "the training split is empty: no labelled node to train on; give train_idx (or a graph with training nodes)"
    return None


def _rows_of(features: sp.csr_array | np.ndarray, nodes: np.ndarray) -> sp.csr_array | np.ndarray:
    """Rows ``nodes`` of the features, sparse or dense as they are."""
    return features[nodes] if isinstance(features, np.ndarray) else sp.csr_array(features[nodes])


def _feature_tensor(features: sp.csr_array | np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Sparse COO (coalesced, ``dtype``) when at most a quarter of the entries are stored, else dense."""
    if isinstance(features, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32 if dtype == torch.float32 else np.float64))
    features = sp.csr_array(features, dtype=np.float32 if dtype == torch.float32 else np.float64)
    if features.nnz > features.shape[0] * features.shape[1] / 4:
        return torch.from_numpy(np.ascontiguousarray(features.toarray()))
    coo = sp.coo_array(features)
    coo.sum_duplicates()
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    return torch.sparse_coo_tensor(indices, torch.from_numpy(coo.data), features.shape, is_coalesced=True, check_invariants=False)
