"""Distributed GAT training against PyTorch Geometric's ``GATConv`` as its users run it, in one run; and the bytes
per epoch of the attention strategies.

    .venv/bin/python bench/peers/gat.py [--configs 1x1,1x2,2x1] [--graphs cora,rmat:14:16:1,rmat:16:16:1]
        [--heads 8] [--hidden 8] [--dropout 0.6] [--epochs 20] [--bytes-ranks 4] [--node-size 2]

The model is PyG's ``examples/gat.py``: dropout, ``GATConv(in, hidden, heads)``, ELU, dropout, ``GATConv(hidden x
heads, classes, heads=1, concat=False)``, attention dropout as the feature dropout, Adam (lr 0.005, weight decay
5e-4), float32. Graphs: Cora (shipped with sparsewire; 1433 bag-of-words features, 7 classes) and R-MAT graphs with
16 random features and 16 random classes.

Ours: ``mpiexec -n P`` with T threads per rank (the kernels and PyTorch both at T), strategy ``auto`` (the weighted
cover). PyG: one process, ``torch.set_num_threads(P x T)`` (the cores ours uses), ``edge_index`` with self-loops
added by the layer, as the example runs it (``GATConv`` has no fused sparse path). Per run: the median seconds of a
training step over the epochs after the first (ours: the slowest rank, gradient allreduce included) and the peak
resident memory per rank (``ru_maxrss``; PyG in its own process, which reads the graph from a plain .npz and imports
nothing of ours). Then, at P = ``--bytes-ranks`` in nodes of ``--node-size`` ranks, the bytes per epoch MPI delivered
(receive statuses), all of them and those between nodes, under ``column`` (the halo exchange), ``joint``, ``auto``
and the two-level ``column-hier``, two epochs each, with joint / column and the between-node bytes of column-hier /
column. P x T above the cores
oversubscribes the 2-core reference machine: the bytes do not depend on it, the times do. Writes
bench/results/gat.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, job, run_json  # noqa: E402
from gnn import export_graph, graph_data, peak_mib  # noqa: E402  (the GCN bench's graphs, export and memory probe)


def ours(spec: str, threads: int, strategy: str, args) -> None:
    import torch
    from mpi4py import MPI

    from sparsewire.gnn import distribute_graph, train
    from sparsewire.topology import Topology

    torch.set_num_threads(threads)
    comm = MPI.COMM_WORLD
    data = graph_data(spec) if comm.Get_rank() == 0 else None
    topology = Topology.nodes(args.node_size) if args.node_size else None
    graph = distribute_graph(comm, data, "gat", threads=threads, strategy=strategy, dtype=torch.float32, topology=topology)
    del data  # rank 0's whole graph: each rank keeps its own rows
    result = train(
        comm, graph, model="gat", heads=args.heads, hidden=args.hidden, epochs=args.epochs, lr=0.005, dropout=args.dropout
    )
    plans = graph.operator.attention_plans.values()
    for plan in plans:  # one more forward and backward, counted alone: the bytes between nodes of a training step
        plan.bytes_between_groups = 0
    result.model.train()
    result.model(graph.features, graph.operator).sum().backward()
    between = comm.allreduce(sum(plan.bytes_between_groups for plan in plans))
    graph.operator.close()
    peaks = comm.gather(peak_mib(), root=0)
    if comm.Get_rank() == 0:
        steady = result.history[1:] or result.history
        print(
            json.dumps(
                {
                    "seconds_per_epoch": float(np.median([h["seconds"] for h in steady])),
                    "bytes_per_epoch": int(steady[-1]["bytes"]),
                    "bytes_between_nodes_per_epoch": between,
                    "peak_mib_per_rank": max(peaks),
                }
            )
        )


def pyg(path: str, threads: int, args) -> None:
    import scipy.sparse as sp
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import GATConv

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    saved = np.load(path)
    assert "sparsewire" not in sys.modules, "the PyG process must not import sparsewire (its imports would count as PyG's memory)"
    features = sp.csr_array((saved["f_data"], saved["f_indices"], saved["f_indptr"]), shape=tuple(saved["f_shape"]))
    x = torch.from_numpy(features.toarray()).float()
    adjacency = sp.coo_array(
        sp.csr_array((saved["a_data"], saved["a_indices"], saved["a_indptr"]), shape=tuple(saved["a_shape"]))
    )
    edge_index = torch.from_numpy(np.vstack([adjacency.col, adjacency.row]).astype(np.int64))  # j -> i for A[i, j]
    y, train = torch.from_numpy(saved["labels"]), torch.from_numpy(saved["train_idx"])
    conv1 = GATConv(x.shape[1], args.hidden, heads=args.heads, dropout=args.dropout)
    conv2 = GATConv(args.hidden * args.heads, int(saved["classes"]), heads=1, concat=False, dropout=args.dropout)
    model = torch.nn.ModuleList([conv1, conv2])
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    times = []
    for _ in range(args.epochs):
        started = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        h = F.dropout(x, args.dropout, training=True)
        h = F.elu(conv1(h, edge_index))
        h = F.dropout(h, args.dropout, training=True)
        h = conv2(h, edge_index)
        loss = F.cross_entropy(h[train], y[train])
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - started)
    print(json.dumps({"seconds_per_epoch": float(np.median(times[1:])), "peak_mib_per_rank": peak_mib()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="1x1,1x2,2x1", help="ranks x threads (default: 1x1,1x2,2x1)")
    parser.add_argument("--graphs", default="cora,rmat:14:16:1,rmat:16:16:1", help="cora and R-MAT specs")
    parser.add_argument("--heads", type=int, default=8, help="heads of the hidden layer (default: 8)")
    parser.add_argument("--hidden", type=int, default=8, help="channels per head (default: 8)")
    parser.add_argument("--dropout", type=float, default=0.6, help="feature and attention dropout (default: 0.6)")
    parser.add_argument("--epochs", type=int, default=20, help="epochs per run (default: 20)")
    parser.add_argument("--bytes-ranks", type=int, default=4, help="P of the bytes comparison (default: 4; 0 skips it)")
    parser.add_argument("--node-size", type=int, default=2, help="ranks per node in the bytes comparison (default: 2)")
    parser.add_argument("--worker", nargs=4, metavar=("SIDE", "GRAPH", "THREADS", "STRATEGY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        side, spec, threads, strategy = args.worker
        if side == "ours":
            ours(spec, int(threads), strategy, args)
        else:
            pyg(spec, int(threads), args)
        return
    from sparsewire.profile import format_table

    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    shared = ["--heads", args.heads, "--hidden", args.hidden, "--dropout", args.dropout, "--epochs", args.epochs]
    results, rows, byte_rows = [], [], []
    exported = tempfile.TemporaryDirectory()
    for spec in args.graphs.split(","):
        graph_file = export_graph(spec, exported.name)
        references = {}
        for ranks, threads in configs:
            cores = ranks * threads
            if cores not in references:
                print(f"{spec}: PyG on {cores} thread(s) ...", file=sys.stderr, flush=True)
                references[cores] = run_json(
                    [sys.executable, __file__, *map(str, shared), "--worker", "pyg", graph_file, str(cores), "-"]
                )
            print(f"{spec}: ours {ranks} x {threads} ...", file=sys.stderr, flush=True)
            mine = run_json(job(ranks, __file__, *shared, "--node-size", 0, "--worker", "ours", spec, threads, "auto"))
            reference = references[cores]
            time_ratio = mine["seconds_per_epoch"] / reference["seconds_per_epoch"]
            memory_ratio = mine["peak_mib_per_rank"] / reference["peak_mib_per_rank"]
            results.append({"graph": spec, "ranks": ranks, "threads": threads, **mine,
                            "pyg_seconds_per_epoch": reference["seconds_per_epoch"],
                            "pyg_peak_mib": reference["peak_mib_per_rank"],
                            "time_ratio_to_pyg": time_ratio, "memory_ratio_to_pyg": memory_ratio})  # fmt: skip
            rows.append(
                [
                    spec,
                    f"{ranks}x{threads}",
                    f"{mine['seconds_per_epoch'] * 1e3:.1f}",
                    f"{reference['seconds_per_epoch'] * 1e3:.1f}",
                    f"{time_ratio:.2f}",
                    f"{mine['peak_mib_per_rank']:.0f}",
                    f"{reference['peak_mib_per_rank']:.0f}",
                    f"{memory_ratio:.2f}",
                ]  # fmt: skip
            )
        if args.bytes_ranks > 1:
            moved = {}
            for strategy in ("column", "joint", "auto", "column-hier"):
                print(f"{spec}: bytes of {strategy} at P = {args.bytes_ranks} ...", file=sys.stderr, flush=True)
                two = [*shared[:-1], 2, "--node-size", args.node_size]
                moved[strategy] = run_json(job(args.bytes_ranks, __file__, *two, "--worker", "ours", spec, 1, strategy))
            results.append({"graph": spec, "ranks": args.bytes_ranks, "node_size": args.node_size,
                            "bytes_by_strategy": moved})  # fmt: skip
            every = {strategy: figures["bytes_per_epoch"] for strategy, figures in moved.items()}
            apart = {strategy: figures["bytes_between_nodes_per_epoch"] for strategy, figures in moved.items()}
            byte_rows.append(
                [
                    spec,
                    f"{args.bytes_ranks} ({args.node_size} per node)",
                    *(f"{every[s]} ({apart[s]})" for s in ("column", "joint", "auto", "column-hier")),
                    f"{every['joint'] / every['column']:.3f}",
                    f"{apart['column-hier'] / apart['column']:.3f}",
                ]
            )
    print(format_table(["graph", "PxT", "ours ms/epoch", "PyG ms/epoch", "ours / PyG", "ours peak MiB/rank", "PyG peak MiB",
                        "memory ours / PyG"], rows))  # fmt: skip
    if byte_rows:
        print()
        print(
            format_table(
                [
                    "graph",
                    "P",
                    "column bytes/epoch (between nodes)",
                    "joint",
                    "auto",
                    "column-hier",
                    "joint / column",
                    "column-hier / column between nodes",
                ],
                byte_rows,  # fmt: skip
            )
        )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "gat.json").write_text(json.dumps({"heads": args.heads, "hidden": args.hidden, "dropout": args.dropout,
                                              "epochs": args.epochs, "results": results}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
