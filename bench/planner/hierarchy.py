"""Inter-group bytes of the topology-aware strategies (CoLa Table 3, SHIRO Fig. 8(b)).

For every matrix, P in {16, 32, 64} and G in {4, 8} ranks per group (``nodes:G``), plan
``column`` and ``joint`` (flat) and ``column-hier``, ``joint-hier``, ``joint-group`` from the global
matrix (no MPI; k = 32, float32, even rows) and print the bytes that cross between groups per
multiply, with ratios to flat ``column``. Each row also gives the predicted communication time
(:func:`sparsewire.plan.stats.predicted_seconds`) under the preset whose group size is G:
``shiro-h100`` for G = 4 (NVLink 450 GB/s, InfiniBand 25 GB/s) and ``cola-a800`` for G = 8
(NVLink 300 GB/s, InfiniBand 18 GB/s), for the merged plans and for ``column-hier`` in the
``pipelined`` layout (CoLa Alg. 3).

Usage:
    .venv/bin/python bench/planner/hierarchy.py [--matrices SPEC ...] [--ranks 16 32 64] [--group-sizes 4 8]
        [--proxy local|balanced] [--output bench/results/hierarchy.json]

Matrices default to every file in ../shared/data (when present) plus generated ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from common import default_matrices, short_name  # noqa: E402

from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.partition import partition  # noqa: E402
from sparsewire.plan import (  # noqa: E402
    build_plan,
    plan_stats,
    predicted_seconds,  # noqa: E402
    strategy_stats,
)
from sparsewire.profile import format_table  # noqa: E402
from sparsewire.topology import PRESETS, Topology  # noqa: E402

GENERATED = ["rmat:16:8:1", "delaunay:65536:1", "stencil3d:40:27"]
STRATEGIES = ["column", "joint", "column-hier", "joint-hier", "joint-group"]
PRESET_FOR_GROUP_SIZE = {4: "shiro-h100", 8: "cola-a800"}
K, ELEMENT_BYTES = 32, 4


def measure(spec: str, matrix, n_ranks: int, group_size: int, proxy: str) -> dict:
    rows, cols = partition(matrix, n_ranks, "even").partitions
    topology = Topology.nodes(group_size)
    machine = PRESETS.get(PRESET_FOR_GROUP_SIZE.get(group_size, ""))
    preset = machine.topology if machine else None
    entry = {
        "matrix": short_name(spec),
        "ranks": n_ranks,
        "group_size": group_size,
        "proxy": proxy,
        "preset": preset and preset.name,
    }
    for name in STRATEGIES:
        started = time.perf_counter()
        stats = strategy_stats(matrix, rows, cols, name, K, ELEMENT_BYTES, topology, proxy=proxy)
        entry[name] = {
            **stats.class_totals(),
            "total_bytes": stats.total_bytes,
            "predicted_seconds": predicted_seconds(stats, preset) if preset else None,
            "plan_seconds": round(time.perf_counter() - started, 4),
        }
    pipelined = build_plan(matrix, rows, cols, "column-hier", topology, layout="pipelined", proxy=proxy)
    stats = plan_stats(pipelined.ranks, K, ELEMENT_BYTES, topology=topology)
    entry["column-hier-pipelined"] = {"predicted_seconds": predicted_seconds(stats, preset) if preset else None}
    return entry


def print_tables(entries: list[dict]) -> None:
    for n_ranks, group_size in sorted({(e["ranks"], e["group_size"]) for e in entries}):
        chosen = [e for e in entries if (e["ranks"], e["group_size"]) == (n_ranks, group_size)]
        preset = chosen[0]["preset"]
        print(
            f"\nP = {n_ranks}, G = {group_size}: inter-group MB per multiply (ratio to flat column); "
            f"predicted ms under {preset or 'no preset'}"
        )
        headers = ["matrix"] + STRATEGIES + [f"ms {name}" for name in STRATEGIES] + ["ms column-hier pipelined"]
        rows = []
        for e in chosen:
            base = e["column"]["inter_group_bytes"]
            cells = [e["matrix"]]
            for name in STRATEGIES:
                inter = e[name]["inter_group_bytes"]
                ratio = f"{inter / base:.3f}" if base else "-"
                cells.append(f"{inter / 1e6:.3f} ({ratio})")
            for name in STRATEGIES + ["column-hier-pipelined"]:
                seconds = e[name]["predicted_seconds"]
                cells.append("-" if seconds is None else f"{seconds * 1e3:.3f}")
            rows.append(cells)
        print(format_table(headers, rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="+", default=None, help="matrix files or generator specs")
    parser.add_argument("--ranks", nargs="+", type=int, default=[16, 32, 64])
    parser.add_argument("--group-sizes", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--proxy", choices=["local", "balanced"], default="local")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "hierarchy.json"))
    args = parser.parse_args()
    entries = []
    for spec in args.matrices or default_matrices(GENERATED):
        print(f"loading {short_name(spec)} ...", file=sys.stderr, flush=True)
        matrix = load_matrix(spec)
        for n_ranks in args.ranks:
            for group_size in args.group_sizes:
                print(f"  P = {n_ranks}, G = {group_size}", file=sys.stderr, flush=True)
                entries.append(measure(spec, matrix, n_ranks, group_size, args.proxy))
    print_tables(entries)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"k": K, "element_bytes": ELEMENT_BYTES, "entries": entries}, indent=1))
    print(f"\nwrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
