"""PyG models converted by sparsewire.pyg against the same models in PyG full batch on one process, at the ogbn-arxiv
scale, in one run: epoch time, peak memory per rank, and the bytes of our plans against the halo exchange.

    .venv/bin/python bench/peers/pyg_models.py [--configs 1x2,2x1] [--models gcn,sage,gat] [--epochs 6] [--rounds 3]
        [--directory /tmp/ogbn_arxiv_scale] [--nodes 169343] [--edges 1166243] [--features 128] [--classes 40]

The graph: the OGB-layout dataset of ``ogb_memory.py`` (written there if ``--directory`` holds none: 169,343 nodes,
1,166,243 directed edges made undirected, 128 float32 features, 40 classes). Models, as PyG scripts write them:
``gcn`` (``GCNConv(128, 64, cached=True)``, ReLU, ``GCNConv(64, 40, cached=True)``), ``sage`` (``SAGEConv`` mean,
the same widths), ``gat`` (``GATConv(128, 16, heads=4)``, ELU, ``GATConv(64, 40, concat=False)``); no dropout,
Adam, float32, cross entropy over the training split.

PyG: one process, ``torch.set_num_threads(P x T)``, the graph read from a plain .npz (the process imports nothing of
ours), GCN and SAGE on a CSR ``adj_t`` (``torch.sparse_csr_tensor``: one ``torch.sparse.mm`` per propagation, as
PyG's OGB examples run them), GAT on ``edge_index`` (``GATConv`` has no fused path). Ours: ``mpiexec -n P``, T
threads per rank (the propagations and PyTorch), the same model class converted by ``sparsewire.pyg.convert``, each
rank reading its rows from the dataset's cache (``open_ogb_cache``), strategy ``auto``. Per run: the median seconds
of a training step (zero_grad, forward, loss, backward, Adam; ours the slowest rank, the gradient all-reduce
included) over the epochs after the first, and the peak resident memory per rank (``ru_maxrss``, the largest rank);
each the median over ``--rounds`` runs of each side, the sides taking turns (PyG, then ours at each layout). A rank
alone on its node has the C heap keep freed blocks, large ones too (``sparsewire._lib.heap.keep_freed_heap``); PyG
is also run with glibc told the same (``MALLOC_MMAP_MAX_=0``, ``MALLOC_TRIM_THRESHOLD_``: the "kept heap" columns),
so that the ratio without that setting can be read too.
At P = 2, ours is also run under strategy ``column`` (the halo exchange of SAR, DistGNN, CAGNET's 1D) for its bytes
per epoch. P x T above the cores oversubscribes the 2-core reference machine. Writes
bench/results/pyg_models.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, job, run_json  # noqa: E402
from gnn import peak_mib  # noqa: E402  (the GCN bench's memory probe)
from ogb_memory import write_dataset  # noqa: E402  (the arxiv-scale dataset)

HIDDEN, HEADS = 64, 4
#: glibc's environment for what keep_freed_heap sets by mallopt: every block from the heap, freed pages kept.
KEPT_HEAP = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}


def build(model: str, features: int, classes: int):
    """The model a PyG script writes (the same class on both sides)."""
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if model == "gcn":
                self.conv1, self.conv2 = GCNConv(features, HIDDEN, cached=True), GCNConv(HIDDEN, classes, cached=True)
            elif model == "sage":
                self.conv1, self.conv2 = SAGEConv(features, HIDDEN), SAGEConv(HIDDEN, classes)
            else:
                self.conv1 = GATConv(features, HIDDEN // HEADS, heads=HEADS)
                self.conv2 = GATConv(HIDDEN, classes, heads=1, concat=False)
            self.activation = F.elu if model == "gat" else F.relu

        def forward(self, x, edge_index):
            return self.conv2(self.activation(self.conv1(x, edge_index)), edge_index)

    torch.manual_seed(0)
    return Net()


def epochs_timed(step, epochs: int, barrier=None) -> float:
    times = []
    for _ in range(epochs):
        if barrier:
            barrier()
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return times


def pyg(path: str, model: str, threads: int, epochs: int) -> None:
    import scipy.sparse as sp
    import torch
    import torch.nn.functional as F

    assert "sparsewire" not in sys.modules, "the PyG process must not import sparsewire (its imports would count)"
    torch.set_num_threads(threads)
    saved = np.load(path)
    adjacency = sp.csr_array((saved["a_data"], saved["a_indices"], saved["a_indptr"]), shape=tuple(saved["a_shape"]))
    x, y, train = (torch.from_numpy(saved[k]) for k in ("features", "labels", "train_mask"))
    if model == "gat":
        coo = sp.coo_array(adjacency)
        graph = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))  # edge j -> i
    else:
        graph = torch.sparse_csr_tensor(torch.from_numpy(adjacency.indptr.astype(np.int64)),
                                        torch.from_numpy(adjacency.indices.astype(np.int64)),
                                        torch.ones(adjacency.nnz), size=adjacency.shape)  # fmt: skip
    net = build(model, x.shape[1], int(saved["classes"]))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(net(x, graph)[train], y[train]).backward()
        optimizer.step()

    times = epochs_timed(step, epochs)
    print(json.dumps({"seconds_per_epoch": float(np.median(times[1:])), "peak_mib_per_rank": peak_mib()}))


def ours(directory: str, model: str, threads: int, epochs: int, strategy: str) -> None:
    import torch
    from mpi4py import MPI

    import sparsewire.pyg as sw
    from sparsewire.gnn import open_ogb_cache

    torch.set_num_threads(threads)
    comm = MPI.COMM_WORLD
    cache = open_ogb_cache(comm, directory, undirected=True)
    data = sw.distribute(cache, threads=threads, strategy=strategy)
    net = sw.convert(build(model, data.x.shape[1], int(cache.meta["classes"])))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)

    def step() -> None:
        optimizer.zero_grad()
        sw.cross_entropy(net(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]).backward()
        sw.allreduce_gradients(net)
        optimizer.step()

    step()  # plans made (and GCN's normalisation), as PyG's first epoch caches its own
    before = data.edge_index.bytes
    times = epochs_timed(step, epochs, comm.Barrier)
    moved = comm.allreduce(data.edge_index.bytes - before) // epochs
    slowest = comm.allreduce(float(np.median(times[1:])), op=MPI.MAX)
    peak = comm.allreduce(peak_mib(), op=MPI.MAX)
    if comm.Get_rank() == 0:
        print(json.dumps({"seconds_per_epoch": slowest, "peak_mib_per_rank": peak, "bytes_per_epoch": int(moved)}))


def median_run(runs: list[dict]) -> dict:
    """Each measured field's median over the runs of one side (time and memory separately)."""
    return {key: float(np.median([run[key] for run in runs])) for key in runs[0]}


def export(directory: str, path: Path) -> None:
    """The dataset as a plain .npz for the PyG process (undirected, as ours reads it)."""
    import scipy.sparse as sp

    from sparsewire.gnn import load_ogb

    graph = load_ogb(directory, undirected=True)
    adjacency = sp.csr_array(graph.adjacency)
    mask = np.zeros(graph.n, bool)
    mask[graph.train_idx] = True
    np.savez(path, a_data=adjacency.data, a_indices=adjacency.indices, a_indptr=adjacency.indptr, a_shape=adjacency.shape,
             features=np.ascontiguousarray(graph.features, np.float32), labels=graph.labels, train_mask=mask,
             classes=graph.classes)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="1x2,2x1", help="ranks x threads (default: 1x2,2x1)")
    parser.add_argument("--models", default="gcn,sage,gat", help="of gcn, sage, gat (default: all)")
    parser.add_argument("--epochs", type=int, default=6, help="timed epochs per run (default: 6)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side, taking turns; medians (default: 3)")
    parser.add_argument("--directory", default="/tmp/ogbn_arxiv_scale", help="the OGB-layout dataset (written if absent)")
    parser.add_argument("--nodes", type=int, default=169343)
    parser.add_argument("--edges", type=int, default=1166243)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=40)
    parser.add_argument("--worker", nargs=5, metavar=("SIDE", "PATH", "MODEL", "THREADS", "STRATEGY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        side, path, model, threads, strategy = args.worker
        (ours if side == "ours" else pyg)(path, model, int(threads), args.epochs, *([strategy] if side == "ours" else []))
        return
    directory = Path(args.directory)
    if not (directory / "raw").is_dir():
        print(f"writing the dataset into {directory} ...", file=sys.stderr, flush=True)
        write_dataset(directory, SimpleNamespace(**vars(args), layout="csv"))
    plain = directory / "pyg_plain.npz"
    if not plain.exists():
        export(str(directory), plain)
    run_json(job(1, __file__, "--worker", "ours", directory, "gcn", 1, "auto", "--epochs", 2))  # the cache, once
    from sparsewire.profile import format_table

    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    results, rows = [], []
    epochs = ["--epochs", str(args.epochs)]
    for model in args.models.split(","):
        runs = {}  # (side, ranks, threads) -> the runs' JSON objects, the sides taking turns in every round
        for round_ in range(args.rounds):
            for ranks, threads in configs:
                cores = ranks * threads
                if len(runs.get(("pyg", cores, 1), [])) == round_:
                    print(f"{model}: PyG on {cores} thread(s), round {round_ + 1} ...", file=sys.stderr, flush=True)
                    worker = [sys.executable, __file__, *epochs, "--worker", "pyg", str(plain), model, str(cores), "-"]
                    runs.setdefault(("pyg", cores, 1), []).append(run_json(worker))
                    runs.setdefault(("pyg kept heap", cores, 1), []).append(run_json(worker, env=KEPT_HEAP))
                print(f"{model}: ours {ranks} x {threads}, round {round_ + 1} ...", file=sys.stderr, flush=True)
                mine = run_json(job(ranks, __file__, *epochs, "--worker", "ours", directory, model, threads, "auto"))
                runs.setdefault(("ours", ranks, threads), []).append(mine)
        for ranks, threads in configs:
            theirs, mine = median_run(runs[("pyg", ranks * threads, 1)]), median_run(runs[("ours", ranks, threads)])
            kept = median_run(runs[("pyg kept heap", ranks * threads, 1)])
            halo = None
            if ranks == 2:
                halo = run_json(job(ranks, __file__, "--epochs", "2", "--worker", "ours", directory, model, threads, "column"))
            entry = {"model": model, "ranks": ranks, "threads": threads, "rounds": args.rounds, **mine,
                     "pyg_seconds_per_epoch": theirs["seconds_per_epoch"], "pyg_peak_mib": theirs["peak_mib_per_rank"],
                     "pyg_kept_heap_seconds_per_epoch": kept["seconds_per_epoch"],
                     "pyg_kept_heap_peak_mib": kept["peak_mib_per_rank"],
                     "halo_bytes_per_epoch": halo["bytes_per_epoch"] if halo else None}  # fmt: skip
            results.append(entry)
            seconds, peak = mine["seconds_per_epoch"], mine["peak_mib_per_rank"]
            rows.append([model, f"{ranks} x {threads}", f"{theirs['seconds_per_epoch']:.3f}", f"{seconds:.3f}",
                         f"{seconds / theirs['seconds_per_epoch']:.2f}", f"{kept['seconds_per_epoch']:.3f}",
                         f"{seconds / kept['seconds_per_epoch']:.2f}", f"{theirs['peak_mib_per_rank']:.0f}", f"{peak:.0f}",
                         f"{peak / theirs['peak_mib_per_rank']:.2f}", f"{mine['bytes_per_epoch'] / 1e6:.1f}",
                         f"{halo['bytes_per_epoch'] / 1e6:.1f}" if halo else "-"])  # fmt: skip
    print(format_table(["model", "P x T", "PyG s/epoch", "ours s/epoch", "ours/PyG", "PyG kept heap s/epoch", "ours/kept",
                        "PyG MiB", "ours MiB/rank", "ours/PyG", "ours MB/epoch", "halo MB/epoch"], rows))  # fmt: skip
    out = ROOT / "bench" / "results" / "pyg_models.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
