"""Distributed GCN training against single-process PyTorch Geometric, in one run.

    .venv/bin/python bench/gnn.py [--ranks 1,2,4] [--strategies block,column,row,joint,auto] [--epochs 20]

Graphs: Cora (``../shared/data/gnn/cora.npz``, when present) and a generated R-MAT graph
(``--rmat rmat:14:16:1``, directed as generated, 16 random features, 16 random classes). Model: CoLa sec. 6.6's GCN, 5
layers 16 -> 32 -> 32 -> 32 -> 32 -> 16 (on Cora: its 1433 features in, 7 classes out), dropout 0,
float64, Adam. Per (graph, P, strategy): ``mpiexec -n P`` trains ``--epochs`` epochs and reports
the median seconds per epoch (training step: forward, backward, gradient allreduce, Adam; the
slowest rank; the first epoch, which makes the plans, left out) and the bytes MPI delivered per
epoch (forward + backward propagations, all ranks). PyG: ``GCNConv`` layers (cached
normalisation) on the same data, one process, the same epoch. P x 1 thread above 2 ranks
oversubscribes the 2-core reference machine. Writes bench/results/gnn.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT  # noqa: E402

CORA = ROOT.parent / "shared" / "data" / "gnn" / "cora.npz"


def graph_data(spec: str):
    from sparsewire.gnn import load_graph

    return load_graph(spec) if spec.endswith(".npz") else load_graph(spec, features="random:16", classes=16)


def channels_for(data) -> list[int]:
    return [data.features.shape[1], 32, 32, 32, 32, data.classes]


def worker(spec: str, strategy: str, epochs: int) -> None:
    import torch
    from mpi4py import MPI

    from sparsewire.gnn import distribute_graph, train

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    data = graph_data(spec) if comm.Get_rank() == 0 else None
    channels = comm.bcast(channels_for(data) if data is not None else None, root=0)
    graph = distribute_graph(comm, data, "gcn", strategy=strategy)
    result = train(comm, graph, channels=channels, epochs=epochs, dropout=0.0)
    chosen = sorted({plan.rank_plan.strategy.value for plan in graph.operator.plans.values()})
    graph.operator.close()
    if comm.Get_rank() == 0:
        steady = result.history[1:] or result.history
        print(json.dumps({"seconds_per_epoch": float(np.median([h["seconds"] for h in steady])),
                          "bytes_per_epoch": int(steady[-1]["bytes"]), "strategy": ",".join(chosen),
                          "final_loss": result.history[-1]["loss"]}))


def pyg_seconds_per_epoch(data, epochs: int) -> float:
    import scipy.sparse as sp
    import torch
    from torch_geometric.nn import GCNConv

    torch.set_num_threads(1)
    torch.manual_seed(0)
    channels = channels_for(data)
    convs = torch.nn.ModuleList(GCNConv(a, b, cached=True).double() for a, b in zip(channels[:-1], channels[1:]))
    coo = sp.coo_array(data.adjacency)
    edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))
    x = torch.from_numpy(data.features.toarray())
    y, train = torch.from_numpy(data.labels), torch.from_numpy(data.train_idx)
    optimizer = torch.optim.Adam(convs.parameters(), lr=0.01)
    times = []
    for _ in range(epochs):
        started = time.perf_counter()
        optimizer.zero_grad()
        h = x
        for index, conv in enumerate(convs):
            h = conv(h, edge_index)
            h = torch.relu(h) if index < len(convs) - 1 else torch.log_softmax(h, dim=-1)
        loss = torch.nn.functional.nll_loss(h[train], y[train])
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - started)
    return float(np.median(times[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="1,2,4", help="rank counts (default: 1,2,4)")
    parser.add_argument("--strategies", default="block,column,row,joint,auto", help="SpMM strategies (default: block,column,row,joint,auto)")
    parser.add_argument("--epochs", type=int, default=20, help="epochs per run (default: 20)")
    parser.add_argument("--rmat", default="rmat:14:16:1", help="the generated graph (default: rmat:14:16:1)")
    parser.add_argument("--worker", nargs=2, metavar=("GRAPH", "STRATEGY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.epochs)
        return
    from sparsewire.report import format_table

    graphs = ([str(CORA)] if CORA.exists() else []) + [args.rmat]
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    results, rows = [], []
    for spec in graphs:
        data = graph_data(spec)
        print(f"{Path(spec).name}: {data.n} nodes, {data.adjacency.nnz} nonzeros; PyG ...", file=sys.stderr, flush=True)
        pyg = pyg_seconds_per_epoch(data, args.epochs)
        for ranks in [int(v) for v in args.ranks.split(",")]:
            for strategy in args.strategies.split(","):
                print(f"  P = {ranks}, {strategy} ...", file=sys.stderr, flush=True)
                completed = subprocess.run(
                    [mpiexec, "-n", str(ranks), sys.executable, __file__, "--epochs", str(args.epochs), "--worker", spec, strategy],
                    capture_output=True, text=True, timeout=900,
                )
                if completed.returncode != 0:
                    raise SystemExit(f"worker failed: {completed.stderr[-2000:]}")
                run = json.loads(completed.stdout.strip().splitlines()[-1])
                entry = {"graph": Path(spec).name, "ranks": ranks, "strategy_requested": strategy, **run, "pyg_seconds_per_epoch": pyg}
                results.append(entry)
                rows.append([Path(spec).name, ranks, strategy, run["strategy"], f"{run['seconds_per_epoch'] * 1e3:.2f}",
                             run["bytes_per_epoch"], f"{pyg * 1e3:.2f}", f"{run['seconds_per_epoch'] / pyg:.2f}"])
    print(format_table(["graph", "P", "strategy", "ran", "ms/epoch", "bytes/epoch", "PyG ms/epoch (1 process)", "ours / PyG"], rows))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gnn.json").write_text(json.dumps({"epochs": args.epochs, "results": results}, indent=1))


if __name__ == "__main__":
    main()
