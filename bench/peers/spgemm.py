"""Distributed SpGEMM ``C = A x A`` against single-process SuiteSparse:GraphBLAS.

For every matrix (values: deterministic integers 1..9, ``--values random:1``) and semiring
(plus_times, min_plus): the single-process GraphBLAS product timed in this process (the P = 1
reference), then ``mpiexec -n P sparsewire spgemm ... --json`` for P in {1, 2, 4} (4 = a 2 x 2
grid for SUMMA) and both algorithms (``summa``; ``1d`` with its strategy chosen by predicted
bytes), each with ``--check`` off and ``--repeat R``. Per run: median seconds, bytes moved, nnz(C),
peak stored entries held by a rank, peak resident memory of a rank; the ratio is the reference time
over the run's time. Finally SUMMA at P = 4 with ``--phases 4`` against ``--phases 1`` (peak memory
with and without phases).

Matrices whose A x A has more than ``--max-output-nnz`` entries (measured by the reference run) are
reported and skipped for the distributed runs: on a 2-core machine their 12 runs take too long.

Usage:
    .venv/bin/python bench/peers/spgemm.py [--matrices SPEC ...] [--ranks 1 2 4] [--repeat 3]
        [--max-output-nnz 20000000] [--output bench/results/spgemm.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
from common import ROOT, default_matrices, job, short_name  # noqa: E402

from sparsewire.profile import format_table  # noqa: E402
from sparsewire.spgemm import (  # noqa: E402
    get_semiring,
    load_operand,
    reference_product,
)

SEMIRINGS = ["plus_times", "min_plus"]
ALGORITHMS = ["summa", "1d"]
VALUES = "random:1"


def run_cli(ranks: int, spec: str, *args: str, timeout: int = 1800) -> dict:
    command = job(ranks, "-m", "sparsewire", "spgemm", spec, "--json", *args)
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure(spec: str, ranks: list[int], repeat: int, max_output_nnz: int) -> list[dict]:
    matrix = load_operand(spec, VALUES)
    entries = []
    for name in SEMIRINGS:
        semiring = get_semiring(name)
        started = time.perf_counter()
        product = reference_product(matrix, matrix, semiring)  # warm-up; tells nnz(C)
        times = [time.perf_counter() - started]
        if product.nnz <= max_output_nnz:
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                reference_product(matrix, matrix, semiring)
                times.append(time.perf_counter() - started)
        reference = statistics.median(times)
        base = {"matrix": short_name(spec), "nnz": int(matrix.nnz), "semiring": name}
        entries.append(
            {
                **base,
                "algorithm": "graphblas (1 process)",
                "ranks": 1,
                "grid": "-",
                "median_seconds": reference,
                "bytes_moved": 0,
                "nnz_out": int(product.nnz),
                "ratio": 1.0,
            }
        )
        print(f"{short_name(spec)} {name}: reference {reference:.3f} s, nnz(C) = {product.nnz}", file=sys.stderr, flush=True)
        if product.nnz > max_output_nnz:
            entries[-1]["skipped_distributed"] = f"nnz(C) {product.nnz} > --max-output-nnz {max_output_nnz}"
            continue
        for algorithm in ALGORITHMS:
            for count in ranks:
                report = run_cli(
                    count, spec, "--semiring", name, "--algorithm", algorithm, "--values", VALUES, "--repeat", str(repeat)
                )
                assert report["nnz_out"] == product.nnz, (spec, name, algorithm, count)
                assert report["bytes_moved"] == report["predicted_bytes"]
                entries.append(
                    {
                        **base,
                        **{
                            key: report[key]
                            for key in (
                                "algorithm",
                                "ranks",
                                "grid",
                                "median_seconds",
                                "bytes_moved",
                                "nnz_out",
                                "peak_held_entries",
                                "peak_rss_bytes",
                                "checksum_sum",
                            )
                        },
                        "ratio": reference / report["median_seconds"],
                    }
                )
                print(f"  {report['algorithm']} P={count}: {report['median_seconds']:.3f} s", file=sys.stderr, flush=True)
        if name == "plus_times" and 4 in ranks:
            for phases in (1, 4):
                report = run_cli(
                    4,
                    spec,
                    "--semiring",
                    name,
                    "--algorithm",
                    "summa",
                    "--phases",
                    str(phases),
                    "--values",
                    VALUES,
                    "--repeat",
                    "1",
                )
                entries.append(
                    {
                        **base,
                        "algorithm": f"summa phases={phases}",
                        "ranks": 4,
                        "grid": report["grid"],
                        **{
                            key: report[key]
                            for key in ("median_seconds", "bytes_moved", "nnz_out", "peak_held_entries", "peak_rss_bytes")
                        },
                        "ratio": reference / report["median_seconds"],
                    }
                )
    return entries


def print_table(entries: list[dict]) -> None:
    headers = [
        "matrix",
        "semiring",
        "algorithm",
        "P",
        "grid",
        "median s",
        "x graphblas",
        "MB moved",
        "nnz(C)",
        "peak held entries",
        "peak RSS MB",
    ]
    rows = []
    for e in entries:
        rows.append(
            [
                e["matrix"],
                e["semiring"],
                e["algorithm"],
                e["ranks"],
                e["grid"],
                f"{e['median_seconds']:.3f}",
                f"{e['ratio']:.2f}",
                f"{e['bytes_moved'] / 1e6:.2f}",
                e["nnz_out"],
                e.get("peak_held_entries", "-"),
                f"{e['peak_rss_bytes'] / 1e6:.0f}" if "peak_rss_bytes" in e else "-",
            ]
        )
        if "skipped_distributed" in e:
            rows.append([e["matrix"], e["semiring"], "(distributed runs skipped: " + e["skipped_distributed"] + ")"] + [""] * 8)
    print(format_table(headers, rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="+", default=default_matrices(["rmat:14:8:1"]))
    parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-output-nnz", type=int, default=20_000_000)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "spgemm.json"))
    args = parser.parse_args()
    entries = []
    for spec in args.matrices:
        entries.extend(measure(spec, args.ranks, args.repeat, args.max_output_nnz))
    print_table(entries)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(entries, indent=1))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
