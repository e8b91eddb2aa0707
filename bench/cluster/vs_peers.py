"""sparsewire's default SpMM beside PETSc's ``MatMatMult`` over the emulated cluster's links, in one run.

    sudo .venv/bin/python bench/cluster/vs_peers.py [--matrices M,...] [--layouts 2x2,4x1] [--rates 1gbit,5gbit]
        [--k 32] [--repeat 10] [--rounds 3]

Per layout (``2x2``: 2 nodes x 2 ranks; ``4x1``) and rate: the cluster up and measured (``sparsewire calibrate
--network``, as ``emulated.py`` does); then per matrix, the two sides taking turns ``--rounds`` times (a machine
that drifts slows both alike):

- ours: ``sparsewire spmm M --topology network.json --k K --repeat R --json``, our default flags (the partition,
  strategy and mode chosen for the user), under our MPICH over the links;
- PETSc: ``bench/peers/petsc_worker.py`` (MPIAIJ x MPIDense, even rows, the same B) under Debian's Open MPI over the
  same links (``EmulatedCluster``'s ``OPENMPI_OPTIONS``: TCP only between nodes, shared memory inside one,
  4 MB socket buffers, yielding when idle); install steps in bench/README.md.

Per side: the median of its rounds' median seconds per multiply, the checksum (sum of C; the two must agree), and
the bytes the links' kernel counters saw over its whole run (planning, warm-up and setup included) divided by the
multiplies of the run (ours R + 1, PETSc R + 2): an upper bound of its inter-node bytes per multiply, beside ours
from the plan and MPI's receive statuses. ``bound``: the busiest node's bytes per multiply (sent or received, the
larger) over the calibrated inter-node rate of every node at once; ``time / bound`` says how close a side comes
to its own bytes. 4 ranks on the 2-core machine are oversubscribed (both sides alike). Writes
bench/results/vs_peers.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # emulated.py
from common import ROOT, short_name  # noqa: E402
from emulated import DEFAULT_MATRICES, calibrated_cluster, run_json  # noqa: E402

from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.partition import partition  # noqa: E402
from sparsewire.profile import format_table  # noqa: E402

PETSC_DIR = "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real"
WORKER = ROOT / "bench" / "peers" / "petsc_worker.py"


def link_bytes(cluster, before) -> tuple[int, int]:
    """Bytes the links' counters saw since ``before``: the sum over nodes of what they sent, and the busiest node's
    larger direction."""
    after = cluster.counters()
    deltas = [(tx - tx0, rx - rx0) for (tx, rx), (tx0, rx0) in zip(after, before)]
    return sum(tx for tx, _ in deltas), max(max(pair) for pair in deltas)


def ours(cluster, per_node: int, matrix: str, network: str, k: int, repeat: int) -> dict:
    before = cluster.counters()
    report = run_json(
        cluster, per_node, ["spmm", matrix, "--topology", network, "--k", str(k), "--repeat", str(repeat), "--json"], 1800
    )
    total, busiest = link_bytes(cluster, before)
    multiplies = repeat + 1
    return {"seconds": report["median_seconds"], "checksum": report["checksum_sum"], "strategy": report["strategy"],
            "mode": report["mode"], "planned_inter_bytes": report.get("inter_group_bytes"),
            "mpi_inter_bytes": report.get("measured_inter_group_bytes"), "link_bytes_per_multiply": total / multiplies,
            "busiest_node_bytes_per_multiply": busiest / multiplies}  # fmt: skip


def petsc(cluster, per_node: int, directory: str, k: int, repeat: int) -> dict:
    environment = {**os.environ, "PETSC_DIR": os.environ.get("PETSC_DIR", PETSC_DIR)}
    before = cluster.counters()
    command = ["/usr/bin/python3", str(WORKER), directory, str(k), str(repeat)]
    completed = cluster.run(per_node, command, launcher="openmpi", env=environment, timeout=1800)
    if completed.returncode != 0:
        raise SystemExit(f"PETSc failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    total, busiest = link_bytes(cluster, before)
    entry = json.loads(completed.stdout.strip().splitlines()[-1])
    multiplies = repeat + 2
    return {"seconds": entry["median_seconds"], "checksum": entry["checksum_sum"], "link_bytes_per_multiply": total / multiplies,
            "busiest_node_bytes_per_multiply": busiest / multiplies}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", default=",".join([m for m in DEFAULT_MATRICES if Path(m).exists()] + ["rmat:16:8:1"]))
    parser.add_argument("--layouts", default="2x2,4x1")
    parser.add_argument("--rates", default="1gbit,5gbit")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=10, help="timed multiplies per run (default: 10)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of both sides (default: 3)")
    args = parser.parse_args()
    if not Path("/usr/bin/python3").exists() or not Path(PETSC_DIR).exists():
        raise SystemExit("bench/cluster/vs_peers.py needs Debian's python3-petsc4py and Open MPI; see bench/README.md")
    results, rows = [], []
    with tempfile.TemporaryDirectory() as folder:
        for layout in args.layouts.split(","):
            ranks = math.prod(int(x) for x in layout.split("x"))
            for rate in args.rates.split(","):
                with calibrated_cluster(layout, rate) as (cluster, per_node, network, record):
                    speed = record["links"]["inter_node"]["aggregate_bandwidth_bytes_per_second"]
                    for matrix in args.matrices.split(","):
                        a = load_matrix(matrix)
                        directory = Path(folder) / short_name(matrix)
                        directory.mkdir(exist_ok=True)
                        np.save(directory / "indptr.npy", a.indptr.astype(np.int64))
                        np.save(directory / "indices.npy", a.indices.astype(np.int64))
                        np.save(directory / "offsets.npy", partition(a, ranks, "even").partitions[0].offsets)
                        turns = {"ours": [], "petsc": []}
                        for turn in range(args.rounds):
                            print(
                                f"{layout} {rate} {short_name(matrix)}: turn {turn + 1} of {args.rounds}",
                                file=sys.stderr,
                                flush=True,
                            )
                            turns["ours"].append(ours(cluster, per_node, matrix, network, args.k, args.repeat))
                            turns["petsc"].append(petsc(cluster, per_node, str(directory), args.k, args.repeat))
                        mine, theirs = ({**t[0], "seconds": float(np.median([r["seconds"] for r in t]))} for t in turns.values())
                        agree = math.isclose(mine["checksum"], theirs["checksum"], rel_tol=1e-9, abs_tol=1e-6)
                        entry = {"layout": layout, "rate": rate, "matrix": short_name(matrix), "k": args.k, "ours": mine,
                                 "petsc": theirs, "ratio": mine["seconds"] / theirs["seconds"], "checksums_agree": agree,
                                 "inter_node_bytes_per_second": speed}  # fmt: skip
                        results.append(entry)
                        bound = {side: entry[side]["busiest_node_bytes_per_multiply"] / speed for side in ("ours", "petsc")}
                        rows.append([layout, rate, short_name(matrix), f"{mine['strategy']}/{mine['mode']}",
                                     f"{theirs['seconds'] * 1e3:.2f}", f"{mine['seconds'] * 1e3:.2f}", f"{entry['ratio']:.2f}",
                                     f"{theirs['link_bytes_per_multiply'] / 1e6:.2f}",
                                     f"{mine['link_bytes_per_multiply'] / 1e6:.2f}",
                                     f"{(mine['mpi_inter_bytes'] or 0) / 1e6:.2f}", f"{theirs['seconds'] / bound['petsc']:.2f}",
                                     f"{mine['seconds'] / bound['ours']:.2f}", "yes" if agree else "NO"])  # fmt: skip
    print(format_table(["layout", "rate", "matrix", "ours (strategy/mode)", "PETSc ms", "ours ms", "ours/PETSc",
                        "PETSc link MB", "ours link MB", "ours MPI inter MB", "PETSc time/bound", "ours time/bound",
                        "checksums agree"], rows))  # fmt: skip
    for layout in args.layouts.split(","):
        for rate in args.rates.split(","):
            ratios = [e["ratio"] for e in results if e["layout"] == layout and e["rate"] == rate]
            if ratios:
                mean = math.exp(np.mean(np.log(ratios)))
                print(f"{layout} at {rate}: geometric mean ours/PETSc {mean:.3f}, worst {max(ratios):.2f}")
    out = ROOT / "bench" / "results" / "vs_peers.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    if not all(e["checksums_agree"] for e in results):
        sys.exit("checksums differ between sparsewire and PETSc")


if __name__ == "__main__":
    main()
