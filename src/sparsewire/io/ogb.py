"""OGB node-property datasets read from their raw files: no ``ogb`` package (its processed files do not load under
torch 2.6 and later) and no download.

The two layouts OGB's own readers take (``ogb/io/read_graph_raw.py``, ``ogb/nodeproppred/dataset.py``):

- CSV (ogbn-arxiv, ogbn-products): ``raw/edge.csv.gz`` (``source,target`` a line), ``raw/num-node-list.csv.gz``,
  ``raw/num-edge-list.csv.gz``, ``raw/node-feat.csv.gz`` (a row of floats a node), ``raw/node-label.csv.gz``;
- binary (ogbn-papers100M): ``raw/data.npz`` (``edge_index`` 2 x E, ``num_nodes_list``, ``num_edges_list``,
  ``node_feat``) and ``raw/node-label.npz`` (``node_label``, NaN for an unlabelled node);

with the split in ``split/NAME/{train,valid,test}.csv.gz`` (a node id a line). Where OGB's ``master.csv`` says
``add_inverse_edge`` (ogbn-products, ogbn-proteins), each stored edge ``(s, t)`` also stands for ``(t, s)``.

The graph is converted once into a cache of NumPy arrays beside the raw files (:func:`open_ogb`), so that a rank
reads only its rows (:meth:`OgbCache.rows`), as DGL and PyG partition offline; the cache is rebuilt when a raw file
or an option changes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.sizes import check_fits
from sparsewire.errors import InputError
from sparsewire.io.archives import open_archive

__all__ = ["OgbCache", "OgbRows", "open_ogb", "is_ogb_directory", "INVERSE_EDGE_DATASETS"]

#: The node-property datasets whose stored edges stand for both directions (OGB's ``master.csv``, add_inverse_edge).
INVERSE_EDGE_DATASETS = ("ogbn_products", "ogbn_proteins")
#: Bumped when the cache's arrays change meaning.
CACHE_VERSION = 1
_SPLIT_PARTS = ("train", "valid", "test")


def is_ogb_directory(path: str | os.PathLike) -> bool:
    """Not collective. Whether ``path`` is a dataset directory in OGB's raw layout (a ``raw/`` folder with
    ``edge.csv.gz`` or ``data.npz``)."""
    raw = Path(path) / "raw"
    return (raw / "edge.csv.gz").is_file() or (raw / "data.npz").is_file()


@dataclass(frozen=True)
class OgbRows:
    """Rows ``start:stop`` of an OGB graph: the adjacency's rows (row i holds the in-neighbours j of node i, an edge
    j -> i, as PyG aggregates at the target; the value is the edge's multiplicity), the features and the labels
    (-1 for an unlabelled node)."""

    start: int
    adjacency: sp.csr_array
    features: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True)
class OgbCache:
    """An OGB graph converted once into NumPy ``.npy`` arrays (:func:`open_ogb`), read by rows."""

    path: Path
    meta: dict

    @property
    def n(self) -> int:
        """Number of nodes."""
        return int(self.meta["nodes"])

    def _read(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``start:stop`` of the cache's array ``name``, read from the file into a new array: no memory map, so
        the process holds the rows alone and not the pages it read them from."""
        with open(self.path / f"{name}.npy", "rb") as handle:
            header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            shape, fortran, dtype = header[np.lib.format.read_magic(handle)](handle)
            if fortran:
                raise InputError(f"{self.path}: {name}.npy is not in row order; delete the cache to convert again")
            stop = shape[0] if stop is None else stop
            row = int(np.prod(shape[1:], dtype=np.int64))
            handle.seek(start * row * dtype.itemsize, os.SEEK_CUR)
            values = np.fromfile(handle, dtype=dtype, count=(stop - start) * row)
        if values.size != (stop - start) * row:
            raise InputError(f"{self.path}: {name}.npy is cut short; delete the cache to convert again")
        return values.reshape((stop - start, *shape[1:]))

    def rows(self, start: int, stop: int) -> OgbRows:
        """Not collective. Nodes ``start:stop``: only their bytes are read from the cache."""
        if not 0 <= start <= stop <= self.n:
            raise InputError(f"rows {start}:{stop} are outside the graph's 0:{self.n}")
        indptr = self._read("indptr", start, stop + 1)
        first, last = int(indptr[0]), int(indptr[-1])
        indices = self._read("indices", first, last)
        weights = self._read("weights", first, last) if self.meta["weighted"] else np.ones(last - first, np.float32)
        adjacency = sp.csr_array((weights, indices, indptr - first), shape=(stop - start, self.n))
        return OgbRows(start, adjacency, self._read("features", start, stop), self._read("labels", start, stop))

    def split(self) -> dict[str, np.ndarray]:
        """Not collective. The split's node ids: ``train``, ``valid`` and ``test``."""
        return {part: self._read(part) for part in _SPLIT_PARTS}


def open_ogb(
    directory: str | os.PathLike,
    *,
    undirected: bool = False,
    add_inverse_edge: bool | None = None,
    split: str | None = None,
    progress=None,
) -> OgbCache:
    """Not collective. The OGB node-property dataset in ``directory`` (module docstring), converted into its cache
    ``directory/sparsewire-cache/KEY`` on first use (written whole into a temporary folder, then renamed: a run
    stopped half-way leaves no cache, and processes that convert at once keep the first).

    The adjacency: an edge ``(s, t)`` is row ``t``'s entry in column ``s``; ``add_inverse_edge`` (None: the
    dataset's own flag, by the directory's name, :data:`INVERSE_EDGE_DATASETS`) adds ``(t, s)`` for each as OGB's
    reader does; ``undirected`` makes it PyG's ``to_undirected`` (both directions, each pair once), as the arxiv
    examples train. Else an edge stored twice has weight 2, as PyG's ``edge_index`` counts it twice.
    ``split``: the folder under ``split/`` (needed only where there are several). ``progress(text)``, where given,
    hears when a conversion starts and how long it took (seconds at the ogbn-arxiv scale)."""
    root = Path(directory)
    if not is_ogb_directory(root):
        raise InputError(
            f"{root} is not an OGB dataset directory: it needs raw/edge.csv.gz (CSV layout) or raw/data.npz (binary "
            "layout), as OGB's download unpacks them (e.g. dataset/ogbn_arxiv)"
        )
    if add_inverse_edge is None:
        add_inverse_edge = root.resolve().name in INVERSE_EDGE_DATASETS
    split_name = _split_name(root, split)
    binary = (root / "raw" / "data.npz").is_file()
    sources = _source_files(root, binary, split_name)
    key = {
        "version": CACHE_VERSION,
        "undirected": bool(undirected),
        "add_inverse_edge": bool(add_inverse_edge),
        "split": split_name,
        "files": {str(path.relative_to(root)): [path.stat().st_size, path.stat().st_mtime_ns] for path in sources},
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    cache = root / "sparsewire-cache" / digest
    meta_path = cache / "meta.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("key") == key:
                return OgbCache(cache, meta)
        except (OSError, ValueError):
            pass  # a damaged cache: converted again below
        shutil.rmtree(cache, ignore_errors=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{digest}.", suffix=".partial", dir=cache.parent))
    started = time.perf_counter()
    if progress is not None:
        progress(f"{root}: converting the raw files into {cache} (once)")
    try:
        meta = _convert(root, building, binary, split_name, undirected=undirected, add_inverse_edge=add_inverse_edge)
        meta["key"] = key
        (building / "meta.json").write_text(json.dumps(meta, indent=1))
        for path in building.iterdir():  # on disk before the rename makes them the cache
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        try:
            os.rename(building, cache)
        except OSError:  # another process finished first: its cache is the same
            if not meta_path.is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    if progress is not None:
        progress(f"{root}: converted in {time.perf_counter() - started:.1f} s")
    return OgbCache(cache, json.loads(meta_path.read_text()))


def _split_name(root: Path, split: str | None) -> str:
    folder = root / "split"
    names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if split is not None:
        if split not in names:
            raise InputError(f"{root}: no split {split!r} under split/ (there are: {', '.join(names) or 'none'})")
        return split
    if len(names) != 1:
        raise InputError(
            f"{root}: {'no split folder under split/' if not names else 'several splits: ' + ', '.join(names)}; "
            + ("give one with split=NAME" if names else "OGB's node-property datasets ship split/NAME/train.csv.gz")
        )
    return names[0]


def _source_files(root: Path, binary: bool, split: str) -> list[Path]:
    raw = root / "raw"
    if binary:
        files = [raw / "data.npz", raw / "node-label.npz"]
    else:
        names = ("edge", "num-node-list", "num-edge-list", "node-feat", "node-label")
        files = [raw / f"{name}.csv.gz" for name in names]
    files += [root / "split" / split / f"{part}.csv.gz" for part in _SPLIT_PARTS]
    missing = [str(path.relative_to(root)) for path in files if not path.is_file()]
    if missing:
        raise InputError(f"{root}: {', '.join(missing)} missing; the dataset is incomplete (unpack OGB's download again)")
    return files


def _read_csv(path: Path, dtype, columns: int | None = None) -> np.ndarray:
    """A gzipped CSV of numbers without a header (OGB's raw files), 2-D, strictly parsed."""
    try:
        text = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error):
        raise InputError(f"{path}: not a valid gzip file; the dataset is damaged (unpack OGB's download again)") from None
    try:
        values = np.loadtxt(io.BytesIO(text), delimiter=",", dtype=dtype, ndmin=2)
    except ValueError as error:
        reason = str(error).split("; use `usecols`")[0]
        raise InputError(f"{path}: {reason}; the file is damaged (unpack OGB's download again)") from None
    if columns is not None and values.size and values.shape[1] != columns:
        raise InputError(f"{path}: {values.shape[1]} columns a line, expected {columns}; the file is damaged")
    return values


def _convert(root: Path, out: Path, binary: bool, split: str, *, undirected: bool, add_inverse_edge: bool) -> dict:
    """Read the raw files, check them, and write the cache's arrays into ``out``; the cache's meta."""
    raw = root / "raw"
    if binary:
        edges, n, features, labels = _read_binary(raw)
    else:
        edges = _read_csv(raw / "edge.csv.gz", np.int64, 2).T
        node_counts = _read_csv(raw / "num-node-list.csv.gz", np.int64, 1).ravel()
        edge_counts = _read_csv(raw / "num-edge-list.csv.gz", np.int64, 1).ravel()
        _one_graph(raw, node_counts, edge_counts, edges.shape[1])
        n = int(node_counts[0])
        features = _read_csv(raw / "node-feat.csv.gz", np.float32)
        labels = _read_csv(raw / "node-label.csv.gz", np.float64)
    edges = np.asarray(edges, dtype=np.int64).reshape(2, -1)
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        raise InputError(f"{raw}: an edge names a node outside 0..{n - 1}; the edge list is damaged")
    if features.shape[0] != n:
        raise InputError(f"{raw}: {features.shape[0]} rows of node features for {n} nodes; the features are damaged")
    if labels.ndim == 2 and labels.shape[1] != 1:
        raise InputError(f"{raw}: {labels.shape[1]} labels a node (a multi-label task); only one class a node is supported")
    labels = labels.reshape(-1)
    if labels.shape[0] != n:
        raise InputError(f"{raw}: {labels.shape[0]} labels for {n} nodes; the labels are damaged")
    known = np.isfinite(labels)
    if np.any(labels[known] < 0) or np.any(labels[known] != np.floor(labels[known])):
        raise InputError(f"{raw}: a label is negative or not a whole number; labels are class ids 0, 1, ...")
    labels = np.where(known, labels, -1).astype(np.int64)
    check_fits(n, n, 2 * edges.shape[1], str(raw))
    targets, sources = edges[1], edges[0]
    if add_inverse_edge or undirected:
        targets, sources = np.concatenate([targets, sources]), np.concatenate([sources, targets])
    adjacency = sp.csr_array((np.ones(targets.size, np.float32), (targets, sources)), shape=(n, n))
    adjacency.sum_duplicates()  # (a stored multi-edge counts as often as it is stored, as in PyG's edge_index)
    if undirected:
        adjacency.data[:] = 1  # to_undirected: each pair once
    weighted = bool(adjacency.nnz and adjacency.data.max() != 1)
    index_type = np.int32 if n < 2**31 else np.int64
    arrays = {"indptr": adjacency.indptr.astype(np.int64), "indices": adjacency.indices.astype(index_type)}
    if weighted:
        arrays["weights"] = adjacency.data
    arrays.update(features=np.ascontiguousarray(features, dtype=np.float32), labels=labels)
    for part in _SPLIT_PARTS:
        nodes = _read_csv(root / "split" / split / f"{part}.csv.gz", np.int64, 1).ravel()
        if nodes.size and (nodes.min() < 0 or nodes.max() >= n):
            raise InputError(f"{root}/split/{split}/{part}.csv.gz: a node outside 0..{n - 1}; the split is damaged")
        if np.any(labels[nodes] < 0):
            raise InputError(f"{root}/split/{split}/{part}.csv.gz: a node without a label; the split is damaged")
        arrays[part] = nodes
    for name, values in arrays.items():
        np.save(out / f"{name}.npy", values, allow_pickle=False)
    classes = int(labels.max(initial=-1)) + 1
    meta = {"nodes": n, "entries": int(adjacency.nnz), "features": int(features.shape[1]), "classes": classes}
    return {**meta, "weighted": weighted}


def _one_graph(raw: Path, node_counts: np.ndarray, edge_counts: np.ndarray, edges: int) -> None:
    if node_counts.size != 1 or edge_counts.size != 1:
        raise InputError(
            f"{raw}: {node_counts.size} graphs; a node-property dataset holds one (graph-property datasets are not supported)"
        )
    if int(edge_counts[0]) != edges:
        said = int(edge_counts[0])
        raise InputError(f"{raw}: num-edge-list says {said} edges but the edge list holds {edges}; a file is damaged")


def _read_binary(raw: Path) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """``raw/data.npz`` and ``raw/node-label.npz`` (ogbn-papers100M's layout)."""
    arrays = {}
    files = (("data.npz", ("edge_index", "num_nodes_list", "num_edges_list", "node_feat")), ("node-label.npz", ("node_label",)))
    for name, keys in files:
        path = raw / name
        try:
            with open_archive(path, f"OGB's {name}") as archive:
                missing = [key for key in keys if key not in archive.files]
                if missing:
                    raise InputError(f"{path} lacks {', '.join(missing)}; OGB's {name} holds {', '.join(keys)}")
                arrays.update({key: archive[key] for key in keys})
        except InputError:
            raise
        except Exception as error:  # noqa: BLE001 - a damaged archive: zipfile, zlib and NumPy each raise their own
            raise InputError(f"cannot read {path} ({type(error).__name__}: {error}); unpack OGB's download again") from None
    edges = arrays["edge_index"]
    if edges.ndim != 2 or edges.shape[0] != 2 or not np.issubdtype(edges.dtype, np.integer):
        raise InputError(f"{raw / 'data.npz'}: edge_index is {edges.dtype} {edges.shape}, expected integers 2 x E")
    node_counts, edge_counts = arrays["num_nodes_list"].ravel(), arrays["num_edges_list"].ravel()
    _one_graph(raw, node_counts, edge_counts, edges.shape[1])
    features = arrays["node_feat"]
    if features.ndim != 2:
        raise InputError(f"{raw / 'data.npz'}: node_feat is {features.shape}, expected nodes x features")
    return edges, int(node_counts[0]), features, arrays["node_label"].astype(np.float64)
