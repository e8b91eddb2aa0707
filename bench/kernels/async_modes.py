"""Every executor mode side by side (Collom & Bienz sec. 4), on every transport, and optionally
beside an earlier executor: median time per multiply and the ratio to ``bulk``, for P = 2 and 4
and T = 1 and 2 where P x T <= 4, block widths k = 1, 4, 16, 64, 256, on the matrices of
../shared/data.

    .venv/bin/python bench/kernels/async_modes.py [--matrices M ...] [--ks 1,4,16,64,256] [--repeat 10]
        [--transports mpi,torch] [--baseline GIT_REF] [--rounds 2] [--configurations 2x1,2x2,4x1]

One ``mpiexec -n P`` run per (matrix, P, T) loads the matrix once, plans once per layout (strategy
``--strategy``, default joint; the pipelined mode on groups of one rank, so it pipelines one round
per remote rank), and times every mode, transport and k (one warm-up, then ``--repeat`` multiplies
between barriers, the slowest rank's time). The torch transport (torch.distributed on Gloo) runs
every mode but partitioned. With ``--baseline REF`` the sparsewire package of that git commit is
extracted to a temporary directory and the same run is made with it (MPI transport), alternating
with the current code ``--rounds`` times (which goes first alternates too); each entry keeps its
fastest median over the rounds, and a summary gives the geometric mean of current / baseline per
mode and overall, and of torch / MPI per mode. P x T above the machine's cores oversubscribes it: those rows are marked. With
``--deterministic`` every mode is also timed with ``deterministic=True`` and a second table gives
its cost (time / the same mode's). Prints the tables and writes bench/results/async_modes.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, extract_baseline, geometric_mean, job, short_name  # noqa: E402

MODE_ORDER = ("bulk", "overlap", "pipelined", "early", "partitioned")


def worker(
    matrix: str, ks: list[int], repeat: int, strategy: str, threads: int, deterministic_too: bool, transports: list[str]
) -> None:
    import numpy as np
    from mpi4py import MPI

    import sparsewire

    try:  # this tree's public names
        from sparsewire.exec import ExecOptions, SpmmExecutor
        from sparsewire.plan import MODES, build_rank_plan_collective, layout_for_mode
        from sparsewire.profile import time_plan
        from sparsewire.testing import deterministic_dense
    except ImportError:  # a --baseline tree from before the layered layout: the same objects, other places
        from sparsewire import ExecOptions, deterministic_dense
        from sparsewire.exec.executor import SpmmExecutor
        from sparsewire.exec.modes import MODES, layout_for_mode
        from sparsewire.plan import build_rank_plan_collective
        from sparsewire.timed import time_plan

    def executor_of(plan, k, mode, deterministic, transport):
        options = ExecOptions(mode=mode, threads=threads, deterministic=deterministic, transport=transport)
        return SpmmExecutor(plan, comm, k, np.float64, options)

    def median_time(executor, b, out):
        return time_plan(executor, b, out, repeat).median_seconds

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    distributed = sparsewire.distribute(comm, matrix)
    plans = {
        layout: build_rank_plan_collective(
            comm,
            distributed.local_rows,
            distributed.row_partition,
            distributed.col_partition,
            strategy,
            sparsewire.Topology.nodes(1) if layout == "pipelined" else None,
            layout=layout,
        )
        for layout in ("merged", "pipelined")
    }
    start, stop = distributed.col_partition.range(rank)
    for k in ks:
        b = deterministic_dense(start, stop, k)
        for transport in transports:
            for mode, deterministic in [(m, d) for m in MODES for d in ((False, True) if deterministic_too else (False,))]:
                if transport == "torch" and mode == "partitioned":
                    continue  # MPI-4 partitioned messages only
                plan = plans[layout_for_mode(mode)]
                with executor_of(plan, k, mode, deterministic, transport) as executor:
                    out = np.empty((plan.local_shape[0], k))
                    median = median_time(executor, b, out)  # one warm-up, then repeat timed multiplies
                    checksum = comm.allreduce(float(out.sum()), op=MPI.SUM)
                    delivered = comm.allreduce(executor.bytes_received, op=MPI.SUM)
                if rank == 0:
                    print(
                        json.dumps(
                            {
                                "k": k,
                                "mode": mode,
                                "transport": transport,
                                "deterministic": deterministic,
                                "median_seconds": median,
                                "checksum": checksum,
                                "bytes": delivered,
                                "package": str(Path(sparsewire.__file__).parent),
                            }
                        ),
                        flush=True,
                    )


def run_worker(matrix: str, ranks: int, threads: int, args, transports: list[str], source: str | None) -> list[dict]:
    command = job(
        ranks,
        __file__,
        "--worker",
        matrix,
        str(threads),
        "--ks",
        args.ks,
        "--repeat",
        str(args.repeat),
        "--strategy",
        args.strategy,
        "--transports",
        ",".join(transports),
    )
    command += ["--deterministic"] if args.deterministic else []
    environment = dict(os.environ)
    if source is not None:
        environment["PYTHONPATH"] = source  # ahead of the editable install of the current code
    completed = subprocess.run(command, capture_output=True, text=True, timeout=3600, env=environment)
    if completed.returncode != 0:
        sys.exit(f"worker failed: {completed.stderr[-2000:]}")
    entries = [json.loads(line) for line in completed.stdout.strip().splitlines()]
    expected = source if source is not None else str(ROOT / "src")
    if entries and not entries[0]["package"].startswith(expected):
        sys.exit(f"the worker imported sparsewire from {entries[0]['package']}, not from {expected}")
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--ks", default="1,4,16,64,256", help="block widths (default: 1,4,16,64,256)")
    parser.add_argument("--repeat", type=int, default=10, help="timed multiplies per mode (default: 10)")
    parser.add_argument("--strategy", default="joint", help="strategy (default: joint)")
    parser.add_argument("--transports", default="mpi,torch", help="transports of the current code (default: mpi,torch)")
    parser.add_argument("--baseline", metavar="GIT_REF", help="also time the executor of this git commit (MPI), same run")
    parser.add_argument(
        "--rounds", type=int, default=2, help="with --baseline: alternations of current and baseline (default: 2)"
    )
    parser.add_argument("--deterministic", action="store_true", help="also time every mode with deterministic=True")
    parser.add_argument(
        "--configurations",
        default="2x1,2x2,4x1",
        help="ranks x threads per rank to run (default: 2x1,2x2,4x1; 2x1 alone stays within this machine's cores)",
    )
    parser.add_argument("--worker", nargs=2, metavar=("MATRIX", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    ks = [int(v) for v in args.ks.split(",")]
    try:
        configurations = [tuple(int(x) for x in item.split("x")) for item in args.configurations.split(",")]
    except ValueError:
        parser.error(f"--configurations {args.configurations!r}: give PxT items, e.g. 2x1,4x1")
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if args.worker:
        worker(args.worker[0], ks, args.repeat, args.strategy, int(args.worker[1]), args.deterministic, transports)
        return
    from sparsewire.profile import format_table

    baseline_source = extract_baseline(args.baseline) if args.baseline else None
    cores = len(os.sched_getaffinity(0))
    results, rows, deterministic_rows, ratios_old, ratios_torch = [], [], [], {}, {}
    variants = [(t, None) for t in transports] + ([("baseline", baseline_source)] if baseline_source else [])
    columns = [m for m in MODE_ORDER]
    for matrix in args.matrices:
        for ranks, threads in configurations:
            print(f"{short_name(matrix)}: P={ranks} T={threads}", file=sys.stderr, flush=True)
            best: dict[tuple, dict] = {}  # (variant, k, mode, deterministic) -> the entry with the fastest median
            for round_index in range(args.rounds if baseline_source else 1):
                order = ["current", "baseline"] if baseline_source else ["current"]
                if round_index % 2:  # alternate who goes first: the second process of a pair ran measurably slower
                    order.reverse()
                runs = [
                    (
                        variant,
                        run_worker(matrix, ranks, threads, args, transports, None)
                        if variant == "current"
                        else run_worker(matrix, ranks, threads, args, ["mpi"], baseline_source),
                    )
                    for variant in order
                ]
                for variant, entries in runs:
                    for e in entries:
                        key = ("baseline" if variant == "baseline" else e["transport"], e["k"], e["mode"], e["deterministic"])
                        if key not in best or e["median_seconds"] < best[key]["median_seconds"]:
                            best[key] = e
            over = ranks * threads > cores
            for k in ks:
                here = {(v, m): e for (v, kk, m, d), e in best.items() if kk == k and not d}
                bulk = (
                    here[("mpi", "bulk")]["median_seconds"]
                    if ("mpi", "bulk") in here
                    else here[(transports[0], "bulk")]["median_seconds"]
                )
                checksums = {round(e["checksum"], 6) for e in here.values()}
                for (variant, mode), e in here.items():
                    results.append(
                        {
                            "matrix": short_name(matrix),
                            "ranks": ranks,
                            "threads": threads,
                            "k": k,
                            "mode": mode,
                            "variant": variant,
                            "median_seconds": e["median_seconds"],
                            "ratio_to_bulk": e["median_seconds"] / bulk,
                            "bytes": e["bytes"],
                            "oversubscribed": over,
                            "checksums_agree": len(checksums) == 1,
                        }
                    )
                for variant, _ in variants:
                    present = [m for m in columns if (variant, m) in here]
                    if not present:
                        continue
                    base = here[(variant, "bulk")]["median_seconds"]
                    rows.append(
                        [short_name(matrix), f"{ranks}x{threads}" + (" (over)" if over else ""), k, variant, f"{base * 1e3:.3f}"]
                        + [
                            f"{here[(variant, m)]['median_seconds'] / base:.2f}" if (variant, m) in here else "-"
                            for m in columns[1:]
                        ]
                        + ["yes" if len(checksums) == 1 else "NO"]
                    )
                for mode in columns:
                    if ("mpi", mode) in here and ("baseline", mode) in here:
                        ratios_old.setdefault((mode, over), []).append(
                            here[("mpi", mode)]["median_seconds"] / here[("baseline", mode)]["median_seconds"]
                        )
                    if ("mpi", mode) in here and ("torch", mode) in here:
                        ratios_torch.setdefault((mode, over), []).append(
                            here[("torch", mode)]["median_seconds"] / here[("mpi", mode)]["median_seconds"]
                        )
                fixed = {m: e for (v, kk, m, d), e in best.items() if kk == k and d and v == transports[0]}
                if fixed:
                    deterministic_rows.append(
                        [short_name(matrix), f"{ranks}x{threads}", k]
                        + [
                            f"{fixed[m]['median_seconds'] / here[(transports[0], m)]['median_seconds']:.2f}"
                            for m in columns
                            if m in fixed
                        ]
                    )
    print(format_table(["matrix", "PxT", "k", "executor", "bulk ms"] + [f"{m}/bulk" for m in columns[1:]] + ["same C"], rows))
    if deterministic_rows:
        print()
        print("deterministic=True, time / the same mode's")
        print(format_table(["matrix", "PxT", "k"] + columns, deterministic_rows))
    summary = []
    for label, ratios in (("current MPI / baseline", ratios_old), ("torch / MPI", ratios_torch)):
        for over in (False, True):
            per_mode = {m: ratios[(m, over)] for m in columns if (m, over) in ratios}
            if per_mode:
                everything = [r for values in per_mode.values() for r in values]
                summary.append(
                    [label, "oversubscribed" if over else "within cores"]
                    + [f"{geometric_mean(per_mode[m]):.3f}" if m in per_mode else "-" for m in columns]
                    + [f"{geometric_mean(everything):.3f}", len(everything)]
                )
    if summary:
        print()
        print("geometric means of time ratios (median times, fastest round)")
        print(format_table(["ratio", "PxT"] + columns + ["all", "entries"], summary))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "async_modes.json").write_text(
        json.dumps({"baseline": args.baseline, "results": results, "summary": summary}, indent=1)
    )


if __name__ == "__main__":
    main()
