"""Strategy comparison for distributed SpMM: volumes at P = 8, 16, 32 and measured time at P = 4.

Part 1 (no MPI): for each matrix, plan every strategy from the global matrix and print bytes per
multiply (k = 32, float32), with ratios to the sparsity-oblivious baseline `block` and to `column`.

Part 2 (MPI): for each matrix, one `mpiexec -n 4 sparsewire spmm --strategy all --mode all --check`
run, so every strategy and mode is timed in the same run as the baseline (`block`, bulk); prints
median milliseconds per multiply and the speedup over the baseline.

Usage:
    .venv/bin/python bench/planner/spmm_strategies.py [--matrices SPEC ...] [--ranks 8 16 32] [--time-ranks 4]
        [--repeat 10] [--output bench/results/spmm_strategies.json]

Matrices default to every file in ../shared/data (when present) plus generated ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from common import default_matrices, short_name  # noqa: E402

from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.partition import partition  # noqa: E402
from sparsewire.plan import (  # noqa: E402
    FLAT_STRATEGIES,
    strategy_stats,
)
from sparsewire.profile import format_table  # noqa: E402

GENERATED = ["rmat:16:8:1", "delaunay:65536:1", "stencil2d:256", "stencil3d:40:27"]
STRATEGIES = list(FLAT_STRATEGIES)


def volume_rows(spec: str, matrix, ranks: list[int], k: int, element_bytes: int) -> list[dict]:
    rows = []
    for n_ranks in ranks:
        row_partition, col_partition = partition(matrix, n_ranks, "even").partitions
        entry = {"matrix": short_name(spec), "ranks": n_ranks, "k": k, "element_bytes": element_bytes}
        for strategy in STRATEGIES:
            started = time.perf_counter()
            stats = strategy_stats(matrix, row_partition, col_partition, strategy, k, element_bytes)
            entry[strategy.value] = {
                **stats.as_dict(),
                "plan_seconds": round(time.perf_counter() - started, 4),
            }
        rows.append(entry)
    return rows


def timing_run(spec: str, ranks: int, repeat: int, k: int) -> dict:
    python = sys.executable
    mpiexec = Path(python).parent / "mpiexec"
    command = [
        str(mpiexec) if mpiexec.exists() else "mpiexec",
        "-n",
        str(ranks),
        python,
        "-m",
        "sparsewire",
        "spmm",
        spec,
        "--partition",
        "even",  # the strategies compared on the original order, where they differ most
        "--strategy",
        "all",
        "--mode",
        "all",
        "--check",
        "--json",
        "--repeat",
        str(repeat),
        "--k",
        str(k),
    ]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr}")
    return json.loads(completed.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="+", default=None, help="paths or generator specs (default: shared data + generated)")
    parser.add_argument("--ranks", nargs="+", type=int, default=[8, 16, 32], help="rank counts for the volume table")
    parser.add_argument("--time-ranks", type=int, default=4, help="ranks for the timed runs (0 skips them)")
    parser.add_argument("--repeat", type=int, default=10, help="timed multiplies per run")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "spmm_strategies.json"))
    args = parser.parse_args()
    matrices = args.matrices or default_matrices(GENERATED)

    volumes, timings = [], []
    for spec in matrices:
        print(f"[volumes] {short_name(spec)}", file=sys.stderr, flush=True)
        matrix = load_matrix(spec)
        volumes += volume_rows(spec, matrix, args.ranks, args.k, 4)
    table = []
    for entry in volumes:
        block, column = entry["block"]["total_bytes"], entry["column"]["total_bytes"]
        table.append(
            [entry["matrix"], entry["ranks"]]
            + [f"{entry[s.value]['total_bytes'] / 1e6:.2f}" for s in STRATEGIES]
            + [
                f"{column / block:.4f}" if block else "-",
                f"{entry['joint']['total_bytes'] / column:.4f}" if column else "-",
                f"{entry['joint']['plan_seconds']:.2f}",
            ]
        )
    print(f"\nBytes per multiply in MB (k = {args.k}, float32, even rows)")
    print(format_table(["matrix", "P"] + [s.value for s in STRATEGIES] + ["column/block", "joint/column", "joint plan s"], table))

    if args.time_ranks > 0:
        for spec in matrices:
            print(f"[timing] {short_name(spec)} on {args.time_ranks} ranks", file=sys.stderr, flush=True)
            report = timing_run(spec, args.time_ranks, args.repeat, args.k)
            timings.append({**report, "matrix": short_name(spec)})
        table = []
        for report in timings:
            baseline = next(r["median_seconds"] for r in report["runs"] if r["strategy"] == "block" and r["mode"] == "bulk")
            for run in report["runs"]:
                table.append(
                    [
                        report["matrix"],
                        run["strategy"],
                        run["mode"],
                        f"{run['planned_bytes'] / 1e6:.2f}",
                        "yes" if run["measured_bytes"] == run["planned_bytes"] else "NO",
                        f"{run['median_seconds'] * 1e3:.2f}",
                        f"{baseline / run['median_seconds']:.2f}x",
                        f"{run['max_abs_error']:.1e}",
                    ]
                )
        print(f"\nMeasured time per multiply, P = {args.time_ranks}, k = {args.k}, float64 (baseline: block, bulk)")
        print(
            format_table(
                ["matrix", "strategy", "mode", "MB/multiply", "measured=planned", "median ms", "speedup", "max abs error"], table
            )
        )

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"volumes": volumes, "timings": timings}, indent=1))
    print(f"\nwrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
