"""Small datasets in OGB's raw layouts, written by the tests (no download): the CSV set of ogbn-arxiv and
ogbn-products, and the binary set of ogbn-papers100M."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def _csv(path: Path, rows: np.ndarray, number: str) -> None:
    rows = np.asarray(rows).reshape(len(rows), -1)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(format(value, number) for value in row) + "\n" for row in rows.tolist())
    path.write_bytes(gzip.compress(text.encode()))


def write_ogb(
    root: Path,
    edges: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    split: dict[str, np.ndarray],
    *,
    binary: bool = False,
    split_name: str = "time",
) -> Path:
    """The dataset ``root`` in OGB's layout: ``edges`` 2 x E (source, target), ``features`` n x F, ``labels``
    (NaN or -1: unlabelled; the CSV set writes -1 as OGB never does, so give the CSV set labelled nodes only),
    ``split`` with train/valid/test node ids."""
    raw = root / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    n = features.shape[0]
    if binary:
        np.savez_compressed(
            raw / "data.npz",
            edge_index=edges.astype(np.int64),
            num_nodes_list=np.array([n]),
            num_edges_list=np.array([edges.shape[1]]),
            node_feat=features.astype(np.float32),
        )
        np.savez_compressed(raw / "node-label.npz", node_label=np.where(labels < 0, np.nan, labels).astype(np.float32))
    else:
        _csv(raw / "edge.csv.gz", edges.T, "d")
        _csv(raw / "num-node-list.csv.gz", np.array([n]), "d")
        _csv(raw / "num-edge-list.csv.gz", np.array([edges.shape[1]]), "d")
        _csv(raw / "node-feat.csv.gz", features, ".9g")
        _csv(raw / "node-label.csv.gz", labels.astype(np.int64), "d")
    for part, nodes in split.items():
        _csv(root / "split" / split_name / f"{part}.csv.gz", np.asarray(nodes), "d")
    (root / "RELEASE_v1.txt").write_text("written by the sparsewire tests\n")
    return root


def random_dataset(rng: np.random.Generator, n: int = 60, edges: int = 200, width: int = 5, classes: int = 4):
    """A random graph with repeated edges and self-loops, integer-valued features, every node labelled, a split."""
    pairs = rng.integers(0, n, (2, edges))
    pairs[:, : edges // 10] = pairs[:, edges // 10 : 2 * (edges // 10)]  # some edges stored twice
    features = rng.integers(-3, 4, (n, width)).astype(np.float32)
    labels = rng.integers(0, classes, n)
    order = rng.permutation(n)
    split = {
        "train": np.sort(order[: n // 2]),
        "valid": np.sort(order[n // 2 : 3 * n // 4]),
        "test": np.sort(order[3 * n // 4 :]),
    }
    return pairs, features, labels, split
