"""Distributed GNN training against PyTorch Geometric configured as its users run it, in one run.

    .venv/bin/python bench/peers/gnn.py [--configs 1x1,1x2,2x1] [--graphs cora,rmat:14:16:1,rmat:16:16:1]
        [--models gcn2,gcn5,sage2] [--dtype float32] [--epochs 30] [--backend numpy|torch] [--device cpu|cuda]

Graphs: Cora (the copy that ships with sparsewire; 1433 sparse bag-of-words features,
7 classes) and generated R-MAT graphs (16 random features, 16 random classes). Models: ``gcn2``
(Kipf and Welling: 2 GCN layers, hidden 16), ``gcn5`` (CoLa sec. 6.6: 5 GCN layers, hidden 32),
``sage2`` (2 GraphSAGE mean layers, hidden 16); Adam, lr 0.01; ``--dropout`` before every layer
(default 0: PyTorch's dropout on Cora's dense 2708 x 1433 input alone takes about 20 ms a call,
which would measure the random number generator rather than the propagation).

Ours: ``mpiexec -n P`` with T threads per rank (executor and PyTorch both at T), ``--dtype``,
``--backend`` (the executor's local products: ``torch``, PyTorch's sparse CSR products, the default
of ``sparsewire gcn``; or ``numpy``, the compiled kernels).
PyG: one process, ``torch.set_num_threads(P x T)`` (the cores ours uses), the adjacency as a CSR
``adj_t`` (``torch.sparse_csr_tensor``, so a propagation is one ``torch.sparse.mm``), ``GCNConv``
with ``cached=True`` (the normalisation made once), ``SAGEConv`` with the mean aggregator, the
same dtype and dense features. Per run: the median seconds of a training step (zero_grad,
forward, loss, backward, Adam; ours: the slowest rank, gradient allreduce included) over the epochs
after the first, bytes per epoch (ours: forward + backward propagations, all ranks) and the peak
resident memory per rank (``ru_maxrss``; PyG in its own process, which reads the graph from a
plain .npz and imports nothing of ours). P x T above the cores
oversubscribes the 2-core reference machine. Prints the table with ratios and, per graph, 1 x 2
over 2 x 1; writes bench/results/gnn.json.

``--device cuda`` puts both sides on the GPU (ours: each rank the GPU of its rank on the node, so
ranks share one where there is one; PyG: ``cuda:0``); each epoch's time is taken after
``torch.cuda.synchronize()``, and the peak device memory (``torch.cuda.max_memory_allocated``)
is reported beside the resident memory. Writes bench/results/gnn-cuda.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, job, run_json  # noqa: E402

MODELS = {"gcn2": ("gcn", 2, 16), "gcn5": ("gcn", 5, 32), "sage2": ("sage", 2, 16)}


def graph_data(spec: str):
    from sparsewire.gnn import load_graph

    if spec == "cora":
        return load_graph("cora")  # the copy that ships with sparsewire
    return load_graph(spec, features="random:16", classes=16)


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gpu_peak_mib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device != "cpu" else None


def ours(spec: str, model: str, threads: int, epochs: int, dtype: str, dropout: float, backend: str, device: str) -> None:
    import torch
    from mpi4py import MPI

    from sparsewire.gnn import distribute_graph, train

    torch.set_num_threads(threads)
    comm = MPI.COMM_WORLD
    kind, layers, hidden = MODELS[model]
    data = graph_data(spec) if comm.Get_rank() == 0 else None
    if device == "cuda":
        from sparsewire.kernels import node_device

        device = node_device(comm)
    graph = distribute_graph(comm, data, kind, threads=threads, dtype=getattr(torch, dtype), backend=backend, device=device)
    result = train(comm, graph, model=kind, layers=layers, hidden=hidden, epochs=epochs, dropout=dropout)
    graph.operator.close()
    peaks = comm.gather(peak_mib(), root=0)
    gpu_peaks = comm.gather(gpu_peak_mib(device), root=0)
    if comm.Get_rank() == 0:
        steady = result.history[1:] or result.history
        print(
            json.dumps(
                {
                    "seconds_per_epoch": float(np.median([h["seconds"] for h in steady])),
                    "bytes_per_epoch": int(steady[-1]["bytes"]),
                    "peak_mib_per_rank": max(peaks),
                    "gpu_peak_mib_per_rank": None if device == "cpu" else max(gpu_peaks),
                    "final_loss": result.history[-1]["loss"],
                }
            )
        )


def export_graph(spec: str, directory: str) -> str:
    """The graph as a plain .npz (CSR adjacency and features, labels, training nodes), so the PyG
    process reads it with NumPy and SciPy alone: importing sparsewire there (Numba, mpi4py) would
    add our imports to PyG's peak memory."""
    import scipy.sparse as sp

    data = graph_data(spec)
    adjacency, features = sp.csr_array(data.adjacency), sp.csr_array(data.features)
    path = str(Path(directory) / f"{spec.replace(':', '_')}.npz")
    np.savez(
        path,
        a_indptr=adjacency.indptr,
        a_indices=adjacency.indices,
        a_data=adjacency.data,
        a_shape=adjacency.shape,
        f_indptr=features.indptr,
        f_indices=features.indices,
        f_data=features.data,
        f_shape=features.shape,
        labels=data.labels,
        train_idx=data.train_idx,
        classes=data.classes,
    )
    return path


def pyg(path: str, model: str, threads: int, epochs: int, dtype: str, dropout: float, device: str) -> None:
    from types import SimpleNamespace

    import scipy.sparse as sp
    import torch
    from torch_geometric.nn import GCNConv, SAGEConv

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    saved = np.load(path)
    data = SimpleNamespace(
        adjacency=sp.csr_array((saved["a_data"], saved["a_indices"], saved["a_indptr"]), shape=tuple(saved["a_shape"])),
        features=sp.csr_array((saved["f_data"], saved["f_indices"], saved["f_indptr"]), shape=tuple(saved["f_shape"])),
        labels=saved["labels"],
        train_idx=saved["train_idx"],
        classes=int(saved["classes"]),
    )
    assert "sparsewire" not in sys.modules, "the PyG process must not import sparsewire (its imports would count as PyG's memory)"
    kind, layers, hidden = MODELS[model]
    dtype = getattr(torch, dtype)
    channels = [data.features.shape[1]] + [hidden] * (layers - 1) + [data.classes]
    layer = (lambda a, b: GCNConv(a, b, cached=True)) if kind == "gcn" else (lambda a, b: SAGEConv(a, b, aggr="mean"))
    device = "cuda:0" if device == "cuda" else device
    wait = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    convs = torch.nn.ModuleList(layer(a, b) for a, b in zip(channels[:-1], channels[1:])).to(device=device, dtype=dtype)
    csr = sp.csr_array(data.adjacency)  # rows = targets: adj_t as PyG stores it
    adj_t = torch.sparse_csr_tensor(
        torch.from_numpy(csr.indptr.astype(np.int64)),
        torch.from_numpy(csr.indices.astype(np.int64)),
        torch.from_numpy(csr.data).to(dtype),
        size=csr.shape,
    ).to(device)
    x = torch.from_numpy(data.features.toarray()).to(device=device, dtype=dtype)
    y, train = torch.from_numpy(data.labels).to(device), torch.from_numpy(data.train_idx).to(device)
    optimizer = torch.optim.Adam(convs.parameters(), lr=0.01)
    times = []
    for _ in range(epochs):
        wait()
        started = time.perf_counter()
        optimizer.zero_grad()
        h = x
        for index, conv in enumerate(convs):
            h = torch.nn.functional.dropout(h, dropout, training=True) if dropout > 0 else h
            h = conv(h, adj_t)
            h = torch.relu(h) if index < len(convs) - 1 else torch.log_softmax(h, dim=-1)
        loss = torch.nn.functional.nll_loss(h[train], y[train])
        loss.backward()
        optimizer.step()
        wait()
        times.append(time.perf_counter() - started)
    print(
        json.dumps(
            {
                "seconds_per_epoch": float(np.median(times[1:])),
                "peak_mib_per_rank": peak_mib(),
                "gpu_peak_mib_per_rank": gpu_peak_mib(device),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="1x1,1x2,2x1", help="ranks x threads (default: 1x1,1x2,2x1)")
    parser.add_argument(
        "--graphs",
        default="cora,rmat:14:16:1,rmat:16:16:1",
        help="cora and R-MAT specs (default: cora,rmat:14:16:1,rmat:16:16:1)",
    )
    parser.add_argument("--models", default="gcn2,gcn5,sage2", help=f"of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="both sides (default: float32)")
    parser.add_argument("--epochs", type=int, default=30, help="epochs per run (default: 30)")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout before every layer, both sides (default: 0)")
    parser.add_argument(
        "--backend",
        choices=["numpy", "torch"],
        default="torch",
        help="our executor's kernel backend (default: torch, as sparsewire gcn)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="both sides on this device (default: cpu)")
    parser.add_argument("--worker", nargs=4, metavar=("SIDE", "GRAPH", "MODEL", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        side, spec, model, threads = args.worker
        if side == "ours":
            ours(spec, model, int(threads), args.epochs, args.dtype, args.dropout, args.backend, args.device)
        else:
            pyg(spec, model, int(threads), args.epochs, args.dtype, args.dropout, args.device)
        return
    from sparsewire.profile import format_table

    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    graphs = args.graphs.split(",")
    shared = ["--epochs", str(args.epochs), "--dtype", args.dtype, "--dropout", str(args.dropout), "--device", args.device]
    results, rows, thread_rows = [], [], []
    exported = tempfile.TemporaryDirectory()
    for spec in graphs:
        graph_file = export_graph(spec, exported.name)
        for model in args.models.split(","):
            references, times = {}, {}
            for ranks, threads in configs:
                cores = ranks * threads
                if cores not in references:
                    print(f"{spec} {model}: PyG on {cores} thread(s) ...", file=sys.stderr, flush=True)
                    references[cores] = run_json(
                        [sys.executable, __file__, *shared, "--worker", "pyg", graph_file, model, str(cores)]
                    )
                print(f"{spec} {model}: ours {ranks} x {threads} ...", file=sys.stderr, flush=True)
                mine = run_json(
                    job(ranks, __file__, *shared, "--backend", args.backend, "--worker", "ours", spec, model, threads)
                )
                reference = references[cores]
                times[(ranks, threads)] = mine["seconds_per_epoch"]
                ratio = mine["seconds_per_epoch"] / reference["seconds_per_epoch"]
                results.append(
                    {
                        "graph": spec,
                        "model": model,
                        "ranks": ranks,
                        "threads": threads,
                        "dtype": args.dtype,
                        "backend": args.backend,
                        "device": args.device,
                        **mine,
                        "pyg_gpu_peak_mib": reference["gpu_peak_mib_per_rank"],
                        "pyg_seconds_per_epoch": reference["seconds_per_epoch"],
                        "pyg_peak_mib": reference["peak_mib_per_rank"],
                        "ratio_to_pyg": ratio,
                    }
                )
                rows.append(
                    [
                        spec,
                        model,
                        f"{ranks}x{threads}",
                        f"{mine['seconds_per_epoch'] * 1e3:.2f}",
                        f"{reference['seconds_per_epoch'] * 1e3:.2f}",
                        f"{ratio:.2f}",
                        mine["bytes_per_epoch"],
                        f"{mine['peak_mib_per_rank']:.0f}",
                        f"{reference['peak_mib_per_rank']:.0f}",
                    ]
                    + (
                        [f"{mine['gpu_peak_mib_per_rank']:.0f}", f"{reference['gpu_peak_mib_per_rank']:.0f}"]
                        if args.device != "cpu"
                        else []
                    )
                )
            if (1, 2) in times and (2, 1) in times:
                thread_rows.append([spec, model, f"{times[(1, 2)] / times[(2, 1)]:.2f}"])
    print(
        format_table(
            [
                "graph",
                "model",
                "PxT",
                "ours ms/epoch",
                "PyG ms/epoch",
                "ours / PyG",
                "bytes/epoch",
                "ours peak MiB/rank",
                "PyG peak MiB",
            ]
            + (["ours GPU MiB/rank", "PyG GPU MiB"] if args.device != "cpu" else []),
            rows,
        )
    )
    if thread_rows:
        print()
        print(format_table(["graph", "model", "1x2 / 2x1"], thread_rows))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    name = "gnn.json" if args.device == "cpu" else f"gnn-{args.device}.json"
    (out / name).write_text(
        json.dumps(
            {
                "epochs": args.epochs,
                "dtype": args.dtype,
                "dropout": args.dropout,
                "backend": args.backend,
                "device": args.device,
                "results": results,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
