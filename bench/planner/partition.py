"""The advisor's table for every matrix, at P = 8 (groups of 4) and P = 32 (groups of 8).

    .venv/bin/python bench/planner/partition.py [--matrices M ...] [--ranks 8,32] [--k 32]

For each matrix and P: every partitioner x strategy (:func:`sparsewire.plan.advisor.advise`, float64,
k = 32, topology ``nodes:G``), with the ratio of total bytes to even + column. Then, per P, the
geometric mean over the matrices of the best row's ratio, and at the largest P the inter-group bytes
of metis-hier against metis with the same hierarchical strategy (the one metis-hier does best
with). Writes bench/results/partition.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, short_name  # noqa: E402

from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.plan import advise  # noqa: E402
from sparsewire.profile import format_table  # noqa: E402
from sparsewire.topology import Topology  # noqa: E402

GROUP_SIZE = {8: 4, 32: 8}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--matrices", nargs="*", default=default_matrices(["delaunay:65536:1"]), help="matrix files or generator specs"
    )
    parser.add_argument("--ranks", default="8,32", help="rank counts (default: 8,32)")
    parser.add_argument("--k", type=int, default=32, help="columns of B (default: 32)")
    args = parser.parse_args()
    ranks_list = [int(v) for v in args.ranks.split(",")]
    results, summary = [], []
    for spec in args.matrices:
        matrix = load_matrix(spec)
        for ranks in ranks_list:
            group = GROUP_SIZE.get(ranks, 4)
            print(f"{short_name(spec)}: P = {ranks}, G = {group} ...", file=sys.stderr, flush=True)
            report = advise(
                matrix,
                ranks,
                topology=Topology.nodes(group),
                k=args.k,
                progress=lambda text: print("  " + text, file=sys.stderr, flush=True),
            )
            base = next(r["total_bytes"] for r in report["rows"] if r["partition"] == "even" and r["strategy"] == "column")
            best = min(report["rows"], key=lambda r: r["total_bytes"])
            entry = {
                **report,
                "matrix": short_name(spec),
                "matrix_shape": report["matrix"],
                "file": ":" not in spec,
                "ranks": ranks,
                "group_size": group,
                "baseline_bytes": base,
            }
            results.append(entry)
            hier = {}
            for strategy in ("column-hier", "joint-hier", "joint-group"):
                pair = {r["partition"]: r["inter_group_bytes"] for r in report["rows"] if r["strategy"] == strategy}
                hier[strategy] = (pair["metis-hier"], pair["metis"])
            best_hier = min(hier, key=lambda s: hier[s][0])
            summary.append(
                [
                    short_name(spec),
                    ranks,
                    f"{best['partition']}+{best['strategy']}",
                    f"{best['total_bytes'] / base:.3f}" if base else "-",
                    report["recommendation"]["partition"] + "+" + report["recommendation"]["strategy"],
                    best_hier,
                    f"{hier[best_hier][0]}",
                    f"{hier[best_hier][1]}",
                    "yes" if hier[best_hier][0] < hier[best_hier][1] else "no",
                ]
            )
            entry["best_bytes_ratio"] = best["total_bytes"] / base if base else None
            entry["metis_hier_vs_metis_inter_group"] = {s: {"metis-hier": a, "metis": b} for s, (a, b) in hier.items()}
            rows = [
                [
                    r["partition"],
                    r["strategy"],
                    r["total_bytes"],
                    f"{r['total_bytes'] / base:.3f}" if base else "-",
                    r["inter_group_bytes"],
                    r["messages"],
                    f"{r['nnz_imbalance']:.3f}",
                    f"{r['bytes_imbalance']:.2f}",
                    f"{r['predicted_seconds'] * 1e6:.1f}",
                    f"{r['setup_seconds']:.2f}",
                    "-" if r["break_even_multiplies"] is None else r["break_even_multiplies"],
                ]
                for r in report["rows"]
            ]
            print(f"\n{short_name(spec)}, P = {ranks}, groups of {group}")
            print(
                format_table(
                    [
                        "partition",
                        "strategy",
                        "bytes",
                        "vs even+column",
                        "inter-group",
                        "messages",
                        "nnz max/mean",
                        "bytes max/mean",
                        "predicted us",
                        "setup s",
                        "pays off after",
                    ],
                    rows,
                )
            )
    print("\nsummary")
    print(
        format_table(
            [
                "matrix",
                "P",
                "fewest bytes",
                "vs even+column",
                "recommended (time)",
                "hier. strategy",
                "metis-hier inter-group",
                "metis inter-group",
                "metis-hier fewer",
            ],
            summary,
        )
    )
    for ranks in ranks_list:
        for label, keep in (("matrix files", lambda e: e["file"]), ("all matrices", lambda e: True)):
            ratios = [e["best_bytes_ratio"] for e in results if e["ranks"] == ranks and e["best_bytes_ratio"] and keep(e)]
            if ratios:
                print(
                    f"P = {ranks}: geometric mean over the {len(ratios)} {label} of the fewest bytes / even+column = "
                    f"{float(np.exp(np.mean(np.log(ratios)))):.3f}"
                )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "partition.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
