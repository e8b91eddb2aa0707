"""Every strategy and mode over the emulated cluster: measured time beside the planner's
predicted time (communication plus local work) under the *measured* topology, bytes per link class (planned, what MPI
delivered, what the links' kernel counters saw), and what ``--strategy auto`` picks against the
measured fastest.

Per layout (``2x2``: 2 nodes x 2 ranks on a veth pair; ``4x1``: 4 nodes x 1 rank through a bridge)
and rate: bring the cluster up, measure it (``sparsewire calibrate --network``), then per matrix run
``sparsewire spmm MATRIX --topology measured.json --strategy auto,S.. --mode M.. --rounds 10 --repeat 2 --check --json``
(every plan made first, ``auto``'s with its trial, the runs taking turns: a machine that drifts slows each alike, and
``auto``'s pick is judged by its own time against the fastest named plan's in the same job, as a user's job runs it);
and the same runs of the named strategies on the same cluster with the links' limit lifted (:data:`FREE_RATE`: the
same ranks, cores and TCP stack, the same plans), whose time is what the link's rate does not set: ``1 - free /
measured`` is the share of the time the link costs (the link share), and the cost model (communication over the
calibration's link classes plus local work at the CSR kernel's rate on the matrix's own rows, ``spmm --local-rate
matrix``, and the calibration's copy rate) is judged where that is at least a half. Needs root (``sparsewire emulate``'s
harness). On the 2-core machine 4 ranks are oversubscribed (ranks x threads = 4 > 2 cores): compare strategies
with each other, not with other benches. The JSON holds the runs, ``auto``'s picks and each cluster's calibration record.

    sudo .venv/bin/python bench/cluster/emulated.py --rates 1gbit,5gbit --layouts 2x2,4x1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
from common import ROOT, short_name  # noqa: E402

from sparsewire.testing import EmulatedCluster, unavailable_reason

SHARED = ROOT.parent / "shared" / "data"
FREE_RATE = "100gbit"  # 20 times what the 2-core machine carries (docs/cli.md, "sparsewire emulate"): never the limit
DEFAULT_MATRICES = [str(SHARED / f"{name}.mtx.gz") for name in ("delaunay_n16", "mdual", "cit-HepTh", "dblp-2010")]
#: ``--matrices``' default of the cluster benches: the shared matrices this checkout has, and R-MAT 16.
MATRICES = ",".join([m for m in DEFAULT_MATRICES if Path(m).exists()] + ["rmat:16:8:1"])


def runs_of(report) -> list[dict]:
    """The runs of an ``spmm --json`` report: one dict, a list, or ``{"runs": [...]}``."""
    if isinstance(report, list):
        return report
    return report.get("runs", [report])


def run_json(cluster: EmulatedCluster, per_node: int, arguments: list[str], timeout: float) -> dict:
    result = cluster.run(per_node, [sys.executable, "-m", "sparsewire", *arguments], timeout=timeout)
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(arguments)}\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


@contextlib.contextmanager
def calibrated_cluster(layout: str, rate: str):
    """The emulated cluster of ``layout`` (``NxR``: N nodes of R ranks) at ``rate``, brought up and measured by
    ``sparsewire calibrate --network``: yields (cluster, R, the topology file's path, its record); torn down after."""
    nodes, per_node = (int(x) for x in layout.split("x"))
    with EmulatedCluster(nodes, rate) as cluster, tempfile.TemporaryDirectory() as folder:
        network = str(Path(folder) / "network.json")
        run_json(cluster, per_node, ["calibrate", "--network", "--output", network, "--json"], 300)
        yield cluster, per_node, network, json.loads(Path(network).read_text())


def run_link_free(cluster: EmulatedCluster, per_node: int, arguments: list[str], timeout: float) -> dict:
    """The same command on the same cluster with every link's limit lifted to :data:`FREE_RATE`: the same ranks,
    cores and TCP stack, the link's rate costing nothing; the limit is restored after."""
    rate = cluster.rate
    cluster.set_rate(FREE_RATE)
    try:
        return run_json(cluster, per_node, arguments, timeout)
    finally:
        cluster.set_rate(rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", default=MATRICES)
    parser.add_argument("--rates", default="1gbit,5gbit")
    parser.add_argument("--layouts", default="2x2,4x1")
    parser.add_argument("--strategies", default="row,column,joint,column-hier,joint-hier,joint-group")
    parser.add_argument("--modes", default="bulk,overlap,pipelined,early")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2, help="timed multiplies per run and turn (default: 2)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="turns of every run (spmm --rounds: a drifting machine slows each alike; default: 10)",
    )
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "emulated.json"))
    args = parser.parse_args()
    problem = unavailable_reason()
    if problem:
        raise SystemExit(f"bench/cluster/emulated.py needs an emulated cluster: {problem}")
    rows, picks, calibrations = [], [], []
    for layout in args.layouts.split(","):
        for rate in args.rates.split(","):
            with calibrated_cluster(layout, rate) as (cluster, per_node, network, record):
                calibrations.append({"layout": layout, "rate": rate, "record": record})
                links = record["links"]
                print(
                    f"== {layout} at {rate}: inter-node {links['inter_node']['bandwidth_bytes_per_second'] / 2**20:.1f} MiB/s "
                    f"per rank, {links['inter_node']['latency_seconds'] * 1e6:.1f} us, every node at once "
                    f"{links['inter_node']['aggregate_bandwidth_bytes_per_second'] / 2**20:.1f} MiB/s together, burst "
                    f"{links['inter_node']['burst_bytes'] / 2**10:.0f} KiB (every node at once "
                    f"{links['inter_node']['aggregate_burst_bytes'] / 2**10:.0f} KiB), "
                    f"{links['inter_node']['overlap']['fraction']:.2f} of a stream hidden behind the kernel "
                    f"({links['inter_node']['piece_overlap']['fraction']:.2f} in pieces); local "
                    f"{record['local']['nonzero_columns_per_second']:.3g} nonzero-columns/s, copy "
                    f"{record['local']['copy_bytes_per_second']:.3g} B/s",
                    flush=True,
                )
                for matrix in args.matrices.split(","):
                    common = ["spmm", matrix, "--topology", network, "--k", str(args.k), "--json"]
                    timed = [*common, "--repeat", str(args.repeat), "--rounds", str(args.rounds)]
                    before = cluster.counters()
                    started = time.monotonic()
                    report = run_json(
                        cluster,
                        per_node,
                        [*timed, "--strategy", f"auto,{args.strategies}", "--mode", args.modes, "--check"],
                        3600,
                    )
                    link_bytes = sum(tx for tx, _ in cluster.counters()) - sum(tx for tx, _ in before)
                    free = run_link_free(cluster, per_node, [*timed, "--strategy", args.strategies, "--mode", args.modes], 3600)
                    free_seconds = {(r["strategy"], r["mode"]): r["median_seconds"] for r in runs_of(free)}
                    picked = [r for r in runs_of(report) if r["strategy_requested"] == "auto"]
                    runs = [r for r in runs_of(report) if r["strategy_requested"] != "auto"]
                    if [r["traffic"] for r in runs] != [r["traffic"] for r in runs_of(free)]:
                        raise SystemExit(f"{matrix}: the plans with the link free moved other bytes than the measured ones")
                    print(
                        f"   local work priced at {runs[0]['local_rate']:.3g} nonzero-columns/s, measured on its rows", flush=True
                    )
                    for run in runs:
                        link_share = 1.0 - free_seconds[(run["strategy"], run["mode"])] / run["median_seconds"]
                        rows.append(
                            {**run, "cluster": layout, "rate": rate, "matrix": short_name(matrix), "link_share": link_share}
                        )
                        inter, delivered = run["inter_group_bytes"] / 1e6, run["measured_inter_group_bytes"] / 1e6
                        print(
                            f"{short_name(matrix):16s} {run['strategy']:12s} {run['mode']:10s} "
                            f"inter {inter:7.2f} MB (MPI {delivered:7.2f}) "
                            f"measured {run['median_seconds'] * 1e3:8.2f} ms  predicted {run['predicted_seconds'] * 1e3:8.2f} ms "
                            f"ratio {run['median_seconds'] / run['predicted_seconds']:6.2f}  link share {link_share:5.2f}  "
                            f"check {run['check_passed']}",
                            flush=True,
                        )
                    for auto in picked:
                        in_mode = [r for r in runs if r["mode"] == auto["mode"]]
                        fastest = min(in_mode, key=lambda r: r["median_seconds"])
                        twin = next((r for r in in_mode if r["strategy"] == auto["strategy"]), None)
                        if twin is None:  # --strategies left out the one auto picked: its bytes and share are not here
                            print(f"   {auto['mode']}: auto picks {auto['strategy']}, not among --strategies: not judged")
                            print(f"   ({auto['strategy_reason']})", flush=True)
                            continue
                        picks.append(
                            {
                                "layout": layout,
                                "rate": rate,
                                "matrix": short_name(matrix),
                                "mode": auto["mode"],
                                "auto": auto["strategy"],
                                "fastest": fastest["strategy"],
                                "auto_seconds": auto["median_seconds"],
                                "auto_over_fastest": auto["median_seconds"] / fastest["median_seconds"],
                                # the same plan under its name in the same turns: how far two timings of one plan differ
                                "named_over_fastest": twin["median_seconds"] / fastest["median_seconds"],
                                "link_bytes": link_bytes,
                                "seconds": time.monotonic() - started,
                                "reason": auto["strategy_reason"],
                            }
                        )
                        print(
                            f"   {auto['mode']}: auto picks {auto['strategy']}: {auto['median_seconds'] * 1e3:.2f} ms, "
                            f"{picks[-1]['auto_over_fastest']:.2f}x the fastest, {fastest['strategy']} (under its name "
                            f"{picks[-1]['named_over_fastest']:.2f}x); link counters {link_bytes / 1e6:.1f} MB\n"
                            f"   ({auto['strategy_reason']})",
                            flush=True,
                        )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"runs": rows, "auto": picks, "calibrations": calibrations}, indent=1))
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
