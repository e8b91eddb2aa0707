"""Compressed messages over a real slow link: the exchange time of ``--compress`` bf16, int8 and auto
beside none on the emulated cluster (``sparsewire emulate``'s harness: network namespaces, veth links
rate-limited by tbf, MPICH over TCP between the nodes).

    sudo .venv/bin/python bench/cluster/compressed_emulated.py [--matrices M,...] [--layouts 2x1,2x2] [--rate 1gbit]
        [--codecs none,bf16,int8,auto] [--mode bulk] [--strategy joint] [--k 32] [--repeat 20] [--command spmm]

``--command spgemm`` runs ``sparsewire spgemm M --compress C`` instead (A x A, plus_times, the algorithm auto
picks; codecs none,index,auto by default: the messages' integers coded everywhere or where it pays; the
values as they are) with the same timing, bytes and check.

Per layout (``NxR``: N nodes of R ranks) the cluster is brought up once and measured (``sparsewire calibrate
--network``, whose topology file ``auto`` reads); then per matrix one ``sparsewire spmm M --compress C --check
--json --log-view`` per codec, in an order that alternates per matrix. The exchange time is the summary's
``communication_seconds_per_multiply`` (the post and wait phases of the slowest rank, coding and decoding
inside them: the MPI transport codes a message when it posts it and decodes it as its receive completes);
also the median multiply, payload and wire bytes (MPI's receive statuses) and whether ``--check`` passed.
Prints per row the ratio to none's exchange time, then per codec the geometric mean and the largest ratio over
the matrices and layouts. Needs root. Writes bench/results/compressed_emulated.json (spgemm:
compressed_emulated_spgemm.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, geometric_mean, short_name  # noqa: E402
from emulated import DEFAULT_MATRICES, calibrated_cluster, run_json  # noqa: E402

from sparsewire.testing import unavailable_reason  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", default=",".join(m for m in DEFAULT_MATRICES if Path(m).exists()) or "rmat:16:8:1")
    parser.add_argument("--layouts", default="2x1,2x2", help="NODESxRANKS, comma-separated (default: 2x1,2x2)")
    parser.add_argument("--rate", default="1gbit", help="every link's rate (default: 1gbit)")
    parser.add_argument(
        "--codecs", help="--compress values, none among them (default: none,bf16,int8,auto; spgemm: none,index,auto)"
    )
    parser.add_argument("--command", choices=["spmm", "spgemm"], default="spmm", help="what runs (default: spmm)")
    parser.add_argument("--mode", default="bulk", help="executor mode (default: bulk)")
    parser.add_argument("--strategy", default="joint", help="strategy (default: joint)")
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    problem = unavailable_reason()
    if problem:
        raise SystemExit(f"bench/cluster/compressed_emulated.py needs an emulated cluster: {problem}")
    codecs = (args.codecs or ("none,index,auto" if args.command == "spgemm" else "none,bf16,int8,auto")).split(",")
    if "none" not in codecs:
        parser.error("--codecs must include none (the baseline of every ratio)")
    rows = []
    for layout in args.layouts.split(","):
        with calibrated_cluster(layout, args.rate) as (cluster, per_node, network, record):
            inter = record["links"]["inter_node"]
            print(f"== {layout} at {args.rate}: inter-node {inter['single_pair_bandwidth'] / 1e6:.1f} MB/s measured", flush=True)
            for index, matrix in enumerate(args.matrices.split(",")):
                if args.command == "spmm":
                    common = ["spmm", matrix, "--topology", network, "--strategy", args.strategy, "--mode", args.mode]
                    common += ["--k", str(args.k), "--partition", "even"]  # the original order: the link matters most
                else:
                    common = ["spgemm", matrix, "--partition", "even"]  # the original order: the link matters most
                common += ["--repeat", str(args.repeat), "--check", "--json", "--log-view"]
                here = {}
                for codec in codecs if index % 2 == 0 else codecs[::-1]:
                    weighed = ["--topology", network] if args.command == "spgemm" and codec == "auto" else []
                    report = run_json(cluster, per_node, [*common, *weighed, "--compress", codec], 1800)
                    here[codec] = {
                        "layout": layout,
                        "matrix": short_name(matrix),
                        "compress": codec,
                        "algorithm": report.get("algorithm", args.strategy),
                        "exchange_seconds": report["log_view"]["communication_seconds_per_multiply"],
                        "median_seconds": report["median_seconds"],
                        "payload_bytes": report["payload_bytes" if args.command == "spmm" else "bytes_moved"],
                        "wire_bytes": report["wire_bytes"],
                        "check_passed": report["check_passed"],
                    }
                for codec in codecs:
                    row = here[codec]
                    row["exchange_over_none"] = row["exchange_seconds"] / here["none"]["exchange_seconds"]
                    rows.append(row)
                    print(
                        f"{row['matrix']:<16} {codec:<5} exchange {row['exchange_seconds'] * 1e3:8.2f} ms "
                        f"({row['exchange_over_none']:.3f}x none)  multiply {row['median_seconds'] * 1e3:8.2f} ms  "
                        f"wire {row['wire_bytes']:>10} of {row['payload_bytes']:>10}  check {row['check_passed']}",
                        flush=True,
                    )
    summary = {}
    for codec in codecs:
        ratios = [r["exchange_over_none"] for r in rows if r["compress"] == codec]
        summary[codec] = {"geometric_mean": geometric_mean(ratios), "largest": max(ratios)}
        print(f"{codec}: exchange / none geometric mean {summary[codec]['geometric_mean']:.3f}, largest {max(ratios):.3f}")
    print(f"every check passed: {all(r['check_passed'] for r in rows)}")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    record = {"command": args.command, "rate": args.rate, "rows": rows, "summary": summary}
    (out / f"compressed_emulated{'' if args.command == 'spmm' else '_spgemm'}.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
