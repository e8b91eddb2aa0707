"""What the profiling views cost (issue 41): per matrix (bench/async_modes.py's: every
../shared/data/*.mtx.gz), at P = 2, the median time per multiply untraced, with the summary only
(``sparsewire.trace(plan)``: counts and times per phase, no events) and with the full trace
(``sparsewire.trace(plan, DIR)``: every event), for each mode and k, in one run.

    .venv/bin/python bench/trace_overhead.py [--matrices M ...] [--modes overlap,bulk,early] [--ks 32]
        [--repeat 20] [--rounds 3]

One ``mpiexec -n 2`` run per matrix plans once per mode and k, then ``--rounds`` times measures the
three variants in a rotating order, each as the median of ``--repeat`` multiplies between barriers
(the slowest rank's time), and keeps each variant's fastest median. Prints per entry the times and
the ratios summary / untraced and trace / untraced, and their geometric means, over all entries and
over those whose untraced multiply takes 10 ms or more; writes bench/results/trace_overhead.json.
Whether tracing *off* costs anything is the comparison with the executor before tracing existed:
``bench/tracing_off.py`` (both trees in one process, taking turns).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, default_matrices, geometric_mean, short_name  # noqa: E402

VARIANTS = ("untraced", "summary", "trace")


def worker(matrix: str, modes: list[str], ks: list[int], repeat: int, rounds: int) -> None:
    import numpy as np
    from mpi4py import MPI

    import sparsewire

    comm = MPI.COMM_WORLD
    distributed = sparsewire.distribute(comm, matrix)
    start, stop = distributed.col_partition.range(comm.Get_rank())
    folder = comm.bcast(tempfile.mkdtemp(prefix="sparsewire-overhead-") if comm.Get_rank() == 0 else None)
    entries = []
    for mode in modes:
        for k in ks:
            with distributed.spmm_plan(k, strategy="joint", mode=mode) as plan:
                b = np.ones((stop - start, k))
                out = sparsewire.empty_aligned((plan.output_rows, k), np.float64)
                plan.multiply(b, out)  # compiles, connects

                def median(run_one) -> float:
                    times = []
                    for _ in range(repeat):
                        comm.Barrier()
                        started = time.perf_counter()
                        run_one()
                        times.append(comm.allreduce(time.perf_counter() - started, op=MPI.MAX))
                    return statistics.median(times)

                best = {variant: float("inf") for variant in VARIANTS}
                for round_index in range(rounds):
                    order = VARIANTS[round_index % 3 :] + VARIANTS[: round_index % 3]
                    for variant in order:
                        if variant == "untraced":
                            seconds = median(lambda: plan.multiply(b, out))
                        else:
                            directory = folder if variant == "trace" else None
                            with sparsewire.trace(plan, directory, name=f"{mode}-{k}.json", summary=False):
                                seconds = median(lambda: plan.multiply(b, out))
                        best[variant] = min(best[variant], seconds)
                entries.append({"matrix": short_name(matrix), "mode": mode, "k": k, **best})
    if comm.Get_rank() == 0:
        print(json.dumps(entries), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--modes", default="overlap,bulk,early", help="executor modes (default: overlap,bulk,early)")
    parser.add_argument("--ks", default="32", help="block widths (default: 32)")
    parser.add_argument("--repeat", type=int, default=20, help="multiplies per median (default: 20)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three variants (default: 3)")
    parser.add_argument("--worker", metavar="MATRIX", help=argparse.SUPPRESS)
    args = parser.parse_args()
    modes, ks = args.modes.split(","), [int(k) for k in args.ks.split(",")]
    if args.worker:
        worker(args.worker, modes, ks, args.repeat, args.rounds)
        return
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    entries = []
    for matrix in args.matrices:
        print(f"timing {short_name(matrix)} ...", file=sys.stderr, flush=True)
        command = [mpiexec, "-n", "2", sys.executable, __file__, "--worker", matrix, "--modes", args.modes, "--ks", args.ks]
        command += ["--repeat", str(args.repeat), "--rounds", str(args.rounds)]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT)
        if completed.returncode != 0:
            raise SystemExit(f"{short_name(matrix)} failed: {completed.stderr[-2000:]}")
        entries += json.loads(completed.stdout.strip().splitlines()[-1])
    header = f"{'matrix':<22} {'mode':<8} {'k':>4} {'untraced ms':>12} {'summary ms':>11} {'trace ms':>9}"
    print(header + f" {'summary/off':>12} {'trace/off':>10}")
    for e in entries:
        e["summary_ratio"], e["trace_ratio"] = e["summary"] / e["untraced"], e["trace"] / e["untraced"]
        print(
            f"{e['matrix']:<22} {e['mode']:<8} {e['k']:>4} {e['untraced'] * 1e3:>12.3f} {e['summary'] * 1e3:>11.3f} "
            f"{e['trace'] * 1e3:>9.3f} {e['summary_ratio']:>12.3f} {e['trace_ratio']:>10.3f}"
        )
    long = [e for e in entries if e["untraced"] >= 0.010]
    summary = {
        "summary_over_untraced": geometric_mean(e["summary_ratio"] for e in entries),
        "trace_over_untraced": geometric_mean(e["trace_ratio"] for e in entries),
        "entries_of_10ms_or_more": len(long),
        "trace_over_untraced_10ms_or_more": geometric_mean(e["trace_ratio"] for e in long),
        "summary_over_untraced_10ms_or_more": geometric_mean(e["summary_ratio"] for e in long),
    }
    print(
        f"geometric means: summary / untraced {summary['summary_over_untraced']:.4f}, trace / untraced "
        f"{summary['trace_over_untraced']:.4f}; where a multiply takes 10 ms or more ({len(long)} entries): summary "
        f"{summary['summary_over_untraced_10ms_or_more']:.4f}, trace {summary['trace_over_untraced_10ms_or_more']:.4f}"
    )
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "trace_overhead.json").write_text(json.dumps({"entries": entries, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
