"""Memory of reading an OGB dataset per rank (``open_ogb_cache`` + each rank's rows) against reading it whole, as a
full-batch PyG process must hold it, at the ogbn-arxiv scale, in one run.

    .venv/bin/python bench/peers/ogb_memory.py [--directory /tmp/ogbn_arxiv_scale] [--ranks 1,2,4]
        [--nodes 169343] [--edges 1166243] [--features 128] [--classes 40] [--layout csv]

The graph: an OGB-layout dataset written by this script if ``--directory`` holds none (R-MAT-like random edges,
standard-normal float32 features, random labels, a 54/18/28 split as ogbn-arxiv's; ``--layout binary`` writes
papers100M's ``data.npz`` instead of the CSV set), converted once into the cache (its time printed). Then
``mpiexec -n P`` reads it: each rank measures, by the kernel's own counters (``/proc/self/status``: ``VmHWM``, reset
through ``/proc/self/clear_refs``, less ``VmRSS`` before), its peak resident memory while it reads its rows, against
its share of the graph (the bytes of its rows' adjacency with its values, features and labels); the bound is 1.5 x
the share (the rows are read from the files, not mapped). Beside it, one process reads the whole graph
(``load_ogb``, undirected), what a PyG process holds before training (plus its ``edge_index`` of int64 pairs,
counted but not made). Writes bench/results/ogb_memory.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, job, run_json  # noqa: E402


def _status() -> dict[str, int]:
    """VmHWM and VmRSS of this process, bytes, from the kernel."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux 4.0 and later)


def write_dataset(directory: Path, args) -> None:
    """An OGB-layout dataset at the asked scale (see the module docstring)."""
    import gzip

    rng = np.random.default_rng(0)
    n, e = args.nodes, args.edges
    skewed = np.minimum((rng.pareto(1.2, (2, e)) * n / 50).astype(np.int64), n - 1)  # hubs, as in citation graphs
    edges = np.where(rng.random((2, e)) < 0.5, skewed, rng.integers(0, n, (2, e)))
    features = rng.standard_normal((n, args.features)).astype(np.float32)
    labels = rng.integers(0, args.classes, n)
    order = rng.permutation(n)
    parts = np.split(order, [int(0.54 * n), int(0.72 * n)])
    raw = directory / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    def csv(path: Path, rows: np.ndarray, fmt: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wb", compresslevel=1) as handle:
            np.savetxt(handle, rows, fmt=fmt, delimiter=",")

    if args.layout == "binary":
        np.savez(
            raw / "data.npz", edge_index=edges, num_nodes_list=np.array([n]), num_edges_list=np.array([e]), node_feat=features
        )
        np.savez(raw / "node-label.npz", node_label=labels.astype(np.float32))
    else:
        csv(raw / "edge.csv.gz", edges.T, "%d")
        csv(raw / "num-node-list.csv.gz", np.array([[n]]), "%d")
        csv(raw / "num-edge-list.csv.gz", np.array([[e]]), "%d")
        csv(raw / "node-feat.csv.gz", features, "%.6f")
        csv(raw / "node-label.csv.gz", labels[:, None], "%d")
    for name, nodes in zip(("train", "valid", "test"), parts):
        csv(directory / "split" / "time" / f"{name}.csv.gz", np.sort(nodes)[:, None], "%d")


def _held(graph) -> int:
    """Bytes of a graph's (or rows') adjacency with its values, features and labels."""
    adjacency = graph.adjacency
    return sum(a.nbytes for a in (adjacency.indptr, adjacency.indices, adjacency.data, graph.features, graph.labels))


def worker(directory: str) -> None:
    """One rank: its peak while reading its rows, and its share."""
    from mpi4py import MPI

    from sparsewire.gnn import open_ogb_cache
    from sparsewire.partition import even_rows

    comm = MPI.COMM_WORLD
    cache = open_ogb_cache(comm, directory, undirected=True)
    start, stop = even_rows(cache.n, comm.Get_size()).range(comm.Get_rank())
    before = _status()
    _reset_peak()
    rows = cache.rows(start, stop)
    after = _status()
    record = {"rank": comm.Get_rank(), "rows": stop - start, "share": _held(rows), "peak": after["VmHWM"] - before["VmRSS"]}
    records = comm.gather(record)
    if comm.Get_rank() == 0:
        print(json.dumps(records))


def whole(directory: str) -> None:
    """One process reading the whole graph (load_ogb), as a full-batch PyG process holds it."""
    from sparsewire.gnn import load_ogb

    before = _status()
    _reset_peak()
    graph = load_ogb(directory, undirected=True)
    after = _status()
    peak = after["VmHWM"] - before["VmRSS"]
    print(json.dumps({"peak": peak, "held": _held(graph), "edge_index_bytes": 16 * graph.adjacency.nnz}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--directory", default="/tmp/ogbn_arxiv_scale")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--nodes", type=int, default=169_343)
    parser.add_argument("--edges", type=int, default=1_166_243)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=40)
    parser.add_argument("--layout", choices=["csv", "binary"], default="csv")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--whole", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    if args.whole:
        return whole(args.whole)
    from sparsewire.io import is_ogb_directory, open_ogb

    directory = Path(args.directory)
    if not is_ogb_directory(directory):
        started = time.perf_counter()
        write_dataset(directory, args)
        print(f"wrote {directory} ({args.layout}) in {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    cache = open_ogb(directory, undirected=True)
    print(f"cache {cache.path}: {cache.n} nodes, {cache.meta['entries']} entries ({time.perf_counter() - started:.1f} s)")
    reference = run_json([sys.executable, __file__, "--whole", str(directory)])
    mib = 2**20
    print(f"whole graph in one process: peak {reference['peak'] / mib:.1f} MiB for {reference['held'] / mib:.1f} MiB held"
          f" (+{reference['edge_index_bytes'] / mib:.1f} MiB as PyG's int64 edge_index)")  # fmt: skip
    print(f"{'P':>2} {'rank':>4} {'rows':>7} {'share MiB':>9} {'peak MiB':>8} {'peak/share':>10} {'peak/whole':>10}")
    results = {"whole": reference, "runs": {}}
    worst = 0.0
    for ranks in (int(p) for p in args.ranks.split(",")):
        records = run_json(job(ranks, __file__, "--worker", str(directory)))
        results["runs"][ranks] = records
        for r in records:
            ratio = r["peak"] / r["share"]
            worst = max(worst, ratio)
            print(f"{ranks:>2} {r['rank']:>4} {r['rows']:>7} {r['share'] / mib:>9.1f} {r['peak'] / mib:>8.1f} {ratio:>10.2f} "
                  f"{r['peak'] / reference['peak']:>10.2f}")  # fmt: skip
    print(f"worst peak / share: {worst:.2f} (bound 1.5)")
    out = ROOT / "bench" / "results" / "ogb_memory.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
