"""Graph data for node classification: the Planetoid ``.npz`` format, OGB's raw node-property datasets and
synthetic features.

:func:`load_graph` reads a Planetoid file (``../shared/data/gnn/MANIFEST.md``: CSR adjacency,
CSR bag-of-words features, labels with -1 for unlabelled nodes, the public split), an OGB dataset directory
(:func:`load_ogb`) or, for any matrix :func:`sparsewire.load_matrix` reads, makes seeded random features and labels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.sizes import check_derived_fits, check_fits
from sparsewire.errors import InputError
from sparsewire.io.archives import check_compressed, open_archive
from sparsewire.io.ogb import is_ogb_directory, open_ogb
from sparsewire.io.readers import load_matrix
from sparsewire.io.shipped import shipped_path

__all__ = ["GraphData", "load_planetoid", "load_ogb", "synthetic_graph", "load_graph", "PLANETOID_KEYS"]

PLANETOID_KEYS = (
    "n",
    "adj_indptr",
    "adj_indices",
    "feat_shape",
    "feat_indptr",
    "feat_indices",
    "feat_data",
    "labels",
    "train_idx",
    "val_idx",
    "test_idx",
)


@dataclass
class GraphData:
    """A graph for node classification (whole, on one rank).

    Attributes:
        name: where it came from.
        adjacency: n x n CSR; row i holds the in-neighbours j of node i (edge j -> i).
        features: n x F, CSR (row-normalised for Planetoid) or dense (OGB's float32 rows).
        labels: int64 (n,), class ids, -1 for unlabelled nodes.
        train_idx, val_idx, test_idx: node ids of the split (labelled nodes only).
        classes: number of classes.
    """

    name: str
    adjacency: sp.csr_array
    features: sp.csr_array | np.ndarray
    labels: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    classes: int

    @property
    def n(self) -> int:
        """Number of nodes."""
        return int(self.adjacency.shape[0])


def _row_normalise(features: sp.csr_array) -> sp.csr_array:
    sums = np.asarray(features.sum(axis=1)).ravel()
    scale = np.zeros_like(sums, dtype=np.float64)
    scale[sums != 0] = 1.0 / sums[sums != 0]
    return sp.csr_array(sp.diags_array(scale) @ features)


def load_planetoid(path: str, *, add_raw_self_loops: bool = False) -> GraphData:
    """Not collective. A Planetoid ``.npz`` (the format of ``../shared/data/gnn/MANIFEST.md``),
    features row-normalised as in Kipf and Welling. ``add_raw_self_loops`` puts back the raw
    graph's self-loops (GCN adds the remaining ones itself)."""
    try:
        with open_archive(path, "a Planetoid .npz file") as archive:
            missing = [key for key in PLANETOID_KEYS if key not in archive.files]
            if missing:
                raise InputError(f"{path} lacks {', '.join(missing)}; a Planetoid .npz holds {', '.join(PLANETOID_KEYS)}")
            arrays = {key: archive[key] for key in archive.files}
    except InputError:
        raise
    except Exception as error:  # noqa: BLE001 - a truncated or damaged file: zipfile, zlib and NumPy each raise their own
        raise InputError(f"cannot read {path} ({type(error).__name__}: {error}); give a Planetoid .npz file") from None
    try:
        n = int(arrays["n"])
        shape = tuple(int(v) for v in arrays["feat_shape"])
        check_fits(n, n, arrays["adj_indices"].size + arrays["feat_data"].size, path)
        adjacency = sp.csr_array((np.ones(arrays["adj_indices"].size), arrays["adj_indices"], arrays["adj_indptr"]), shape=(n, n))
        features = sp.csr_array(
            (arrays["feat_data"].astype(np.float64), arrays["feat_indices"], arrays["feat_indptr"]), shape=shape
        )
        # Indices out of range would be read outside the arrays by SciPy and the kernels.
        check_compressed(adjacency)
        check_compressed(features)
    except (ValueError, TypeError) as error:
        raise InputError(
            f"{path}: corrupt graph or feature arrays ({error}); give a Planetoid .npz file as its MANIFEST describes"
        ) from None
    if add_raw_self_loops and "adj_raw_self_loops" in arrays:
        loops = arrays["adj_raw_self_loops"].astype(np.int64)
        if loops.size and (loops.min() < 0 or loops.max() >= n):
            raise InputError(f"{path}: a raw self-loop names a node outside 0..{n - 1}")
        adjacency = sp.csr_array(adjacency + sp.csr_array((np.ones(loops.size), (loops, loops)), shape=(n, n)))
    labels = arrays["labels"].astype(np.int64)
    split = [arrays[key].astype(np.int64) for key in ("train_idx", "val_idx", "test_idx")]
    if labels.shape != (n,) or shape[0] != n:
        raise InputError(f"{path}: {n} nodes but labels {labels.shape} and features {shape}; the file is inconsistent")
    for name, nodes in zip(("train", "val", "test"), split):
        if nodes.size and (nodes.min() < 0 or nodes.max() >= n or np.any(labels[nodes] < 0)):
            raise InputError(f"{path}: the {name} split holds nodes outside 0..{n - 1} or without a label")
    classes = int(labels.max(initial=-1)) + 1
    check_fits(n, classes, n * classes, f"{path} (the output layer's {classes} classes: largest label + 1)")
    return GraphData(os.path.basename(path), adjacency, _row_normalise(features), labels, *split, classes)


def load_ogb(
    directory: str, *, undirected: bool = False, add_inverse_edge: bool | None = None, split: str | None = None
) -> GraphData:
    """Not collective. An OGB node-property dataset from its raw files (``directory`` holds ``raw/`` and ``split/``,
    as OGB unpacks ogbn-arxiv, ogbn-products or ogbn-papers100M), through its cache of NumPy arrays
    (:func:`sparsewire.io.ogb.open_ogb`, which says how edges become the adjacency: ``undirected`` is PyG's
    ``to_undirected``, as OGB's arxiv examples train). Features as stored (dense float32), labels -1 where a node
    has none, the split's ``train``/``valid``/``test`` nodes."""
    cache = open_ogb(directory, undirected=undirected, add_inverse_edge=add_inverse_edge, split=split)
    whole, split_nodes = cache.rows(0, cache.n), cache.split()
    classes = int(cache.meta["classes"])
    check_fits(cache.n, classes, cache.n * classes, f"{directory} (the output layer's {classes} classes: largest label + 1)")
    name = os.path.basename(os.path.normpath(directory))
    train, valid, test = (split_nodes[part] for part in ("train", "valid", "test"))
    return GraphData(name, whole.adjacency, whole.features, whole.labels, train, valid, test, classes)


def synthetic_graph(spec: str, features: int, classes: int, seed: int = 0, *, symmetrize: bool = False) -> GraphData:
    """Not collective. The matrix ``spec`` (a file or generator spec) as a graph with seeded
    standard-normal features (n x ``features``), uniform labels in [0, ``classes``), and a split of
    10% / 10% / 20% of the nodes (train / validation / test) by a seeded permutation."""
    if features < 1 or classes < 2:
        raise InputError(
            f"synthetic data needs --features random:F with F >= 1 and --classes C >= 2 (got F = {features}, C = {classes})"
        )
    adjacency = load_matrix(spec, symmetrize=symmetrize)
    if adjacency.shape[0] != adjacency.shape[1]:
        raise InputError(f"{spec} is {adjacency.shape[0]} x {adjacency.shape[1]}; a graph's adjacency is square")
    n = adjacency.shape[0]
    # The dense draw and its CSR copy (8 + 16 bytes an entry), before either is made.
    check_derived_fits(n * features * 24, f"--features random:{features} for {n} nodes", "use a smaller F")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    train, val, test = np.split(order, [n // 10, n // 5])[:3]
    test = test[: max(1, (2 * n) // 10)]
    dense = rng.standard_normal((n, features))
    labels = rng.integers(0, classes, n).astype(np.int64)
    return GraphData(spec, adjacency, sp.csr_array(dense), labels, np.sort(train), np.sort(val), np.sort(test), classes)


def load_graph(
    source: str, *, features: str | None = None, classes: int | None = None, seed: int = 0, symmetrize: bool = False
) -> GraphData:
    """Not collective. A Planetoid ``.npz`` when ``source`` is one (or ``cora``, the graph that ships with
    the package, :mod:`~sparsewire.io.shipped`) and ``features`` is None; an OGB dataset directory
    (:func:`load_ogb`, ``symmetrize`` as its ``undirected``); else the matrix ``source``
    with ``features = "random:F"`` and ``classes`` (:func:`synthetic_graph`)."""
    if features is None and source == "cora" and not os.path.exists(source):
        source = str(shipped_path("cora"))
    if features is None and is_ogb_directory(source):
        return load_ogb(source, undirected=symmetrize)
    if features is None:
        if not str(source).endswith(".npz"):
            raise InputError(f"{source} is not a Planetoid .npz; for another matrix give --features random:F --classes C")
        if symmetrize:
            raise InputError(f"{source}: --symmetrize applies to edge lists; a Planetoid graph is used as stored")
        return load_planetoid(source)
    if not features.startswith("random:"):
        raise InputError(f"--features {features!r}: give random:F (F random features per node)")
    try:
        width = int(features.split(":", 1)[1])
    except ValueError:
        raise InputError(f"--features {features!r}: F must be an integer, e.g. random:64") from None
    if classes is None:
        raise InputError("--features random:F needs --classes C")
    return synthetic_graph(source, width, classes, seed, symmetrize=symmetrize)
