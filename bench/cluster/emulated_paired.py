"""Two-level strategies against ``joint`` over the emulated cluster, multiply by multiply: where a two-level
plan saves only a few percent of the bytes (delaunay_n16: 0.7-1.4%), the bench's 10 multiplies per run cannot tell
it from ``joint``. Here every plan is made first and the runs take turns many times (``spmm --rounds 40 --repeat 2``),
and each run's time over ``joint``'s is the median of its 80 paired ratios with a 95% interval from a bootstrap
over whole turns (``emulated_report.paired_ratio``). The control: the same runs with one rank per node, where the
two-level plans send exactly ``joint``'s messages, so each interval there should reach 1.

    sudo .venv/bin/python bench/cluster/emulated_paired.py [--matrices ../shared/data/delaunay_n16.mtx.gz] [--rate 1gbit]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
from common import ROOT  # noqa: E402
from emulated import SHARED, calibrated_cluster, run_json
from emulated_report import paired_table

from sparsewire.testing import unavailable_reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", default=str(SHARED / "delaunay_n16.mtx.gz"))
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--layouts", default="2x2,4x1", help="clusters NxR; 4x1 is the control (default: 2x2,4x1)")
    parser.add_argument("--strategies", default="joint,joint-hier,joint-group")
    parser.add_argument("--modes", default="bulk,overlap,pipelined,early")
    parser.add_argument("--rounds", type=int, default=40, help="turns of every run (default: 40)")
    parser.add_argument("--repeat", type=int, default=2, help="timed multiplies per run and turn (default: 2)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "emulated_paired.json"))
    args = parser.parse_args()
    problem = unavailable_reason()
    if problem:
        raise SystemExit(f"bench/cluster/emulated_paired.py needs an emulated cluster: {problem}")
    reports = []
    for layout in args.layouts.split(","):
        with calibrated_cluster(layout, args.rate) as (cluster, per_node, network, _):
            for matrix in args.matrices.split(","):
                command = ["spmm", matrix, "--topology", network, "--strategy", args.strategies, "--mode", args.modes]
                command += ["--partition", "even"]  # the original order: the link carries most of the time
                command += ["--rounds", str(args.rounds), "--repeat", str(args.repeat), "--check", "--json"]
                report = run_json(cluster, per_node, command, 3600)
                if not all(run["check_passed"] for run in report["runs"]):
                    raise SystemExit(f"{matrix} on {layout}: C differs from SciPy's")
                print(
                    f"\n== {layout} at {args.rate}" + (" (control: the same messages under every name)" if per_node == 1 else "")
                )
                paired_table(report)
                reports.append({"layout": layout, "rate": args.rate, "report": report})
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(reports, indent=1))
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
