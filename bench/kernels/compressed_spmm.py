"""SpMM with compressed messages: bytes on the wire and time per multiply of each codec beside
``none``, in one run, with C checked against the bound each plan states.

    .venv/bin/python bench/kernels/compressed_spmm.py [--matrices M ...] [--ranks 2] [--codecs none,bf16,fp16,int8]
        [--strategy joint] [--mode overlap] [--k 32] [--repeat 20]

For every matrix (default: every ../shared/data/*.mtx.gz), one ``mpiexec -n RANKS sparsewire spmm M
--compress C --check --json`` per codec, alternating the codecs' order per matrix; prints per matrix and
codec the payload and wire bytes per multiply (MPI's receive statuses), their ratio, the median time per
multiply and its ratio to ``none``, and whether ``--check`` passed; then the geometric means. On this
machine every rank shares memory: the time ratio is what coding costs where the wire is free, not what it
saves on a slow link. Writes bench/results/compressed_spmm.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, geometric_mean, job, short_name  # noqa: E402


def run(matrix: str, codec: str, args) -> dict:
    command = job(args.ranks, "-m", "sparsewire", "spmm")
    command += [matrix, "--compress", codec, "--strategy", args.strategy, "--mode", args.mode, "--k", str(args.k)]
    command += ["--repeat", str(args.repeat), "--check", "--json", "--partition", "even"]  # the codecs on one partition
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    if completed.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=None)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--codecs", default="none,bf16,fp16,int8")
    parser.add_argument("--strategy", default="joint")
    parser.add_argument("--mode", default="overlap")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    codecs = args.codecs.split(",")
    entries = []
    for index, matrix in enumerate(args.matrices or default_matrices([])):
        print(f"{short_name(matrix)} ...", file=sys.stderr, flush=True)
        order = codecs if index % 2 == 0 else codecs[::-1]
        runs = {codec: run(matrix, codec, args) for codec in order}
        for codec in codecs:
            r = runs[codec]
            entries.append(
                {
                    "matrix": short_name(matrix),
                    "codec": codec,
                    "payload_bytes": r["payload_bytes"],
                    "wire_bytes": r["wire_bytes"],
                    "wire_ratio": r["wire_bytes"] / r["payload_bytes"] if r["payload_bytes"] else None,
                    "median_seconds": r["median_seconds"],
                    "time_ratio": r["median_seconds"] / runs["none"]["median_seconds"] if "none" in runs else None,
                    "check_passed": r["check_passed"],
                    "max_abs_error": r["max_abs_error"],
                }
            )
    print(f"P = {args.ranks}, strategy {args.strategy}, mode {args.mode}, k = {args.k}, float64, median of {args.repeat}")
    print(f"{'matrix':<18} {'codec':<5} {'payload':>10} {'wire':>10} {'wire/payload':>12} {'ms':>8} {'time/none':>9}  check")
    for e in entries:
        ratio = "-" if e["wire_ratio"] is None else f"{e['wire_ratio']:.3f}"
        print(
            f"{e['matrix']:<18} {e['codec']:<5} {e['payload_bytes']:>10} {e['wire_bytes']:>10} {ratio:>12} "
            f"{e['median_seconds'] * 1e3:>8.3f} {e['time_ratio']:>9.3f}  {'passed' if e['check_passed'] else 'FAILED'}"
        )
    summary = {}
    for codec in codecs:
        chosen = [e for e in entries if e["codec"] == codec and e["wire_ratio"] is not None]
        summary[codec] = {
            "wire_ratio": geometric_mean(e["wire_ratio"] for e in chosen),
            "time_ratio": geometric_mean(e["time_ratio"] for e in chosen),
            "all_checks_passed": all(e["check_passed"] for e in chosen),
        }
        print(
            f"{codec}: geometric means wire/payload {summary[codec]['wire_ratio']:.3f}, time/none "
            f"{summary[codec]['time_ratio']:.3f}; checks {'all passed' if summary[codec]['all_checks_passed'] else 'FAILED'}"
        )
    out = ROOT / "bench" / "results" / "compressed_spmm.json"
    out.write_text(json.dumps({"arguments": vars(args), "entries": entries, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
