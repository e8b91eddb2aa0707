"""Every executor mode side by side (Collom & Bienz sec. 4): median time per multiply and the ratio
to ``bulk``, for P = 2 and 4 and T = 1 and 2 where P x T <= 4, block widths k = 1, 4, 16, 64, 256,
on the matrices of ../shared/data.

    .venv/bin/python bench/async_modes.py [--matrices M ...] [--ks 1,4,16,64,256] [--repeat 10]

One ``mpiexec -n P`` run per (matrix, P, T) loads the matrix once, plans once per layout (strategy
``--strategy``, default joint; the pipelined mode on groups of one rank, so it pipelines one round
per remote rank), and times every mode and k (one warm-up, then ``--repeat`` multiplies between
barriers, the slowest rank's time). P x T above the machine's cores oversubscribes it: those rows
are marked. With ``--deterministic`` every mode is also timed with ``deterministic=True`` and a
second table gives its cost (time / the same mode's). Prints the tables and writes
bench/results/async_modes.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, default_matrices, short_name  # noqa: E402

CONFIGURATIONS = [(2, 1), (2, 2), (4, 1)]


def worker(matrix: str, ks: list[int], repeat: int, strategy: str, threads: int, deterministic_too: bool) -> None:
    import numpy as np
    from mpi4py import MPI

    import sparsewire
    from sparsewire.exec.spmm import MODES, SpmmExecutor, layout_for_mode
    from sparsewire.generators import deterministic_dense
    from sparsewire.plan.plan import build_rank_plan_collective
    from sparsewire.topology import Topology

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    distributed = sparsewire.distribute(comm, matrix)
    plans = {
        layout: build_rank_plan_collective(
            comm, distributed.local_rows, distributed.row_partition, distributed.col_partition, strategy,
            Topology.nodes(1) if layout == "pipelined" else None, layout=layout,
        )
        for layout in ("merged", "pipelined")
    }
    start, stop = distributed.col_partition.range(rank)
    for k in ks:
        b = deterministic_dense(start, stop, k)
        for mode, deterministic in [(m, d) for m in MODES for d in ((False, True) if deterministic_too else (False,))]:
            plan = plans[layout_for_mode(mode)]
            with SpmmExecutor(plan, comm, k, np.float64, mode, threads=threads, deterministic=deterministic) as executor:
                out = np.empty((plan.local_shape[0], k))
                executor.multiply(b, out=out)
                times = []
                for _ in range(repeat):
                    comm.Barrier()
                    began = MPI.Wtime()
                    executor.multiply(b, out=out)
                    times.append(comm.allreduce(MPI.Wtime() - began, op=MPI.MAX))
                checksum = comm.allreduce(float(out.sum()), op=MPI.SUM)
                delivered = comm.allreduce(executor.bytes_received, op=MPI.SUM)
            if rank == 0:
                print(json.dumps({"k": k, "mode": mode, "deterministic": deterministic, "median_seconds": statistics.median(times),
                                  "checksum": checksum, "bytes": delivered}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--ks", default="1,4,16,64,256", help="block widths (default: 1,4,16,64,256)")
    parser.add_argument("--repeat", type=int, default=10, help="timed multiplies per mode (default: 10)")
    parser.add_argument("--strategy", default="joint", help="strategy (default: joint)")
    parser.add_argument("--deterministic", action="store_true", help="also time every mode with deterministic=True")
    parser.add_argument("--worker", nargs=2, metavar=("MATRIX", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    ks = [int(v) for v in args.ks.split(",")]
    if args.worker:
        worker(args.worker[0], ks, args.repeat, args.strategy, int(args.worker[1]), args.deterministic)
        return
    from sparsewire.report import format_table

    cores = len(os.sched_getaffinity(0))
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    results, rows, deterministic_rows = [], [], []
    for matrix in args.matrices:
        for ranks, threads in CONFIGURATIONS:
            print(f"{short_name(matrix)}: P={ranks} T={threads}", file=sys.stderr, flush=True)
            command = [mpiexec, "-n", str(ranks), sys.executable, __file__, "--worker", matrix, str(threads),
                       "--ks", args.ks, "--repeat", str(args.repeat), "--strategy", args.strategy]
            command += ["--deterministic"] if args.deterministic else []
            completed = subprocess.run(command, capture_output=True, text=True, timeout=3600)
            if completed.returncode != 0:
                sys.exit(f"worker failed: {completed.stderr[-2000:]}")
            entries = [json.loads(line) for line in completed.stdout.strip().splitlines()]
            for k in ks:
                here = {e["mode"]: e for e in entries if e["k"] == k and not e["deterministic"]}
                fixed = {e["mode"]: e for e in entries if e["k"] == k and e["deterministic"]}
                bulk = here["bulk"]["median_seconds"]
                checksums = {round(e["checksum"], 6) for e in here.values()}
                for mode, e in here.items():
                    entry = {"matrix": short_name(matrix), "ranks": ranks, "threads": threads, "k": k, "mode": mode,
                             "median_seconds": e["median_seconds"], "ratio_to_bulk": e["median_seconds"] / bulk,
                             "bytes": e["bytes"], "oversubscribed": ranks * threads > cores, "checksums_agree": len(checksums) == 1}
                    results.append(entry)
                for mode, e in fixed.items():
                    results.append({"matrix": short_name(matrix), "ranks": ranks, "threads": threads, "k": k, "mode": mode,
                                    "deterministic": True, "median_seconds": e["median_seconds"],
                                    "ratio_to_same_mode": e["median_seconds"] / here[mode]["median_seconds"],
                                    "oversubscribed": ranks * threads > cores})
                if fixed:
                    deterministic_rows.append([short_name(matrix), f"{ranks}x{threads}", k]
                                              + [f"{fixed[m]['median_seconds'] / here[m]['median_seconds']:.2f}" for m in here])
                rows.append([short_name(matrix), f"{ranks}x{threads}" + (" (over)" if ranks * threads > cores else ""), k,
                             f"{bulk * 1e3:.3f}"] + [f"{here[m]['median_seconds'] / bulk:.2f}" for m in here if m != "bulk"]
                            + ["yes" if len(checksums) == 1 else "NO"])
    modes = [m for m in ("overlap", "pipelined", "early", "partitioned")]
    print(format_table(["matrix", "PxT", "k", "bulk ms"] + [f"{m}/bulk" for m in modes] + ["same C"], rows))
    if deterministic_rows:
        print()
        print("deterministic=True, time / the same mode's")
        print(format_table(["matrix", "PxT", "k", "bulk"] + modes, deterministic_rows))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "async_modes.json").write_text(json.dumps({"results": results}, indent=1))


if __name__ == "__main__":
    main()
