"""How ``sparsewire analyze`` grows: time and peak memory against the nonzeros at fixed P and
against P at fixed nonzeros, each point one ``analyze --json`` process.

Per point: the command's wall seconds (a timer around the process), its peak resident memory (the
operating system's ``ru_maxrss`` of that child, from ``os.wait4``) and the planning seconds it reports
(the sum of its strategies' ``plan_seconds``, without making the matrix). Growth is fitted on a log-log
scale: the exponent of time against nonzeros (least squares), and the ratio of time and memory at the
largest P to the smallest. With ``--baseline REF`` every point is also run by git commit REF's code
(from PYTHONPATH, in the same run, alternating) and the ratios printed beside. Writes
``bench/results/planning_scale.json`` and, with ``--plot``, a two-panel log-log PNG.

    .venv/bin/python bench/planner/planning_scale.py --plot docs/images/planning-scale.png
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
from common import ROOT, extract_baseline  # noqa: E402


def run_point(spec: str, ranks: int, strategies: str, pythonpath: str | None) -> dict:
    """One ``analyze`` process: wall seconds, peak RSS (bytes, from the OS) and the JSON it prints."""
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else dict(os.environ)
    command = [sys.executable, "-m", "sparsewire", "analyze", spec, "--ranks", str(ranks), "--strategies", strategies, "--json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own peak, from the kernel
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        out, err = out.read(), err.read()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{err.decode()[-2000:]}")
    report = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "spec": spec,
        "ranks": ranks,
        "nnz": report["matrix"]["nnz"],
        "seconds": seconds,
        "plan_seconds": sum(e["plan_seconds"] for e in report["strategies"]),
        "peak_bytes": usage.ru_maxrss * 1024,
        "figures": {e["name"]: {k: v for k, v in e.items() if k != "plan_seconds"} for e in report["strategies"]},
    }


def exponent(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scales", default="16,17,18,19,20,21", help="R-MAT scales of the nonzeros series (default: %(default)s)"
    )
    parser.add_argument("--edge-factor", type=int, default=10, help="R-MAT edge factor (default: %(default)s)")
    parser.add_argument("--fixed-ranks", type=int, default=1024, help="P of the nonzeros series (default: %(default)s)")
    parser.add_argument("--fixed-scale", type=int, default=20, help="R-MAT scale of the ranks series (default: %(default)s)")
    parser.add_argument("--ranks", default="1024,2048,4096,8192,16384", help="P of the ranks series (default: %(default)s)")
    parser.add_argument("--strategies", default="all", help="analyze's --strategies (default: %(default)s)")
    parser.add_argument("--baseline", help="also run git commit REF's code at every point, alternating")
    parser.add_argument("--plot", help="write the log-log PNG here")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "planning_scale.json"))
    args = parser.parse_args()

    baseline = extract_baseline(args.baseline) if args.baseline else None
    scales, ranks = ([int(v) for v in text.split(",") if v.strip()] for text in (args.scales, args.ranks))  # "" skips a series
    points = [(f"rmat:{s}:{args.edge_factor}", args.fixed_ranks, "nonzeros") for s in scales]
    points += [(f"rmat:{args.fixed_scale}:{args.edge_factor}", p, "ranks") for p in ranks]
    results = []
    for spec, ranks, series in points:
        for code, path in [("current", None)] + ([("baseline", baseline)] if baseline else []):
            point = run_point(spec, ranks, args.strategies, path)
            point.update(series=series, code=code)
            results.append(point)
            print(
                f"{series:8s} {code:8s} {spec:12s} P={ranks:6d} nnz={point['nnz']:>10,d}  {point['seconds']:7.2f} s  "
                f"planning {point['plan_seconds']:7.2f} s  peak {point['peak_bytes'] / 2**30:6.2f} GiB",
                flush=True,
            )
    for series in ("nonzeros", "ranks"):
        for code in ("current", "baseline") if baseline else ("current",):
            picked = [r for r in results if r["series"] == series and r["code"] == code]
            if not picked:
                continue
            if code == "baseline":
                ours = [r for r in results if r["series"] == series and r["code"] == "current"]
                same = all(a["figures"] == b["figures"] for a, b in zip(ours, picked))
                speed = [b["seconds"] / a["seconds"] for a, b in zip(ours, picked)]
                memory = [b["peak_bytes"] / a["peak_bytes"] for a, b in zip(ours, picked)]
                print(
                    f"{series}: baseline / current time {', '.join(f'{v:.2f}' for v in speed)}; memory "
                    f"{', '.join(f'{v:.2f}' for v in memory)}; figures {'identical' if same else 'DIFFERENT'}"
                )
            elif series == "nonzeros" and len(picked) > 1:
                nnz = [r["nnz"] for r in picked]
                time_exponent = exponent(nnz, [r["seconds"] for r in picked])
                planning_exponent = exponent(nnz, [r["plan_seconds"] for r in picked])
                memory_exponent = exponent(nnz, [r["peak_bytes"] for r in picked])
                print(
                    f"nonzeros at P = {args.fixed_ranks}: time exponent {time_exponent:.2f} (planning {planning_exponent:.2f}), "
                    f"memory exponent {memory_exponent:.2f}"
                )
            elif series == "ranks" and len(picked) > 1:
                first, last = picked[0], picked[-1]
                time_ratio, planning_ratio = last["seconds"] / first["seconds"], last["plan_seconds"] / first["plan_seconds"]
                print(
                    f"ranks {first['ranks']} -> {last['ranks']} at {first['nnz']:,} nonzeros: time x{time_ratio:.2f} "
                    f"(planning x{planning_ratio:.2f}), peak memory x{last['peak_bytes'] / first['peak_bytes']:.2f}"
                )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"arguments": vars(args), "points": results}, indent=1))
    if args.plot:
        plot(results, args, Path(args.plot))
    return 0


def plot(results: list[dict], args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, panels = plt.subplots(1, 2, figsize=(11, 4.2))
    for panel, series, key, label in ((panels[0], "nonzeros", "nnz", "nonzeros"), (panels[1], "ranks", "ranks", "ranks P")):
        for code, style in (("current", "-o"), ("baseline", "--s")):
            picked = [r for r in results if r["series"] == series and r["code"] == code]
            if not picked:
                continue
            x = [r[key] for r in picked]
            name = "" if code == "current" else f" ({args.baseline})"
            panel.plot(x, [r["seconds"] for r in picked], style, color="#4c72b0", label=f"time, s{name}")
            panel.plot(x, [r["peak_bytes"] / 2**30 for r in picked], style, color="#dd8452", label=f"peak memory, GiB{name}")
        panel.set_xscale("log", base=2 if series == "ranks" else 10)
        panel.set_yscale("log")
        panel.set_xlabel(label)
        fixed = f"P = {args.fixed_ranks}" if series == "nonzeros" else f"rmat:{args.fixed_scale}:{args.edge_factor}"
        panel.set_title(f"analyze against {label} ({fixed})", fontsize=10)
        panel.grid(True, which="both", alpha=0.3)
        panel.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
