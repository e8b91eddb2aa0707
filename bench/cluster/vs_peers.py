"""Ours beside the peers over the emulated cluster's links, in one run: SpMM against PETSc's ``MatMatMult``, SpGEMM
against CombBLAS's Sparse SUMMA.

    sudo .venv/bin/python bench/cluster/vs_peers.py [--kinds spmm,spgemm] [--matrices M,...] [--layouts 2x2,4x1]
        [--rates 1gbit,5gbit] [--k 32] [--semirings plus_times,min_plus] [--repeat 10] [--rounds 3]

Per layout (``2x2``: 2 nodes x 2 ranks; ``4x1``) and rate: the cluster up and measured (``sparsewire calibrate
--network``, as ``emulated.py`` does); then per matrix (and semiring), the two sides taking turns ``--rounds`` times
(a machine that drifts slows both alike):

- SpMM: ours ``sparsewire spmm M --topology network.json --k K --repeat R --json``, our default flags (the partition,
  strategy and mode chosen for the user), under our MPICH over the links; PETSc ``bench/peers/petsc_worker.py``
  (MPIAIJ x MPIDense, the same B) twice: on even rows in the original order, as a PETSc user hands it the matrix
  (``ours / peer``), and on our default's partition (``partition(A, P, "auto")`` under the same topology: the
  reordered pattern and its rows; ``ours / that``), so the table shows what the partition gives and what the
  plan gives; and our default's plan once more (its partition, strategy and mode as flags) with the links' limit
  lifted (``emulated.FREE_RATE``), whose time is what the link's rate does not set: ``link share`` = 1 - that time
  over ours, and where it is at least a half our time should come within 1.1x of our byte bound (printed);
- SpGEMM (square rank counts: CombBLAS's grid): ours ``sparsewire spgemm M --values random:1 --semiring S --repeat R
  --json`` with no other flag; CombBLAS ``bench/peers/combblas_spgemm.cpp`` (``Mult_AnXBn_Synch``, built as
  ``vs_combblas.py`` builds it) on the same values, one OpenMP thread per rank.

The peers run under Debian's Open MPI over the same links (``EmulatedCluster``'s ``OPENMPI_OPTIONS``: TCP only
between nodes, shared memory inside one, 4 MB socket buffers, yielding when idle); install steps in
bench/README.md. Per side: the median of its rounds' median seconds per multiply; the checksums (sum of C; for
SpGEMM also nnz(C)) must agree; the bytes the links' kernel counters saw over its whole run (planning and setup
included) over the multiplies of the run (each side's first product, warm-up and timed ones): an upper bound of its
inter-node bytes per multiply, beside ours as MPI delivered them (SpMM: between nodes; SpGEMM: every byte moved).
``bound``: the bytes through the busiest node's link per multiply, in its busier direction, over that link's
calibrated rate one way (``calibrate --network``'s rate per rank with every rank of a node sending out at once,
times the ranks of a node); ``time / bound`` says how close a side comes to its own bytes. Our SpMM's are the
payload bytes MPI delivered between nodes (the run's traffic, whose every message MPI's receive statuses
confirmed); the peers' and our SpGEMM's are what the counters saw over the whole run per multiply: an upper bound
(set-up and the packets' headers included), so that time / bound is a lower bound of how close a side comes. SpMM also
gives each side's time to the first product (``first ms``): ours planning and a first multiply, PETSc A's assembly
and the first ``matMult`` (symbolic and numeric). 4 ranks on the 2-core machine are oversubscribed (both sides
alike).
Writes bench/results/vs_peers.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.io

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # emulated.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))  # vs_combblas.py
from common import ROOT, busiest_link_bytes, geometric_mean, short_name  # noqa: E402
from emulated import MATRICES, calibrated_cluster, run_json, run_link_free  # noqa: E402
from emulated_report import CLOSE_TO_BOUND  # noqa: E402
from vs_combblas import VALUES, build_peer  # noqa: E402

from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.partition import partition  # noqa: E402
from sparsewire.profile import format_table  # noqa: E402
from sparsewire.spgemm import load_operand  # noqa: E402
from sparsewire.topology import Topology  # noqa: E402

PETSC_DIR = "/usr/lib/petscdir/petsc3.18/x86_64-linux-gnu-real"
WORKER = ROOT / "bench" / "peers" / "petsc_worker.py"


def counted(cluster, run, multiplies: int) -> tuple:
    """``run()``'s result, and the bytes the links' counters saw meanwhile per multiply of it: the sum over nodes of
    what they sent, and the busiest node's larger direction."""
    before = cluster.counters()
    result = run()
    deltas = [(tx - tx0, rx - rx0) for (tx, rx), (tx0, rx0) in zip(cluster.counters(), before)]
    total, busiest = sum(tx for tx, _ in deltas), max(max(pair) for pair in deltas)
    return result, {"link_bytes_per_multiply": total / multiplies, "busiest_node_bytes_per_multiply": busiest / multiplies}


def peer_report(cluster, per_node: int, name: str, command: list[str], env=None) -> dict:
    """The last JSON line of a peer's job under Open MPI over the links."""
    completed = cluster.run(per_node, command, launcher="openmpi", env=env, timeout=1800)
    if completed.returncode != 0:
        raise SystemExit(f"{name} failed ({completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def ours(cluster, per_node: int, matrix: str, network: str, k: int, repeat: int, chosen: dict) -> dict:
    """Our default ``spmm`` (no flag but the calibrated topology); what it chose goes into ``chosen`` for
    :func:`ours_link_free` in the same turn."""
    command = ["spmm", matrix, "--topology", network, "--k", str(k), "--repeat", str(repeat), "--json"]
    # the first product, the warm-up, the timed ones
    report, link = counted(cluster, lambda: run_json(cluster, per_node, command, 1800), repeat + 2)
    chosen.update(partition=report["partition"], strategy=report["strategy"], mode=report["mode"],
                  traffic=report["traffic"]["bytes"])  # fmt: skip
    return {"seconds": report["median_seconds"], "checksum": report["checksum_sum"], "strategy": report["strategy"],
            "mode": report["mode"], "first_product_seconds": report["first_product_seconds"],
            "partition": report["partition"], "partition_seconds": report["partition_seconds"],
            "planned_inter_bytes": report.get("inter_group_bytes"),
            "mpi_inter_bytes": report.get("measured_inter_group_bytes"), **link,
            "busiest_node_bytes_per_multiply": busiest_node_bytes(report, json.loads(Path(network).read_text()))}  # fmt: skip


def ours_link_free(cluster, per_node: int, matrix: str, network: str, k: int, repeat: int, chosen: dict) -> dict:
    """The plan our default chose in this turn (its partition, strategy and mode, passed as flags), on the same
    cluster with the links' limit lifted (``emulated.run_link_free``): the time the same ranks, cores and TCP stack
    take when the link's rate costs nothing. ``1 - this / ours`` is the share of our time the link's rate sets."""
    command = ["spmm", matrix, "--topology", network, "--k", str(k), "--repeat", str(repeat), "--json",
               "--partition", chosen["partition"], "--strategy", chosen["strategy"], "--mode", chosen["mode"]]  # fmt: skip
    report = run_link_free(cluster, per_node, command, 1800)
    if report["traffic"]["bytes"] != chosen["traffic"]:  # the flags must give the very plan the default ran
        raise SystemExit(f"{matrix}: the plan given our default's choices as flags moved other bytes than the default's")
    return {"seconds": report["median_seconds"], "checksum": report["checksum_sum"]}


def busiest_node_bytes(report: dict, network: dict) -> float:
    """The payload bytes one multiply of an ``spmm --json`` report moves through the busiest node's link, in its
    busier direction (:func:`~common.busiest_link_bytes`), each rank's node as the calibration record found it
    (``rank_groups``)."""
    if report.get("traffic_differences"):
        raise SystemExit(f"MPI delivered other bytes than planned: {report['traffic_differences'][:3]}")
    return busiest_link_bytes(report["traffic"]["bytes"], network["rank_groups"])


def petsc(cluster, per_node: int, directory: str, k: int, repeat: int) -> dict:
    environment = {**os.environ, "PETSC_DIR": os.environ.get("PETSC_DIR", PETSC_DIR)}
    command = ["/usr/bin/python3", str(WORKER), directory, str(k), str(repeat)]
    # the first product (symbolic and numeric), the warm-up, the timed ones
    entry, link = counted(cluster, lambda: peer_report(cluster, per_node, "PETSc", command, environment), repeat + 2)
    return {"seconds": entry["median_seconds"], "checksum": entry["checksum_sum"],
            "first_product_seconds": entry["first_product_seconds"], **link}  # fmt: skip


def ours_spgemm(cluster, per_node: int, matrix: str, semiring: str, repeat: int) -> dict:
    command = ["spgemm", matrix, "--values", VALUES, "--semiring", semiring, "--repeat", str(repeat), "--json"]
    report, link = counted(cluster, lambda: run_json(cluster, per_node, command, 1800), repeat + 1)
    return {"seconds": report["median_seconds"], "checksum": (report["nnz_out"], report["checksum_sum"]),
            "strategy": report["algorithm"], "mode": report["grid"] or "1d", "mpi_inter_bytes": report["bytes_moved"],
            **link}  # fmt: skip


def combblas(cluster, per_node: int, binary: Path, path: str, semiring: str, repeat: int) -> dict:
    command = [str(binary), path, semiring, str(repeat)]
    report, link = counted(cluster, lambda: peer_report(cluster, per_node, "CombBLAS", command), repeat + 1)
    return {"seconds": float(np.median(report["seconds"])), "checksum": (report["nnz"], report["checksum"]), **link}


def taking_turns(label: str, rounds: int, sides: dict) -> dict[str, dict]:
    """Each side's first run with the median of its rounds' seconds, the sides run in turn ``rounds`` times."""
    turns: dict[str, list] = {name: [] for name in sides}
    for turn in range(rounds):
        print(f"{label}: turn {turn + 1} of {rounds}", file=sys.stderr, flush=True)
        for name, run in sides.items():
            turns[name].append(run())
    return {name: {**runs[0], "seconds": float(np.median([r["seconds"] for r in runs]))} for name, runs in turns.items()}


def cases(cluster, per_node: int, network: str, layout: str, matrix: str, folder: Path, binary, args) -> list[tuple]:
    """(kind, peer, case, {"ours": run, "peer": run}) of one matrix: SpMM against PETSc, SpGEMM against CombBLAS
    per semiring (where the ranks make a square grid)."""
    ranks, found = math.prod(int(x) for x in layout.split("x")), []
    directory = folder / short_name(matrix)
    directory.mkdir(exist_ok=True)
    if "spmm" in args.kinds.split(","):
        a = load_matrix(matrix)
        write_pattern(directory, a, partition(a, ranks, "even"))
        # our default's partition (the same call on the same topology as the command's): PETSc given it too
        ours_partition = partition(a, ranks, "auto", topology=Topology.from_record(json.loads(Path(network).read_text())))
        write_pattern(directory / "ours", a, ours_partition)
        chosen: dict = {}
        mine = functools.partial(ours, cluster, per_node, matrix, network, args.k, args.repeat, chosen)
        sides = {"ours": mine,
                 "ours_link_free": functools.partial(ours_link_free, cluster, per_node, matrix, network, args.k,
                                                     args.repeat, chosen),
                 "peer": functools.partial(petsc, cluster, per_node, str(directory), args.k, args.repeat),
                 "peer_our_partition": functools.partial(petsc, cluster, per_node, str(directory / "ours"), args.k,
                                                         args.repeat)}  # fmt: skip
        found.append(("spmm", "PETSc", f"k = {args.k}", sides))
    if "spgemm" in args.kinds.split(",") and math.isqrt(ranks) ** 2 == ranks:
        path = str(directory / "operand.mtx")
        scipy.io.mmwrite(path, load_operand(matrix, VALUES), field="real", symmetry="general")
        for semiring in args.semirings.split(","):
            mine = functools.partial(ours_spgemm, cluster, per_node, matrix, semiring, args.repeat)
            theirs = functools.partial(combblas, cluster, per_node, binary, path, semiring, args.repeat)
            found.append(("spgemm", "CombBLAS", semiring, {"ours": mine, "peer": theirs}))
    return found


def write_pattern(directory: Path, a, chosen) -> None:
    """The files of ``petsc_worker.py``: A's pattern in the partitioning's order, its row offsets and (reordered) the
    order."""
    directory.mkdir(exist_ok=True)
    permuted = chosen.permute(a) if chosen.row_order is not None else a
    np.save(directory / "indptr.npy", permuted.indptr.astype(np.int64))
    np.save(directory / "indices.npy", permuted.indices.astype(np.int64))
    np.save(directory / "offsets.npy", chosen.rows.offsets)
    if chosen.row_order is not None:
        np.save(directory / "order.npy", np.asarray(chosen.row_order, np.int64))


def row_of(entry: dict) -> list:
    """The table's row of one comparison."""
    mine, theirs, speed = entry["ours"], entry["peer_run"], entry["inter_node_bytes_per_second"]
    return [entry["kind"], entry["peer"], entry["layout"], entry["rate"], entry["matrix"], entry["case"],
            f"{mine['strategy']}/{mine['mode']}", f"{theirs['seconds'] * 1e3:.2f}", f"{mine['seconds'] * 1e3:.2f}",
            f"{entry['ratio']:.2f}", f"{theirs['link_bytes_per_multiply'] / 1e6:.2f}",
            f"{mine['link_bytes_per_multiply'] / 1e6:.2f}", f"{(mine['mpi_inter_bytes'] or 0) / 1e6:.2f}",
            f"{over_bound(theirs, speed):.2f}", f"{over_bound(mine, speed):.2f}",
            "-" if entry.get("link_share") is None else f"{entry['link_share']:.2f}",
            *(f"{run['first_product_seconds'] * 1e3:.0f}" if "first_product_seconds" in run else "-" for run in (theirs, mine)),
            mine.get("partition", "-"), *same_partition_cells(entry, speed),
            "yes" if entry["checksums_agree"] else "NO"]  # fmt: skip


def same_partition_cells(entry: dict, speed: float) -> list[str]:
    """PETSc on our partition: its time, ours over it, and its time over its byte bound (SpMM only)."""
    run = entry.get("peer_our_partition_run")
    if run is None:
        return ["-", "-", "-"]
    return [f"{run['seconds'] * 1e3:.2f}", f"{entry['ours']['seconds'] / run['seconds']:.2f}", f"{over_bound(run, speed):.2f}"]


def over_bound(run: dict, speed: float) -> float:
    """A side's median time over its byte bound: the bytes through the busiest node's link per multiply at ``speed``."""
    return run["seconds"] * speed / run["busiest_node_bytes_per_multiply"]


def print_close_to_bound(spmm: list[dict]) -> None:
    """How close our SpMM comes to its byte bound where the link's rate sets at least half its time (link share =
    1 - our time with the link's limit lifted / our time), and the peers' time over their bounds there."""
    judged = [e for e in spmm if e["link_share"] >= 0.5]
    far = [e for e in judged if over_bound(e["ours"], e["inter_node_bytes_per_second"]) > CLOSE_TO_BOUND]
    print(
        f"SpMM: the link at least half of our time in {len(judged)} of {len(spmm)} runs (the others: "
        + ("; ".join(f"{e['layout']} {e['rate']} {e['matrix']} {e['link_share']:.2f}" for e in spmm if e not in judged) or "-")
        + f"); ours within {CLOSE_TO_BOUND}x of its byte bound there in {len(judged) - len(far)} of {len(judged)}"
        + "".join(
            f"; {e['layout']} {e['rate']} {e['matrix']} {over_bound(e['ours'], e['inter_node_bytes_per_second']):.2f}"
            for e in far
        )
    )
    for e in judged:
        speed = e["inter_node_bytes_per_second"]
        print(
            f"  {e['layout']} {e['rate']} {e['matrix']}: link share {e['link_share']:.2f}, time / bound ours "
            f"{over_bound(e['ours'], speed):.2f}, PETSc {over_bound(e['peer_run'], speed):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", default=MATRICES)
    parser.add_argument("--layouts", default="2x2,4x1")
    parser.add_argument("--rates", default="1gbit,5gbit")
    parser.add_argument("--kinds", default="spmm,spgemm", help="of spmm (against PETSc), spgemm (against CombBLAS)")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--semirings", default="plus_times,min_plus", help="SpGEMM's semirings (default: plus_times,min_plus)")
    parser.add_argument("--repeat", type=int, default=10, help="timed multiplies per run (default: 10)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of both sides (default: 3)")
    args = parser.parse_args()
    if not Path("/usr/bin/python3").exists() or not Path(PETSC_DIR).exists():
        raise SystemExit("bench/cluster/vs_peers.py needs Debian's python3-petsc4py and Open MPI; see bench/README.md")
    results = []
    kinds = args.kinds.split(",")
    binary = build_peer() if "spgemm" in kinds else None
    with tempfile.TemporaryDirectory() as folder:
        for layout in args.layouts.split(","):
            for rate in args.rates.split(","):
                with calibrated_cluster(layout, rate) as (cluster, per_node, network, record):
                    # one node's link, one way: every rank of the node sending out at once
                    speed = record["links"]["inter_node"]["bandwidth_bytes_per_second"] * per_node
                    for matrix in args.matrices.split(","):
                        for kind, peer, case, sides in cases(
                            cluster, per_node, network, layout, matrix, Path(folder), binary, args
                        ):
                            label = f"{layout} {rate} {kind} {short_name(matrix)} {case}"
                            runs = taking_turns(label, args.rounds, sides)
                            mine, theirs = runs["ours"], runs["peer"]
                            if kind == "spmm":
                                agree = all(math.isclose(mine["checksum"], run["checksum"], rel_tol=1e-9, abs_tol=1e-6)
                                            for name, run in runs.items() if name != "ours")  # fmt: skip
                            else:
                                agree = mine["checksum"] == theirs["checksum"]
                            free = runs.get("ours_link_free")
                            results.append({"kind": kind, "peer": peer, "layout": layout, "rate": rate,
                                            "matrix": short_name(matrix), "case": case, "ours": mine, "peer_run": theirs,
                                            "peer_our_partition_run": runs.get("peer_our_partition"),
                                            "ours_link_free_run": free,
                                            "link_share": 1.0 - free["seconds"] / mine["seconds"] if free else None,
                                            "ratio": mine["seconds"] / theirs["seconds"], "checksums_agree": agree,
                                            "inter_node_bytes_per_second": speed})  # fmt: skip
    rows = [row_of(entry) for entry in results]
    print(format_table(["kind", "peer", "layout", "rate", "matrix", "case", "ours", "peer ms", "ours ms", "ours/peer",
                        "peer link MB", "ours link MB", "ours MPI MB", "peer time/bound", "ours time/bound", "ours link share",
                        "peer first ms", "ours first ms", "ours partition", "PETSc on ours' partition ms",
                        "ours / that", "that time/bound", "checksums agree"], rows))  # fmt: skip
    print_close_to_bound([e for e in results if e["link_share"] is not None])
    for kind, layout, rate, case in sorted({(e["kind"], e["layout"], e["rate"], e["case"]) for e in results}):
        ratios = [e["ratio"] for e in results if (e["kind"], e["layout"], e["rate"], e["case"]) == (kind, layout, rate, case)]
        print(
            f"{kind} {case} on {layout} at {rate}: geometric mean ours/peer {geometric_mean(ratios):.3f}, worst {max(ratios):.2f}"
        )
        same = [e["ours"]["seconds"] / e["peer_our_partition_run"]["seconds"] for e in results
                if (e["kind"], e["layout"], e["rate"], e["case"]) == (kind, layout, rate, case)
                and e["peer_our_partition_run"]]  # fmt: skip
        if same:
            print(f"  against PETSc on our partition: geometric mean {geometric_mean(same):.3f}, worst {max(same):.2f}")
    out = ROOT / "bench" / "results" / "vs_peers.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    if not all(e["checksums_agree"] for e in results):
        sys.exit("checksums differ between sparsewire and a peer")


if __name__ == "__main__":
    main()
