"""sparsewire's default SpMM beside PETSc's MatMatMult (MPIAIJ x MPIDense, numeric phase), same
matrices, same row partition, same B, same P, in one run.

    .venv/bin/python bench/peers/vs_petsc.py [--matrices M ...] [--ks 8,32,128] [--repeat 20]

For every matrix and k: P = 1, 2, 4 with one thread per rank (P = 4 oversubscribes the 2 cores of
the reference machine: reported, not compared) and P x T = 1 x 2 (our threads; PETSc at P = 2 on
the same two cores). Ours runs ``mpiexec -n P sparsewire spmm M --json --partition even`` with no strategy, mode
or thread flag but ``--threads 1`` where T = 1 is asked (the defaults are what a user gets, but for PETSc's row
partition: ``bench/cluster/vs_peers.py`` compares our default partition too); PETSc runs
``bench/peers/petsc_worker.py`` under the system ``mpirun`` with the system Python (see bench/README.md).
Prints a table of medians and ratios (ours / PETSc; below 1 is faster) with the geometric means,
compares checksums (sum of C), and writes bench/results/vs_petsc.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, job, short_name  # noqa: E402

from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.partition import partition  # noqa: E402
from sparsewire.profile import format_table  # noqa: E402

PETSC_DIR = "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real"
# (label, ranks, our threads, PETSc ranks)
CONFIGURATIONS = [("P=1", 1, 1, 1), ("P=2", 2, 1, 2), ("P=4 (oversubscribed)", 4, 1, 4), ("PxT=1x2 vs PETSc P=2", 1, 2, 2)]


def run_petsc(directory: str, ranks: int, ks: list[int], repeat: int) -> dict[int, dict]:
    environment = {**os.environ, "PETSC_DIR": os.environ.get("PETSC_DIR", PETSC_DIR), "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    command = [
        "mpirun",
        "--allow-run-as-root",
        "-n",
        str(ranks),
        "/usr/bin/python3",
        str(ROOT / "bench" / "peers" / "petsc_worker.py"),
        directory,
        ",".join(map(str, ks)),
        str(repeat),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=1800)
    if completed.returncode != 0:
        raise RuntimeError(f"PETSc worker failed: {completed.stderr[-2000:]}")
    return {entry["k"]: entry for entry in map(json.loads, completed.stdout.strip().splitlines())}


def run_ours(matrix: str, ranks: int, threads: int | None, k: int, repeat: int) -> dict:
    command = job(ranks, "-m", "sparsewire", "spmm", matrix, "--json", "--k", k, "--repeat", repeat)
    command += ["--partition", "even"]  # PETSc's row partition
    if threads is not None:
        command += ["--threads", str(threads)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if completed.returncode != 0:
        raise RuntimeError(f"sparsewire failed: {completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--ks", default="8,32,128", help="block widths (default: 8,32,128)")
    parser.add_argument("--repeat", type=int, default=20, help="timed multiplies per run (default: 20)")
    args = parser.parse_args()
    if shutil.which("mpirun") is None or not Path("/usr/bin/python3").exists():
        sys.exit("bench/peers/vs_petsc.py needs Debian's python3-petsc4py and its mpirun; see bench/README.md")
    ks = [int(v) for v in args.ks.split(",")]
    rows, results = [], []
    for matrix in args.matrices:
        name = short_name(matrix)
        print(f"{name}: loading", file=sys.stderr, flush=True)
        a = load_matrix(matrix)
        with tempfile.TemporaryDirectory() as directory:
            np.save(f"{directory}/indptr.npy", a.indptr.astype(np.int64))
            np.save(f"{directory}/indices.npy", a.indices.astype(np.int64))
            petsc_cache: dict[int, dict] = {}
            for label, ranks, threads, petsc_ranks in CONFIGURATIONS:
                if petsc_ranks not in petsc_cache:
                    offsets, _ = partition(a, petsc_ranks, "even").partitions
                    np.save(f"{directory}/offsets.npy", offsets.offsets)
                    print(f"{name}: PETSc P={petsc_ranks}", file=sys.stderr, flush=True)
                    petsc_cache[petsc_ranks] = run_petsc(directory, petsc_ranks, ks, args.repeat)
                for k in ks:
                    print(f"{name}: ours {label} k={k}", file=sys.stderr, flush=True)
                    ours = run_ours(matrix, ranks, threads, k, args.repeat)
                    petsc = petsc_cache[petsc_ranks][k]
                    ratio = ours["median_seconds"] / petsc["median_seconds"]
                    same = math.isclose(ours["checksum_sum"], petsc["checksum_sum"], rel_tol=1e-9, abs_tol=1e-6)
                    entry = {
                        "matrix": name,
                        "configuration": label,
                        "ranks": ranks,
                        "threads": ours["threads"],
                        "petsc_ranks": petsc_ranks,
                        "k": k,
                        "ours_seconds": ours["median_seconds"],
                        "petsc_seconds": petsc["median_seconds"],
                        "ratio": ratio,
                        "strategy": ours["strategy"],
                        "mode": ours["mode"],
                        "checksums_agree": same,
                        "ours_checksum": ours["checksum_sum"],
                        "petsc_checksum": petsc["checksum_sum"],
                    }
                    results.append(entry)
                    rows.append(
                        [
                            name,
                            label,
                            k,
                            f"{ours['strategy']}/{ours['mode']}",
                            f"{petsc['median_seconds'] * 1e3:.3f}",
                            f"{ours['median_seconds'] * 1e3:.3f}",
                            f"{ratio:.2f}",
                            "yes" if same else "NO",
                        ]
                    )
    print(
        format_table(
            ["matrix", "configuration", "k", "ours (strategy/mode)", "PETSc ms", "ours ms", "ours/PETSc", "checksums agree"], rows
        )
    )
    print()
    summary = []
    for label, *_ in CONFIGURATIONS:
        for k in ks:
            ratios = [e["ratio"] for e in results if e["configuration"] == label and e["k"] == k]
            if ratios:
                summary.append([label, k, f"{math.exp(np.mean(np.log(ratios))):.3f}", f"{max(ratios):.2f}", len(ratios)])
    print(format_table(["configuration", "k", "geometric mean ours/PETSc", "worst", "matrices"], summary))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "vs_petsc.json").write_text(json.dumps({"results": results}, indent=1))
    if not all(e["checksums_agree"] for e in results):
        sys.exit("checksums differ between sparsewire and PETSc")


if __name__ == "__main__":
    main()
