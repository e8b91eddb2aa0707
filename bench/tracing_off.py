"""What tracing costs, off and on (issue 41), in one run: the multiply of the current code untraced against
the executor of a git commit from before tracing existed (tracing off), and against the same code with the
summary alone and with the full trace, over bench/async_modes.py's matrices (every
../shared/data/*.mtx.gz), at P = 2, with a noise floor low enough to see 0.5%.

    .venv/bin/python bench/tracing_off.py [--baseline cb4a606] [--processes 4] [--modes overlap]
        [--k 32] [--repeat 20] [--blocks 30] [--plant-percent 0] [--matrices M ...]

Why paired in one process: this machine (a VM with 2 cores) drifts by several percent from second
to second, and one job against another differs by 3-5% (bench/async_modes.py --baseline, which
alternates whole jobs, gave 0.990 and 1.019 for the same two trees an hour apart). So both trees are
loaded into the same process: the baseline's ``src/sparsewire`` (git archive of ``--baseline``) is
imported as ``sparsewire_baseline`` (every word ``sparsewire`` in its sources renamed), and each
``mpiexec -n 2`` job plans every matrix five times: ``current`` (this tree, untraced),
``baseline``, ``control`` (this tree again, a second plan with its own arrays: control / current
is the method's own floor, what "no difference" measures as), ``summary`` (this tree inside
``sparsewire.trace(plan)``: the summary alone) and ``trace`` (inside ``sparsewire.trace(plan, DIR)``:
every event, written at the end of each block). The five multiply the same B and then take turns
in ``--blocks`` blocks (the order rotates), each block the median of ``--repeat`` multiplies
between barriers (the slowest rank's time, after warm-ups), so drift hits all five alike; a job's
ratio for an entry is the median over blocks of the ratio within a block. The entry's ratio is the
median over ``--processes`` jobs (each job's memory layout differs), and the summary the geometric
mean over entries with a 95% interval by bootstrap over jobs (2000 resamples); the full trace's
also over the entries whose multiply takes 10 ms or more, with the largest of them.
``--plant-percent X`` makes ``current`` busy-wait X% of its warm-up median after every multiply, a
planted cost the bench must show. Writes bench/results/tracing_off.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, default_matrices, extract_baseline, geometric_mean, short_name  # noqa: E402

VARIANTS = ("current", "baseline", "control", "summary", "trace")
RATIOS = {  # name: (numerator, denominator)
    "current_over_baseline": ("current", "baseline"),
    "control_over_current": ("control", "current"),
    "summary_over_current": ("summary", "current"),
    "trace_over_current": ("trace", "current"),
}


def renamed_baseline(ref: str) -> str:
    """The ``src`` of ``ref`` with its package renamed ``sparsewire_baseline`` (every word ``sparsewire`` in
    its sources), so that it imports beside the current package; returns the folder for sys.path."""
    source = Path(extract_baseline(ref))
    package = source / "sparsewire_baseline"
    shutil.move(str(source / "sparsewire"), package)
    word = re.compile(r"\bsparsewire\b")
    for path in package.rglob("*.py"):
        path.write_text(word.sub("sparsewire_baseline", path.read_text()))
    return str(source)


def worker(
    baseline_path: str, matrices: list[str], modes: list[str], k: int, repeat: int, blocks: int, instances: int, plant: float
) -> None:
    from mpi4py import MPI

    sys.path.insert(0, baseline_path)
    import sparsewire_baseline

    import sparsewire

    packages = {v: sparsewire_baseline if v == "baseline" else sparsewire for v in VARIANTS}
    comm = MPI.COMM_WORLD
    folder = comm.bcast(tempfile.mkdtemp(prefix="sparsewire-tracing-off-") if comm.Get_rank() == 0 else None)
    entries = []
    for matrix in matrices:
        matrices_of = {"current": sparsewire.distribute(comm, matrix), "baseline": sparsewire_baseline.distribute(comm, matrix)}
        for variant in ("control", "summary", "trace"):
            matrices_of[variant] = matrices_of["current"]
        start, stop = matrices_of["current"].col_partition.range(comm.Get_rank())
        b = np.ones((stop - start, k))
        for mode in modes:
            seconds = {v: [] for v in VARIANTS}
            for instance in range(instances):
                # fresh plans each time, made in a rotating order: where a plan's arrays land biases it by a percent or two
                order = VARIANTS[instance % len(VARIANTS) :] + VARIANTS[: instance % len(VARIANTS)]
                plans = {v: matrices_of[v].spmm_plan(k, strategy="joint", mode=mode) for v in order}
                outs = {v: packages[v].empty_aligned((plans[v].output_rows, k), np.float64) for v in order}
                spin = dict.fromkeys(VARIANTS, 0.0)

                def timed(variant: str) -> float:
                    plan, out, wait = plans[variant], outs[variant], spin[variant]
                    times = []
                    for _ in range(repeat):
                        comm.Barrier()
                        started = time.perf_counter()
                        plan.multiply(b, out)
                        if wait:
                            until = time.perf_counter() + wait
                            while time.perf_counter() < until:
                                pass
                        times.append(comm.allreduce(time.perf_counter() - started, op=MPI.MAX))
                    return statistics.median(times)

                def block(variant: str) -> float:
                    if variant not in ("summary", "trace"):
                        return timed(variant)
                    # the profiling views of the current tree: a summary alone (laps), or every event to a file
                    directory = folder if variant == "trace" else None
                    with sparsewire.trace(plans[variant], directory, name=f"{mode}.json", summary=False):
                        return timed(variant)

                for variant in order:
                    block(variant)  # compiles, connects, warms
                if plant:
                    spin["current"] = comm.bcast(block("current") * plant / 100)  # the same planted cost on both ranks
                for index in range(blocks):
                    for variant in order[index % len(order) :] + order[: index % len(order)]:
                        seconds[variant].append(block(variant))
                assert np.array_equal(outs["current"], outs["baseline"]), f"{matrix}: the two trees' products differ"
                for plan in plans.values():
                    plan.close()
            times = {v: np.array(seconds[v]) for v in VARIANTS}
            entries.append(
                {
                    "matrix": short_name(matrix),
                    "mode": mode,
                    **{v: float(np.median(times[v])) for v in VARIANTS},
                    **{name: float(np.median(times[top] / times[bottom])) for name, (top, bottom) in RATIOS.items()},
                }
            )
    if comm.Get_rank() == 0:
        where = {v: str(Path(packages[v].__file__).parent) for v in ("current", "baseline")}
        print(json.dumps({"packages": where, "entries": entries}), flush=True)


def run_job(args, baseline_path: str) -> dict:
    """One ``mpiexec -n 2`` job of every matrix and mode, both trees in each process."""
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    command = [mpiexec, "-n", "2", sys.executable, __file__, "--worker", baseline_path, "--modes", args.modes]
    command += [
        "--k",
        str(args.k),
        "--repeat",
        str(args.repeat),
        "--blocks",
        str(args.blocks),
        "--instances",
        str(args.instances),
    ]
    command += ["--plant-percent", str(args.plant_percent), "--matrices", *args.matrices]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT, env=dict(os.environ))
    if completed.returncode != 0:
        raise SystemExit(f"a job failed: {completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def bootstrap_interval(ratios: np.ndarray, generator: np.random.Generator) -> tuple[float, float]:
    """95% interval of the geometric mean over entries of the median over jobs (``ratios``: jobs x
    entries), resampling jobs with replacement."""
    means = [geometric_mean(np.median(ratios[generator.integers(0, len(ratios), len(ratios))], axis=0)) for _ in range(2000)]
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="cb4a606", help="git commit from before tracing (default: cb4a606)")
    parser.add_argument("--processes", type=int, default=4, help="mpiexec jobs (default: 4)")
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--modes", default="overlap", help="executor modes, comma-separated (default: overlap)")
    parser.add_argument("--k", type=int, default=32, help="block width (default: 32)")
    parser.add_argument("--repeat", type=int, default=20, help="multiplies per block (default: 20)")
    parser.add_argument("--instances", type=int, default=5, help="fresh plans per variant, entry and job (default: 5)")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per variant and plan (default: 6)")
    parser.add_argument("--plant-percent", type=float, default=0.0, help="planted cost of current, %% of a multiply")
    parser.add_argument("--worker", metavar="BASELINE_PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(
            args.worker,
            args.matrices,
            args.modes.split(","),
            args.k,
            args.repeat,
            args.blocks,
            args.instances,
            args.plant_percent,
        )
        return
    if min(args.processes, args.instances, args.blocks, args.repeat) < 1:
        parser.error("--processes, --instances, --blocks and --repeat must be at least 1")
    baseline_path = renamed_baseline(args.baseline)
    jobs = []
    began = time.perf_counter()
    for index in range(args.processes):
        result = run_job(args, baseline_path)
        if not result["packages"]["current"].startswith(str(ROOT / "src")):
            raise SystemExit(f"the current tree was imported from {result['packages']['current']}, not {ROOT / 'src'}")
        jobs.append(result["entries"])
        print(f"job {index + 1}/{args.processes} done, {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    ratios = {key: np.array([[e[key] for e in job] for job in jobs]) for key in RATIOS}
    print(
        f"{'matrix':<22} {'mode':<8} {'current ms':>11} {'baseline ms':>12} {'control ms':>11} {'cur/base':>9} {'ctl/cur':>8} "
        f"{'summary/cur':>12} {'trace/cur':>10}"
    )
    entries = []
    for index, first in enumerate(jobs[0]):
        entry = {"matrix": first["matrix"], "mode": first["mode"]}
        entry.update({v: float(np.median([job[index][v] for job in jobs])) for v in VARIANTS})
        entry.update({key: float(np.median(values[:, index])) for key, values in ratios.items()})
        entries.append(entry)
        print(
            f"{entry['matrix']:<22} {entry['mode']:<8} {entry['current'] * 1e3:>11.3f} {entry['baseline'] * 1e3:>12.3f} "
            f"{entry['control'] * 1e3:>11.3f} {entry['current_over_baseline']:>9.4f} {entry['control_over_current']:>8.4f} "
            f"{entry['summary_over_current']:>12.4f} {entry['trace_over_current']:>10.4f}"
        )
    generator = np.random.default_rng(20261126)
    summary = {}
    for key, values in ratios.items():
        summary[key] = geometric_mean(e[key] for e in entries)
        summary[key + "_interval"] = bootstrap_interval(values, generator)
    long = [i for i, e in enumerate(entries) if e["current"] >= 0.010]
    summary["entries_of_10ms_or_more"] = len(long)
    if long:
        summary["trace_over_current_10ms_or_more"] = geometric_mean(entries[i]["trace_over_current"] for i in long)
        summary["trace_over_current_10ms_or_more_interval"] = bootstrap_interval(ratios["trace_over_current"][:, long], generator)
        summary["trace_over_current_10ms_or_more_largest"] = max(entries[i]["trace_over_current"] for i in long)
    print(
        f"geometric means over {len(entries)} entries, {args.processes} jobs: current / baseline "
        f"{summary['current_over_baseline']:.4f} (95% {summary['current_over_baseline_interval'][0]:.4f}-"
        f"{summary['current_over_baseline_interval'][1]:.4f}); control / current {summary['control_over_current']:.4f} "
        f"(95% {summary['control_over_current_interval'][0]:.4f}-{summary['control_over_current_interval'][1]:.4f})"
        + (f"; planted cost {args.plant_percent}% on current" if args.plant_percent else "")
    )
    interval = summary["summary_over_current_interval"]
    print(
        f"summary only / untraced {summary['summary_over_current']:.4f} (95% {interval[0]:.4f}-{interval[1]:.4f}); "
        f"full trace / untraced {summary['trace_over_current']:.4f}"
        + (
            f", where a multiply takes 10 ms or more ({len(long)} entries) {summary['trace_over_current_10ms_or_more']:.4f} "
            f"(95% {summary['trace_over_current_10ms_or_more_interval'][0]:.4f}-"
            f"{summary['trace_over_current_10ms_or_more_interval'][1]:.4f}; largest entry "
            f"{summary['trace_over_current_10ms_or_more_largest']:.4f})"
            if long
            else ""
        )
    )
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    record = {"baseline": args.baseline, "processes": args.processes, "plant_percent": args.plant_percent, "k": args.k}
    record.update(repeat=args.repeat, blocks=args.blocks, instances=args.instances)
    (results / "tracing_off.json").write_text(
        json.dumps({**record, "entries": entries, "summary": summary, "jobs": jobs}, indent=1)
    )


if __name__ == "__main__":
    main()
