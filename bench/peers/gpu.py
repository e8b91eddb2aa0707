"""GPU execution against PyTorch's own kernels and PyG on the same GPU, in one run.

    .venv/bin/python bench/peers/gpu.py [--matrices SPEC,...] [--ks 8,16,32,64,128] [--repeat 20]
        [--sizes 64,...,67108864] [--gnn-configs 1x1,2x1] [--gnn-graphs cora]
        [--skip-transfers] [--skip-gnn] [--device cuda|cpu]

Needs PyTorch with CUDA and an NVIDIA GPU (bench/README.md); where PyTorch sees none it says so and
exits with status 2, having measured nothing. ``--device cpu`` runs the same script on the CPU
(perf_counter instead of CUDA events): a check of the script where there is no GPU, not a GPU
figure.

1. Local SpMM, float32: the executor at P = 1 on ``cuda`` (``plan.multiply``: its local product is
   torch's CSR ``addmm``, cuSPARSE) against ``torch.sparse.mm`` on the same CSR matrix and B, built
   with int64 indices (as PyG and most torch code build it) and with int32 indices (torch at its
   best, the width ours uses); each the median of ``--repeat`` CUDA-event timings after a warm-up,
   C compared. The ratio is the faster torch over ours. The roofline: the
   fewest bytes the product moves (A as stored, int64 indices; B read once; C written once) over
   the device's copy bandwidth (a 1 GiB device-to-device copy, read + write); each side's share of
   it.
2. Transfers between two ranks (``mpiexec -n 2``; on one GPU both ranks share it): half the round
   trip per message size on each path the machine has: ``staged`` (device to pinned host memory,
   MPI, host to device: the executor's copies), ``direct`` (MPI reading device memory; only with a
   CUDA-aware MPI, not the MPICH wheel), ``nccl`` (torch.distributed send/recv of device tensors;
   only with two GPUs, one per rank); and where the fastest path changes (the crossover curve).
3. GCN epochs (gcn2, gcn5): ``bench/peers/gnn.py --device cuda`` at ``--gnn-configs`` (ranks x threads)
   and ``--gnn-graphs`` beside PyG on the same GPU.

Writes bench/results/gpu.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, geometric_mean, job, median_seconds, run_json, short_name  # noqa: E402


def device_time(function, repeat: int, device: str) -> float:
    """Median seconds of ``function()`` over ``repeat`` calls after one warm-up, by CUDA events
    (on the CPU by perf_counter)."""
    import torch

    if device == "cpu":
        return median_seconds(function, repeat)
    function()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(times)


def copy_bandwidth(repeat: int, device: str) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write)."""
    import torch

    source = torch.ones(2**28, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    return 2 * source.numel() * 4 / device_time(lambda: target.copy_(source), repeat, device)


def local_spmm(specs: list[str], ks: list[int], repeat: int, device: str) -> list[dict]:
    """Part 1 (see the module docstring)."""
    import scipy.sparse as sp
    import torch
    from mpi4py import MPI

    import sparsewire
    from sparsewire.io import load_matrix

    bandwidth = copy_bandwidth(repeat, device)
    print(f"device {device_name(device)}: copy bandwidth {bandwidth / 1e9:.0f} GB/s (1 GiB, device to device)", file=sys.stderr)
    rows = []
    for spec in specs:
        a = sp.csr_array(load_matrix(spec), dtype=np.float32)
        a.sum_duplicates()
        matrix = sparsewire.distribute(MPI.COMM_SELF, a)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": torch.sparse.mm on CSR is what users run
            warnings.simplefilter("ignore", UserWarning)
            csrs = {
                width: torch.sparse_csr_tensor(
                    torch.from_numpy(a.indptr.astype(width)),
                    torch.from_numpy(a.indices.astype(width)),
                    torch.from_numpy(a.data),
                    size=a.shape,
                ).to(device)
                for width in (np.int64, np.int32)
            }
        for k in ks:
            b = torch.from_numpy(np.random.default_rng(k).integers(-3, 4, (a.shape[1], k)).astype(np.float32)).to(device)
            out = torch.empty((a.shape[0], k), dtype=torch.float32, device=device)
            with matrix.spmm_plan(k, np.float32, mode="bulk", threads=1, backend="torch", device=device) as plan:
                ours = device_time(lambda: plan.multiply(b, out=out), repeat, device)
                wide, narrow = (device_time(lambda c=c: torch.sparse.mm(c, b), repeat, device) for c in csrs.values())
                theirs = min(wide, narrow)
                same = all(bool(torch.equal(out, torch.sparse.mm(c, b))) for c in csrs.values())
            least_bytes = a.nnz * (4 + 8) + (a.shape[0] + 1) * 8 + (a.shape[1] + a.shape[0]) * k * 4
            roofline = least_bytes / bandwidth
            rows.append(
                {
                    "matrix": short_name(spec),
                    "nnz": int(a.nnz),
                    "k": k,
                    "ours_seconds": ours,
                    "torch_int64_seconds": wide,
                    "torch_int32_seconds": narrow,
                    "torch_seconds": theirs,
                    "torch_rate_share": theirs / ours,
                    "roofline_seconds": roofline,
                    "ours_roofline_share": roofline / ours,
                    "torch_roofline_share": roofline / theirs,
                    "same_c": same,
                }
            )
            print(
                f"{short_name(spec)} k={k}: ours {ours * 1e6:.1f} us, torch.sparse.mm {wide * 1e6:.1f} us (int64), "
                f"{narrow * 1e6:.1f} us (int32), "
                f"roofline {roofline * 1e6:.1f} us",
                file=sys.stderr,
            )
    return rows


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device != "cpu" else "cpu"


def transfer_worker(sizes: list[int], repeat: int, device: str) -> None:
    """Part 2, on each of two ranks (prints rank 0's JSON)."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from sparsewire.calibration import time_transfer_paths
    from sparsewire.comm import cuda_aware_mpi
    from sparsewire.exec import process_group_ranks
    from sparsewire.kernels import TorchBackend, node_device

    comm = MPI.COMM_WORLD
    device = node_device(comm) if device == "cuda" else device
    backend = TorchBackend(device)
    aware, how = cuda_aware_mpi()
    paths = ("staged", "direct") if aware or device == "cpu" else ("staged",)
    measured = time_transfer_paths(comm, backend, sizes, repeat, paths)
    gpus = len(set(comm.allgather(device)))
    if device != "cpu" and gpus == comm.Get_size():
        process_group_ranks(comm, device)
        rank, times = comm.Get_rank(), []
        for size in sizes:
            tensor = torch.zeros(max(1, size // 8), dtype=torch.float64, device=device)
            trials = []
            for trial in range(repeat + 1):
                torch.cuda.synchronize()
                comm.Barrier()
                started = MPI.Wtime()
                for sender in (0, 1):
                    (dist.send if rank == sender else dist.recv)(tensor, 1 - rank)
                torch.cuda.synchronize()
                if trial:
                    trials.append((MPI.Wtime() - started) / 2)
            times.append(statistics.median(trials))
        measured["nccl"] = times
    if comm.Get_rank() == 0:
        print(json.dumps({"sizes": sizes, "seconds": measured, "cuda_aware_mpi": how, "gpus": gpus}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--matrices", help="comma-separated files or generator specs (default: ../shared/data, rmat:16:16:1, rmat:18:16:1)"
    )
    parser.add_argument("--ks", default="8,16,32,64,128", help="columns of B (default: 8,16,32,64,128)")
    parser.add_argument("--repeat", type=int, default=20, help="timed repetitions per measurement (default: 20)")
    parser.add_argument(
        "--sizes", default=",".join(str(4**e) for e in range(3, 14)), help="message sizes in bytes (default: 64 ... 64 MiB)"
    )
    parser.add_argument("--gnn-configs", default="1x1,2x1", help="ranks x threads of the GCN part (default: 1x1,2x1)")
    # (Cora alone by default: each run starts its own processes, about 14 s each on a lent H200, and a lease is short)
    parser.add_argument("--gnn-graphs", default="cora", help="graphs of the GCN part (default: cora)")
    parser.add_argument(
        "--device", choices=["cuda", "cpu"], default="cuda", help="cpu: check the script without a GPU (default: cuda)"
    )
    parser.add_argument("--skip-transfers", action="store_true", help="leave out part 2")
    parser.add_argument("--skip-gnn", action="store_true", help="leave out part 3")
    parser.add_argument("--transfer-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.transfer_worker:
        transfer_worker(sizes, args.repeat, args.device)
        return
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"bench/peers/gpu.py needs a CUDA GPU: this PyTorch ({torch.__version__}) sees none, so nothing was measured",
            file=sys.stderr,
        )
        raise SystemExit(2)
    from sparsewire.profile import format_table

    specs = args.matrices.split(",") if args.matrices else default_matrices(["rmat:16:16:1", "rmat:18:16:1"])
    local = local_spmm(specs, [int(k) for k in args.ks.split(",")], args.repeat, args.device)
    print(
        format_table(
            ["matrix", "k", "ours us", "torch int64 us", "torch int32 us", "best torch / ours"]
            + ["roofline us", "ours of roofline", "same C"],
            [
                [
                    r["matrix"],
                    r["k"],
                    f"{r['ours_seconds'] * 1e6:.1f}",
                    f"{r['torch_int64_seconds'] * 1e6:.1f}",
                    f"{r['torch_int32_seconds'] * 1e6:.1f}",
                    f"{r['torch_rate_share']:.2f}",
                    f"{r['roofline_seconds'] * 1e6:.1f}",
                    f"{r['ours_roofline_share']:.2f}",
                    r["same_c"],
                ]
                for r in local
            ],
        )
    )
    for k in sorted({r["k"] for r in local}):
        share = geometric_mean([r["torch_rate_share"] for r in local if r["k"] == k])
        print(f"k = {k}: ours at {share:.2f} of the faster torch.sparse.mm's rate (geometric mean over the matrices)")
    report = {"device": device_name(args.device), "local_spmm": local}
    if not args.skip_transfers:
        transfers = run_json(
            job(2, __file__, "--transfer-worker", "--sizes", args.sizes, "--repeat", args.repeat, "--device", args.device)
        )
        paths = list(transfers["seconds"])
        rows = []
        for position, size in enumerate(transfers["sizes"]):
            times = {path: transfers["seconds"][path][position] for path in paths}
            rows.append([size] + [f"{times[path] * 1e6:.2f}" for path in paths] + [min(times, key=times.get)])
        print()
        print(format_table(["bytes"] + [f"{path} us" for path in paths] + ["fastest"], rows))
        print(f"MPI: {transfers['cuda_aware_mpi']}; GPUs used: {transfers['gpus']} (nccl needs one per rank)")
        report["transfers"] = transfers
    if not args.skip_gnn:
        completed = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "peers" / "gnn.py"),
                "--device",
                args.device,
                "--configs",
                args.gnn_configs,
                "--graphs",
                args.gnn_graphs,
                "--models",
                "gcn2,gcn5",
            ],
            text=True,
            timeout=3600,
        )
        if completed.returncode != 0:
            raise SystemExit(f"bench/peers/gnn.py --device {args.device} failed")
        name = "gnn.json" if args.device == "cpu" else "gnn-cuda.json"
        report["gnn"] = json.loads((ROOT / "bench" / "results" / name).read_text())
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / ("gpu.json" if args.device == "cuda" else "gpu-on-cpu.json")).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
