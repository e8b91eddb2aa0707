"""OGB node-property datasets from their raw files (sparsewire.io.ogb, sparsewire.gnn.load_ogb): the CSV and the
binary layouts read into the same arrays, OGB's add_inverse_edge and PyG's to_undirected as they define them, the
cache reused, rebuilt when a file changes and never left half-written, rows read alone, damaged files refused."""

from __future__ import annotations

import gzip
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).parent))
from ogb_files import random_dataset, write_ogb  # noqa: E402

from sparsewire.errors import InputError  # noqa: E402
from sparsewire.io import ogb  # noqa: E402
from sparsewire.io.ogb import open_ogb  # noqa: E402


def _whole(cache) -> ogb.OgbRows:
    return cache.rows(0, cache.n)


def _dense(matrix) -> list[list[float]]:
    return sp.csr_array(matrix).toarray().tolist()


def test_a_hand_made_graph_reads_as_ogb_and_pyg_define_its_edges(tmp_path):
    # 4 nodes; 0->1 stored twice, a self-loop on 3, 1->2 and 2->1 both stored
    edges = np.array([[0, 0, 3, 1, 2], [1, 1, 3, 2, 1]])
    features = np.arange(8, dtype=np.float32).reshape(4, 2)
    labels = np.array([2, 0, 1, 2])
    split = {"train": np.array([0, 1]), "valid": np.array([2]), "test": np.array([3])}
    root = write_ogb(tmp_path / "ogbn_arxiv", edges, features, labels, split)
    directed = _whole(open_ogb(root))
    # row = target, column = source (PyG aggregates at edge_index[1]); a stored multi-edge counts twice
    assert _dense(directed.adjacency) == [[0, 0, 0, 0], [2, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    assert directed.features.tolist() == features.tolist() and directed.labels.tolist() == [2, 0, 1, 2]
    assert {k: v.tolist() for k, v in open_ogb(root).split().items()} == {"train": [0, 1], "valid": [2], "test": [3]}
    # to_undirected: both directions, each pair once (the self-loop once)
    assert _dense(_whole(open_ogb(root, undirected=True)).adjacency) == [[0, 1, 0, 0], [1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]]
    # add_inverse_edge: OGB's reader interleaves (t, s) after each (s, t), multi-edges and self-loops included
    inverse = _whole(open_ogb(root, add_inverse_edge=True)).adjacency
    assert _dense(inverse) == [[0, 2, 0, 0], [2, 0, 2, 0], [0, 2, 0, 0], [0, 0, 0, 2]]
    # the flag by the dataset's name, as OGB's master.csv gives it
    products = write_ogb(tmp_path / "ogbn_products", edges, features, labels, split, split_name="sales_ranking")
    assert _dense(_whole(open_ogb(products)).adjacency) == _dense(inverse)


def _ogb_reference(edges: np.ndarray, n: int, add_inverse_edge: bool) -> sp.csr_array:
    """OGB's read_csv_graph_raw for add_inverse_edge (repeat each column, swap the odd copies), then row = target."""
    if add_inverse_edge:
        doubled = np.repeat(edges, 2, axis=1)
        doubled[0, 1::2], doubled[1, 1::2] = doubled[1, 0::2], doubled[0, 0::2]
        edges = doubled
    return sp.csr_array((np.ones(edges.shape[1]), (edges[1], edges[0])), shape=(n, n))


@pytest.mark.parametrize("binary", [False, True], ids=["csv", "binary"])
def test_random_graphs_equal_the_references_in_both_layouts(tmp_path, rng, binary):
    pairs, features, labels, split = random_dataset(rng)
    n = features.shape[0]
    if binary:
        labels = labels.astype(np.float64)
        labels[rng.choice(n, 5, replace=False)] = np.nan  # papers100M's unlabelled nodes
        split = {k: v[np.isfinite(labels[v])] for k, v in split.items()}
    root = write_ogb(
        tmp_path / "ogbn_papers100M" if binary else tmp_path / "ogbn_arxiv", pairs, features, labels, split, binary=binary
    )
    for add_inverse_edge in (False, True):
        got = _whole(open_ogb(root, add_inverse_edge=add_inverse_edge))
        assert _dense(got.adjacency) == _dense(_ogb_reference(pairs, n, add_inverse_edge)), add_inverse_edge
    # PyG's to_undirected (edge_index and its flip, coalesced): the set of pairs either way, each once
    pairs_either_way = {(int(s), int(t)) for s, t in pairs.T} | {(int(t), int(s)) for s, t in pairs.T}
    targets, sources = np.array(sorted((t, s) for s, t in pairs_either_way)).T
    expected = sp.csr_array((np.ones(targets.size), (targets, sources)), shape=(n, n))
    assert _dense(_whole(open_ogb(root, undirected=True)).adjacency) == _dense(expected)
    got = _whole(open_ogb(root))
    assert got.features.dtype == np.float32 and np.array_equal(got.features, features)
    assert got.labels.tolist() == np.where(np.isfinite(labels), labels, -1).astype(np.int64).tolist()
    assert all(np.array_equal(open_ogb(root).split()[k], v) for k, v in split.items())
    # rows read alone equal the whole graph's rows
    for _ in range(5):
        start = int(rng.integers(0, n))
        stop = int(rng.integers(start, n + 1))
        rows = open_ogb(root).rows(start, stop)
        assert _dense(rows.adjacency) == _dense(got.adjacency[start:stop])
        assert np.array_equal(rows.features, got.features[start:stop]) and np.array_equal(rows.labels, got.labels[start:stop])


def test_the_binary_and_csv_layouts_of_one_graph_give_the_same_arrays(tmp_path, rng):
    pairs, features, labels, split = random_dataset(rng)
    csv, binary = (
        _whole(open_ogb(write_ogb(tmp_path / name, pairs, features, labels, split, binary=name == "b"), undirected=True))
        for name in ("c", "b")
    )
    assert _dense(csv.adjacency) == _dense(binary.adjacency)
    assert np.array_equal(csv.features, binary.features) and np.array_equal(csv.labels, binary.labels)


def test_the_cache_is_reused_rebuilt_when_a_file_changes_and_never_left_half_written(tmp_path, rng, monkeypatch):
    pairs, features, labels, split = random_dataset(rng)
    root = write_ogb(tmp_path / "ogbn_arxiv", pairs, features, labels, split)
    said = []
    first = open_ogb(root, progress=said.append)
    assert said[0] == f"{root}: converting the raw files into {first.path} (once)" and said[1].endswith(" s"), said
    open_ogb(root, progress=said.append)
    assert len(said) == 2  # reused: nothing to say
    converted = []
    original = ogb._convert
    monkeypatch.setattr(ogb, "_convert", lambda *a, **k: converted.append(1) or original(*a, **k))
    assert open_ogb(root).path == first.path and converted == []  # reused
    assert open_ogb(root, undirected=True).path != first.path and converted == [1]  # another option, another cache
    # a raw file rewritten: converted again into a new cache
    features[0, 0] += 1
    write_ogb(root, pairs, features, labels, split)
    os.utime(root / "raw" / "node-feat.csv.gz", ns=(1, 1))  # (in case the rewrite kept the size and the time)
    again = open_ogb(root)
    assert again.path != first.path and converted == [1, 1] and again.rows(0, 1).features[0, 0] == features[0, 0]
    # a damaged meta file: converted again in place
    (again.path / "meta.json").write_text("{")
    assert open_ogb(root).path == again.path and converted == [1, 1, 1]
    # a conversion that fails leaves no cache and no temporary folder
    (root / "raw" / "node-label.csv.gz").write_bytes(gzip.compress(b"1\n2\n"))
    with pytest.raises(InputError, match="2 labels for 60 nodes"):
        open_ogb(root)
    leftovers = [p.name for p in (root / "sparsewire-cache").iterdir()]
    assert not any(name.endswith(".partial") for name in leftovers), leftovers
    assert len(leftovers) == 3  # the three finished caches only


def _break(root: Path, name: str, text: bytes | None = None, raw_bytes: bytes | None = None) -> None:
    (root / name).write_bytes(raw_bytes if raw_bytes is not None else gzip.compress(text))


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("raw/edge.csv.gz", None, "not a valid gzip file"),
        ("raw/edge.csv.gz", b"0,1\n2\n", "number of columns changed from 2 to 1"),
        ("raw/edge.csv.gz", b"0,1\n0,x\n", "could not convert string 'x'"),
        ("raw/edge.csv.gz", b"0,1\n0,99\n", "an edge names a node outside 0..3"),
        ("raw/num-edge-list.csv.gz", b"7\n", "num-edge-list says 7 edges but the edge list holds 2"),
        ("raw/num-node-list.csv.gz", b"4\n4\n", "2 graphs; a node-property dataset holds one"),
        ("raw/node-feat.csv.gz", b"1,2\n3,4\n", "2 rows of node features for 4 nodes"),
        ("raw/node-label.csv.gz", b"0,1\n1,0\n0,0\n1,1\n", "2 labels a node (a multi-label task)"),
        ("raw/node-label.csv.gz", b"0\n1\n-2\n1\n", "a label is negative or not a whole number"),
        ("split/time/train.csv.gz", b"0\n9\n", "a node outside 0..3; the split is damaged"),
    ],
)
def test_a_damaged_file_is_one_error_naming_it(tmp_path, name, content, expected):
    root = write_ogb(
        tmp_path / "d",
        np.array([[0, 1], [1, 2]]),
        np.ones((4, 2), np.float32),
        np.array([0, 1, 0, 1]),
        {"train": np.array([0]), "valid": np.array([1]), "test": np.array([2])},
    )
    _break(root, name, content, None if content is not None else b"not gzip")
    with pytest.raises(InputError, match=re.escape(expected)) as caught:
        open_ogb(root)
    assert str(root / name) in str(caught.value) or str(root / "raw") in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_files_and_splits_are_named(tmp_path):
    with pytest.raises(InputError, match="is not an OGB dataset directory: it needs raw/edge.csv.gz"):
        open_ogb(tmp_path)
    split = {"train": np.array([0]), "valid": np.array([1]), "test": np.array([2])}
    root = write_ogb(tmp_path / "d", np.array([[0], [1]]), np.ones((3, 1), np.float32), np.array([0, 1, 0]), split)
    (root / "raw" / "node-feat.csv.gz").unlink()
    with pytest.raises(InputError, match=r"raw/node-feat.csv.gz missing; the dataset is incomplete"):
        open_ogb(root)
    root = write_ogb(tmp_path / "e", np.array([[0], [1]]), np.ones((3, 1), np.float32), np.array([0, 1, 0]), split)
    write_ogb(root, np.array([[0], [1]]), np.ones((3, 1), np.float32), np.array([0, 1, 0]), split, split_name="other")
    with pytest.raises(InputError, match="several splits: other, time; give one with split=NAME"):
        open_ogb(root)
    assert open_ogb(root, split="other").split()["train"].tolist() == [0]
    with pytest.raises(InputError, match="no split 'nope' under split/ \\(there are: other, time\\)"):
        open_ogb(root, split="nope")
    with pytest.raises(InputError, match="rows 2:9 are outside the graph's 0:3"):
        open_ogb(root, split="time").rows(2, 9)


def test_the_gcn_command_trains_on_an_ogb_directory(tmp_path, rng):
    import json

    from conftest import run_cli

    pairs, features, labels, split = random_dataset(rng, n=80, edges=400, width=6, classes=3)
    root = write_ogb(tmp_path / "ogbn_arxiv", pairs, features, labels, split)
    told = run_cli(["gcn", str(root), "--symmetrize", "--epochs", "1"])
    assert told.returncode == 0 and "converting the raw files into" in told.stderr, told.stderr
    done = run_cli(["gcn", str(root), "--symmetrize", "--epochs", "3", "--dtype", "float64", "--json"])
    assert done.returncode == 0 and "converting" not in done.stderr, done.stderr  # the cache of the first run
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["history"]) == 3 and all(np.isfinite(entry["loss"]) for entry in report["history"])
    from sparsewire.gnn import load_graph

    graph = load_graph(str(root), symmetrize=True)
    assert (graph.n, graph.classes, graph.features.shape) == (80, 3, (80, 6)) and graph.name == "ogbn_arxiv"
    assert _dense(graph.adjacency) == _dense(graph.adjacency.T)  # to_undirected
