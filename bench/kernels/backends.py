"""The executor's two kernel backends side by side, in one run: NumPy with the compiled kernels
against torch tensors with PyTorch's sparse CSR products (on the CPU).

    .venv/bin/python bench/kernels/backends.py [--matrices M ...] [--ks 8,32] [--dtype float32] [--ranks 2]
        [--threads 1] [--modes overlap,early] [--repeat 20]

Per matrix, k and mode: ``mpiexec -n RANKS sparsewire spmm M --backend B`` for both backends
(alternating, the same strategy ``auto``), the median time per multiply of the slowest rank, and
the ratio torch / numpy; the two C checksums must agree (to float32 rounding) and the bytes MPI
delivered must be equal. Ranks x threads above the cores oversubscribe the 2-core reference
machine. Writes bench/results/backends.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, geometric_mean, job, run_json, short_name  # noqa: E402


def run(ranks: int, matrix: str, k: int, dtype: str, mode: str, threads: int, repeat: int, backend: str) -> dict:
    command = job(
        ranks,
        "-m",
        "sparsewire",
        "spmm",
        matrix,
        "--k",
        str(k),
        "--dtype",
        dtype,
        "--mode",
        mode,
        "--threads",
        str(threads),
        "--repeat",
        str(repeat),
        "--backend",
        backend,
        "--json",
        "--partition",
        "even",  # the backends compared on one partition, the original order
    )
    return run_json(command, timeout=1200, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", help="matrix files or generator specs (default: ../shared/data)")
    parser.add_argument("--ks", default="8,32", help="block widths (default: 8,32)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="element type (default: float32)")
    parser.add_argument("--ranks", type=int, default=2, help="MPI ranks (default: 2)")
    parser.add_argument("--threads", type=int, default=1, help="threads per rank (default: 1)")
    parser.add_argument("--modes", default="overlap,early", help="executor modes (default: overlap,early)")
    parser.add_argument("--repeat", type=int, default=20, help="timed multiplies per run (default: 20)")
    args = parser.parse_args()
    from sparsewire.profile import format_table

    matrices = args.matrices or default_matrices([])
    rows, results, ratios = [], [], []
    for matrix in matrices:
        for k in [int(v) for v in args.ks.split(",")]:
            for mode in args.modes.split(","):
                print(f"{short_name(matrix)} k = {k} {mode} ...", file=sys.stderr, flush=True)
                numpy_run = run(args.ranks, matrix, k, args.dtype, mode, args.threads, args.repeat, "numpy")
                torch_run = run(args.ranks, matrix, k, args.dtype, mode, args.threads, args.repeat, "torch")
                scale = max(1.0, abs(numpy_run["checksum_fro"]))
                agree = (
                    abs(numpy_run["checksum_fro"] - torch_run["checksum_fro"]) <= 1e-4 * scale
                    and numpy_run["measured_bytes"] == torch_run["measured_bytes"]
                )
                ratio = torch_run["median_seconds"] / numpy_run["median_seconds"]
                ratios.append(ratio)
                results.append(
                    {
                        "matrix": short_name(matrix),
                        "k": k,
                        "mode": mode,
                        "numpy_seconds": numpy_run["median_seconds"],
                        "torch_seconds": torch_run["median_seconds"],
                        "agree": agree,
                        "bytes": numpy_run["measured_bytes"],
                    }
                )
                rows.append(
                    [
                        short_name(matrix),
                        k,
                        mode,
                        f"{numpy_run['median_seconds'] * 1e3:.3f}",
                        f"{torch_run['median_seconds'] * 1e3:.3f}",
                        f"{ratio:.2f}",
                        "yes" if agree else "NO",
                    ]
                )
    print(format_table(["matrix", "k", "mode", "numpy ms", "torch ms", "torch / numpy", "same C and bytes"], rows))
    print(
        f"\ngeometric mean torch / numpy: {geometric_mean(ratios):.3f} over {len(ratios)} runs "
        f"({args.ranks} ranks x {args.threads} threads, {args.dtype})"
    )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "backends.json").write_text(
        json.dumps({"ranks": args.ranks, "threads": args.threads, "dtype": args.dtype, "results": results}, indent=1)
    )
    if not all(r["agree"] for r in results):
        raise SystemExit("the backends disagree on C or on the bytes; see the table")


if __name__ == "__main__":
    main()
