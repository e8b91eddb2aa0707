"""The tables of docs/benchmarks.md "Over a real link" from a run of bench/cluster/emulated.py: per layout and
rate, measured / predicted per strategy (one table per mode asked), and three checks over every run:
prediction (communication plus local work, :mod:`sparsewire.plan.cost`) within 25% where
the link is at least half the time (link share: 1 - the same run's time with the links' limit lifted over its
time), with the runs outside it, the time over the run's byte bound there (the bytes MPI delivered through the
busiest node's link in its busier direction over the calibrated rate of that link one way; within
:data:`CLOSE_TO_BOUND` asked), two-level strategies with fewer inter-node bytes than ``joint`` against
its time (apart: those that still move more through the busiest node's link, which sets the time on
a full-duplex link), and ``auto``'s pick against the measured fastest (``auto``'s own run, taking turns with the
named ones in the same job; a pick whose plan sends exactly the
fastest's messages, under its name or another's (as the hierarchical strategies do with one rank per node), is
the fastest plan, its own run a second timing of it; the report says which), and how far apart the medians of one
plan timed twice in the same turns fall (under two names, and ``auto``'s pick beside its plan under its name: the
spread the other checks sit in). A two-level run is compared with ``joint`` multiply by multiply
(:func:`paired_ratio`) where the runs took at least :data:`PAIRED_TURNS` turns, by the medians otherwise.
``--paired FILE`` prints that comparison for one ``spmm --json --rounds R`` report (``bench/cluster/emulated_paired.py``).

    .venv/bin/python bench/cluster/emulated_report.py [bench/results/emulated.json] [--modes overlap,bulk]
    .venv/bin/python bench/cluster/emulated_report.py --paired spmm.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
from common import ROOT, busiest_link_bytes  # noqa: E402

STRATEGIES = ("row", "column", "joint", "column-hier", "joint-hier", "joint-group")
TWO_LEVEL = ("column-hier", "joint-hier", "joint-group")
PAIRED_TURNS = 20  # fewest turns for an interval (paired_ratio)
CLOSE_TO_BOUND = 1.1  # a run whose link is at least half its time should take at most this over its byte bound


def busiest_node_bytes(run: dict) -> float:
    """:func:`~common.busiest_link_bytes` of a run's delivered bytes; nodes of ``run["cluster"]`` (``NxR``) hold R
    ranks each."""
    per_node = int(run["cluster"].split("x")[1])
    delivered = run["traffic"]["bytes"]
    return busiest_link_bytes(delivered, [rank // per_node for rank in range(len(delivered))])


def node_link_rate(calibrations: list[dict], layout: str, rate: str) -> float:
    """One node's link, one way, as the cluster's calibration measured it: the rate per rank with every rank of a
    node sending out at once, times the ranks of a node (as ``vs_peers.py`` prices its bound)."""
    record = next(c["record"] for c in calibrations if (c["layout"], c["rate"]) == (layout, rate))
    return record["links"]["inter_node"]["bandwidth_bytes_per_second"] * int(layout.split("x")[1])


def run_of(runs: list[dict], pick: dict, strategy: str) -> dict:
    """The run of ``strategy`` on the pick's matrix and mode."""
    return next(r for r in runs if (r["matrix"], r["mode"], r["strategy"]) == (pick["matrix"], pick["mode"], strategy))


def same_messages(a: dict, b: dict) -> bool:
    """Whether two runs' plans send the same messages: every pair of ranks the same bytes in the same number of
    messages, as MPI delivered them, over the same link classes and paths (with one rank per node the
    hierarchical strategies' plans are the flat ones: two names, one plan, whose two timings differ by the spread)."""
    return a["traffic"] == b["traffic"] and a["transfer_paths"] == b["transfer_paths"]


def paired_ratio(run: dict, base: dict, draws: int = 2000) -> tuple[float, float, float] | None:
    """``run``'s time over ``base``'s, multiply by multiply: both ran in the same job taking turns (``spmm --rounds``),
    so the i-th timed multiply of each fell in the same turn, seconds apart, and a drifting machine slows both. The
    median of the ratios and a 95% interval: a bootstrap that draws whole turns (the multiplies of one turn ran back
    to back and are not independent of each other), fixed seed; "slower" means the interval lies above 1. None for
    runs without ``multiply_seconds``, with different numbers of them, or in fewer than :data:`PAIRED_TURNS` turns
    (with the bench's 5 turns of 2, the intervals of the same plan under two names missed 1 in 10 and 12 of 40 pairs)."""
    a, b = run.get("multiply_seconds"), base.get("multiply_seconds")
    turns = int(run.get("rounds", 1))
    if not a or not b or len(a) != len(b) or turns < PAIRED_TURNS:
        return None
    ratios = (np.asarray(a) / np.asarray(b)).reshape(turns, -1)
    drawn = ratios[np.random.default_rng(0).integers(0, turns, (draws, turns))].reshape(draws, -1)
    low, high = np.percentile(np.median(drawn, axis=1), [2.5, 97.5])
    return float(np.median(ratios)), float(low), float(high)


def paired_table(report: dict) -> None:
    """Every run of one ``spmm --json`` report against ``joint`` in the same mode (:func:`paired_ratio`)."""
    runs = report["runs"]
    print(f"{report['matrix']}: time over joint's, multiply by multiply (median, 95% interval; {runs[0]['rounds']} turns)")
    for run in runs:
        flat = next((r for r in runs if (r["mode"], r["strategy"]) == (run["mode"], "joint")), None)
        if flat is None or run is flat:
            continue
        ratio = paired_ratio(run, flat)
        bytes_ratio = run["inter_group_bytes"] / flat["inter_group_bytes"] if run.get("inter_group_bytes") else float("nan")
        if ratio is None:
            print(
                f"  {run['strategy']:12s} {run['mode']:10s} inter-node bytes {bytes_ratio:.3f}x, time (medians) "
                f"{run['median_seconds'] / flat['median_seconds']:.3f}x: no interval "
                f"(under {PAIRED_TURNS} turns, or no multiply_seconds)"
            )
            continue
        verdict = "slower" if ratio[1] > 1 else "faster" if ratio[2] < 1 else "within the spread"
        print(
            f"  {run['strategy']:12s} {run['mode']:10s} inter-node bytes {bytes_ratio:.3f}x, time {ratio[0]:.3f}x "
            f"[{ratio[1]:.3f}, {ratio[2]:.3f}]: {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", default=str(ROOT / "bench" / "results" / "emulated.json"))
    parser.add_argument("--modes", default="overlap,bulk")
    parser.add_argument(
        "--paired",
        action="store_true",
        help="RESULTS is one 'sparsewire spmm --json --rounds R' report: each run's time over joint's, multiply by multiply",
    )
    args = parser.parse_args()
    data = json.loads(Path(args.results).read_text())
    if args.paired:
        paired_table(data)
        return
    runs, picks = data["runs"], data["auto"]
    for layout, rate in sorted({(r["cluster"], r["rate"]) for r in runs}):
        here = [r for r in runs if (r["cluster"], r["rate"]) == (layout, rate)]
        samples = here[0].get("timed_multiplies", 10)  # runs before spmm --rounds: 10 in one go
        turns = f" in {here[0]['rounds']} turns" if here[0].get("rounds", 1) > 1 else ""
        for mode in args.modes.split(","):
            print(f"\n{layout} at {rate}, {mode} mode (inter-node bytes: measured median of {samples}{turns} / predicted ms):\n")
            print("| matrix | " + " | ".join(STRATEGIES) + " | auto picks |")
            print("|---|" + "---|" * (len(STRATEGIES) + 1))
            for matrix in dict.fromkeys(r["matrix"] for r in here):
                cells = []
                for strategy in STRATEGIES:
                    run = next((r for r in here if (r["matrix"], r["strategy"], r["mode"]) == (matrix, strategy, mode)), None)
                    if run is None:  # not run
                        cells.append("-")
                        continue
                    cells.append(
                        f"{run['inter_group_bytes'] / 1e6:.2f} MB: {run['median_seconds'] * 1e3:.1f} / "
                        f"{run['predicted_seconds'] * 1e3:.1f}"
                    )
                pick = next(
                    (p for p in picks if (p["layout"], p["rate"], p["matrix"], p.get("mode")) == (layout, rate, matrix, mode)),
                    None,
                )
                cells.append(f"{pick['auto']} ({pick['auto_over_fastest']:.2f}x {pick['fastest']})" if pick else "-")
                print(f"| {matrix} | " + " | ".join(cells) + " |")
        judged = [r for r in here if r["link_share"] >= 0.5]
        within = [r for r in judged if 0.75 <= r["median_seconds"] / r["predicted_seconds"] <= 1.25]
        ratios = [r["median_seconds"] / r["predicted_seconds"] for r in judged]
        print(
            f"\n{layout} at {rate}, every mode: the link is at least half the time in {len(judged)} of {len(here)} runs; "
            f"measured / predicted there {min(ratios, default=0):.2f}-{max(ratios, default=0):.2f}, "
            f"{len(within)} of {len(judged)} within 25%"
        )
        speed = node_link_rate(data["calibrations"], layout, rate)
        over = {id(r): r["median_seconds"] * speed / busiest_node_bytes(r) for r in judged}
        far = [r for r in judged if over[id(r)] > CLOSE_TO_BOUND]
        print(
            f"    time over the byte bound there {min(over.values(), default=0):.2f}-{max(over.values(), default=0):.2f}, "
            f"{len(judged) - len(far)} of {len(judged)} within {CLOSE_TO_BOUND}x"
            + "".join(f"; {r['matrix']} {r['strategy']} {r['mode']} {over[id(r)]:.2f}" for r in far)
        )
        outside = [r for r in judged if r not in within]
        print(
            "    outside 25% (measured / predicted, the predicted local work): "
            + "; ".join(
                f"{r['matrix']} {r['strategy']} {r['mode']} {r['median_seconds'] / r['predicted_seconds']:.2f} "
                f"({(r['predicted_seconds'] - r.get('predicted_communication_seconds', r['predicted_seconds'])) * 1e3:.1f} ms)"
                for r in outside
            )
        )
        slower, spread, busier, compared = [], [], [], 0
        for run in here:
            if run["strategy"] not in TWO_LEVEL:
                continue
            flat = next(r for r in here if (r["matrix"], r["mode"], r["strategy"]) == (run["matrix"], run["mode"], "joint"))
            if run["inter_group_bytes"] >= flat["inter_group_bytes"]:
                continue
            ratio = f"{run['matrix']} {run['strategy']} {run['mode']} {run['median_seconds'] / flat['median_seconds']:.2f}x"
            if busiest_node_bytes(run) > busiest_node_bytes(flat):
                busier.append(ratio)  # fewer bytes in all, but more through the busiest node's link
                continue
            compared += 1
            paired = paired_ratio(run, flat)
            if paired is not None and paired[1] <= 1:
                if run["median_seconds"] > flat["median_seconds"]:
                    spread.append(f"{ratio} [{paired[1]:.2f}, {paired[2]:.2f}]")
            elif run["median_seconds"] > flat["median_seconds"]:
                slower.append(ratio + (f" [{paired[1]:.2f}, {paired[2]:.2f}]" if paired else ""))
        print(
            f"two-level with fewer inter-node bytes than joint, in all and through the busiest node link: {compared} runs, "
            f"slower than joint in {len(slower)}: {'; '.join(slower) or '-'}"
            + (
                f"; slower by the medians but not multiply by multiply (95% interval reaches 1): {'; '.join(spread)}"
                if spread
                else ""
            )
        )
        print(f"two-level with fewer inter-node bytes in all but more through the busiest node link: {'; '.join(busier) or '-'}")
        twins = [(r, f) for r in here if r["strategy"] in TWO_LEVEL for f in [run_of(here, r, "joint")] if same_messages(r, f)]
        if twins:  # the same plan under two names: how far apart its two medians fall
            apart = sorted(
                max(r["median_seconds"], f["median_seconds"]) / min(r["median_seconds"], f["median_seconds"]) for r, f in twins
            )
            print(
                f"the same plan under two names (two-level = joint's messages): {len(twins)} pairs, slower / faster median "
                f"{np.median(apart):.3f}, at most {apart[-1]:.3f}"
            )
        ours = [p for p in picks if (p["layout"], p["rate"]) == (layout, rate)]
        over = [p for p in ours if p["auto_over_fastest"] > 1.10]
        same = [p for p in over if same_messages(*(run_of(here, p, p[role]) for role in ("auto", "fastest")))]
        print(
            f"auto within 10% of the fastest in {len(ours) - len(over)} of {len(ours)}"
            + (f", and {len(same)} more pick the fastest plan (the same messages), timed apart" if same else "")
            + "".join(
                f"; {p['matrix']} {p.get('mode')}: {p['auto']} {p['auto_over_fastest']:.2f}x {p['fastest']}"
                + (f" (under its own name {p['named_over_fastest']:.2f}x)" if "named_over_fastest" in p else "")
                + (" (the same messages)" if p in same else "")
                for p in over
            )
        )
    twice = sorted(
        max(r, 1 / r) for r in (p["auto_over_fastest"] / p["named_over_fastest"] for p in picks if "named_over_fastest" in p)
    )
    if twice:  # auto's pick and the same plan under its name, in the same job and turns: the timing's own spread
        print(
            f"\nauto's pick against the same plan under its name, in the same turns: {len(twice)} pairs, slower / faster "
            f"median {np.median(twice):.3f}, at most {twice[-1]:.3f}"
        )
    checked = all(r["check_passed"] for r in runs)
    delivered = all(r["measured_inter_group_bytes"] == r["inter_group_bytes"] for r in runs)
    print(f"\nevery run C checked: {checked}, inter-node bytes MPI delivered = plan's: {delivered}")


if __name__ == "__main__":
    main()
