"""The ``netsparse`` command (no MPI needed): a thin handler over :mod:`sparsewire.sim.netsparse.simulator` (the NetSparse
characterization, in-network mechanisms, baselines, ablation, sweeps, and our plans beside them)."""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from sparsewire._lib.atomic import save_figure
from sparsewire._lib.text import format_bytes, format_table
from sparsewire.cli.common import (
    MATRIX_HELP,
    check_plot_path,
    json_text,
    number,
    positive_int,
    progress_printer,
    write_output,
)
from sparsewire.cli.estimate import estimate_seconds, format_seconds
from sparsewire.errors import InputError

__all__ = ["add_commands"]

ELEMENT_BYTES = 4
SOFTWARE_PLANS = ("column", "joint", "column-hier", "joint-hier", "joint-group")


def add_commands(commands) -> None:
    """Add ``netsparse`` to the CLI's subparsers."""
    from sparsewire.sim.network_builders import network_presets

    presets = ", ".join(network_presets())

    netsparse = commands.add_parser(
        "netsparse",
        help="NetSparse characterization, in-network mechanisms, ablation, sweeps and software plans",
        description=(
            "Spread the matrix's rows evenly over --nodes nodes and report NetSparse (MICRO'25) sec. 3: redundant "
            "transfers per useful one of sparsity-unaware (SU) and sparsity-aware (SA) communication, header share "
            "per K, unique destinations among 64 consecutive requests, requests shared within a rack; then "
            "simulate SUOpt, SAOpt and NetSparse (RIG units, filter, coalesce, NIC and switch concatenation, "
            "top-of-rack property cache) on the modelled cluster. --ablation adds Table 8, --sweep Figs. 15/17/18, "
            "--topologies Fig. 22, --compare-plans our software plans on the same cluster (table and PNG)."
        ),
    )
    netsparse.add_argument("matrix", help=MATRIX_HELP)
    netsparse.add_argument("--nodes", type=positive_int, default=128, help="nodes (default: 128)")
    netsparse.add_argument("--rack", type=positive_int, default=16, help="nodes per rack (leaf-spine; default: 16)")
    netsparse.add_argument("--k", type=positive_int, default=16, help="property elements K, 4 bytes each (default: 16)")
    netsparse.add_argument(
        "--topology",
        default="leafspine",
        help="leafspine (racks of --rack, as many spines), or a preset: " + presets + " (default: leafspine)",
    )
    netsparse.add_argument(
        "--ablation", action="store_true", help="Table 8: RIG, +filter, +coalesce, +NIC concatenation, +switch"
    )
    netsparse.add_argument("--sweep", default="", help="comma list of batch, delay, cache (Figs. 15, 17, 18)")
    netsparse.add_argument(
        "--topologies", action="store_true", help="Fig. 22: NetSparse vs SUOpt on leaf-spine, HyperX, dragonfly"
    )
    netsparse.add_argument(
        "--estimate",
        action="store_true",
        help="first run the same simulation on 1/64 and 1/32 of the rows and print how long the whole will take (the "
        "two samples cost about a third of a 100M-nonzero run at 128 nodes: each solves the same n^2 flows)",
    )
    netsparse.add_argument(
        "--compare-plans",
        action="store_true",
        help="our software plans (column, joint, column-hier, joint-hier, joint-group) beside SUOpt, SAOpt, NetSparse",
    )
    netsparse.add_argument("--plot", default="netsparse-compare.png", help="PNG of --compare-plans (default: %(default)s)")
    netsparse.add_argument("--batch", type=positive_int, help="RIG batch size in nonzeros (default: per matrix, see docs)")
    netsparse.add_argument("--nic-delay", type=int, default=500, help="NIC concatenation delay in cycles (default: 500)")
    netsparse.add_argument(
        "--cache-mb",
        type=number(-1.0, below=float(2**43)),  # 2**43 MB: a byte count past 64 bits
        default=32.0,
        help="property cache per switch in MB; 0 = none, -1 = unbounded (default: 32)",
    )
    netsparse.add_argument("--sa-cores", type=positive_int, default=64, help="SAOpt cores per node (default: 64)")
    netsparse.add_argument(
        "--sa-overhead-ns",
        type=number(0.0),
        default=800.0,
        help="SAOpt software time per request and core in ns (default: 800, about 10%% goodput at K=16)",
    )
    netsparse.add_argument("--json", action="store_true", help="print exactly one JSON object")
    netsparse.set_defaults(handler=_run_netsparse)


def _netsparse_network(args: argparse.Namespace, name: str | None = None):
    from sparsewire.sim.network import GIGABIT
    from sparsewire.sim.network_builders import build_network, leaf_spine

    name = (name or args.topology).strip().lower()
    if name == "leafspine":
        return leaf_spine(
            args.nodes,
            rack_size=args.rack,
            spines=args.rack,
            bandwidth=400 * GIGABIT,
            name="leaf-spine",
            mtu=1500,
            packet_header_bytes=50,
            message_overhead=1e-6,
        )
    return build_network(name, args.nodes)


def _plans_rows(matrix, network, nodes: int, k: int, su, progress) -> list[dict]:
    from sparsewire.partition import partition
    from sparsewire.plan.stats import strategy_stats
    from sparsewire.sim.plan_timing import simulate_plan, wire_bytes

    topology = network.planner_topology(nodes)
    grouped = len(topology.levels) > 1
    rows, cols = partition(matrix, nodes, "even").partitions
    result = []
    for name in SOFTWARE_PLANS:
        if name.endswith(("-hier", "-group")) and not grouped:
            continue
        if progress:
            progress(f"software plan {name} ...")
        stats = strategy_stats(matrix, rows, cols, name, k, ELEMENT_BYTES, topology if grouped else None)
        timing = simulate_plan(stats, network)
        received = np.bincount(stats.destinations, weights=wire_bytes(stats.message_bytes, network), minlength=nodes)
        traffic = int(received.max(initial=0))
        result.append(
            {
                "mechanisms": f"software {name}",
                "kind": "software",
                "seconds": timing.communication_seconds,
                "lower_bound_seconds": timing.lower_bound_seconds,
                "speedup_vs_su": su.seconds / timing.communication_seconds if timing.communication_seconds else float("inf"),
                "traffic_reduction_vs_su": su.tail_traffic_bytes / traffic if traffic else float("inf"),
                "tail_traffic_bytes": traffic,
                "total_bytes": int(stats.total_bytes),
                "steps": len(timing.steps),
            }
        )
    return result


def _plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["mechanisms"] for r in rows]
    values = [r["speedup_vs_su"] for r in rows]
    colors = ["#4c72b0" if r.get("kind") == "software" else "#dd8452" if r.get("kind") == "hardware" else "#8c8c8c" for r in rows]
    figure, axes = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 4))
    axes.bar(range(len(rows)), values, color=colors)
    axes.set_xticks(range(len(rows)), names, rotation=30, ha="right")
    axes.set_yscale("log")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_ylabel("communication speedup over SUOpt")
    axes.set_title(title, fontsize=9)
    for index, value in enumerate(values):
        axes.text(index, value, f"{value:.2g}", ha="center", va="bottom", fontsize=8)
    figure.tight_layout()
    save_figure(figure, path, dpi=120)
    plt.close(figure)


def _simulate(workload, args: argparse.Namespace, network, hardware, sweeps: list[str], progress) -> tuple[dict, object]:
    """The characterization, SUOpt, SAOpt and NetSparse runs (and the ablation, sweeps and topologies asked
    for) of one workload: the report's parts from ``hardware`` on, and SUOpt's result."""
    from sparsewire.sim.netsparse import simulator as ns

    simulator = ns.NetSparseSimulator(workload, network, args.k, progress)
    characterization, su, sa, full = ns.headline(simulator, hardware, args.rack, args.sa_cores, args.sa_overhead_ns * 1e-9)
    report = {
        "hardware": {**{key: value for key, value in vars(hardware).items()}, "batch": simulator.batch(hardware)},
        "characterization": characterization,
        "results": [dict(su.row(su), kind="baseline"), dict(sa.row(su), kind="baseline"), dict(full.row(su), kind="hardware")],
    }
    if args.ablation:
        report["ablation"] = ns.ablation(simulator, su, hardware)
    if sweeps:
        report["sweeps"] = [ns.sweep(simulator, name, hardware) for name in sweeps]
    if args.topologies:
        report["topologies"] = []
        for name in ("leafspine", "netsparse-hyperx", "netsparse-dragonfly"):
            other = _netsparse_network(args, name)
            other_su = ns.su_opt(workload, other, args.k)
            result = ns.NetSparseSimulator(workload, other, args.k, progress).run(ns.Mechanisms(), hardware, "NetSparse")
            report["topologies"].append({"topology": other.name, **result.row(other_su)})
    return report, su


def _run_netsparse(args: argparse.Namespace) -> int:

    from sparsewire.io.readers import load_matrix
    from sparsewire.sim.netsparse import simulator as ns

    progress = progress_printer(args)
    if args.compare_plans:
        check_plot_path(args.plot, "--plot")
    sweeps = [name.strip().lower() for name in args.sweep.split(",") if name.strip()]
    for name in sweeps:
        if name not in ns.SWEEPS:
            raise InputError(f"unknown sweep {name!r}; choose from {', '.join(ns.SWEEPS)}")
    if args.nic_delay < 0:
        raise InputError(f"--nic-delay must be at least 0 cycles (got {args.nic_delay})")
    if not np.isfinite(args.cache_mb) or (args.cache_mb < 0 and args.cache_mb != -1):
        raise InputError(f"--cache-mb must be 0 or more, or -1 for unbounded (got {args.cache_mb})")
    if args.sa_overhead_ns < 0 or not np.isfinite(args.sa_overhead_ns):
        raise InputError(f"--sa-overhead-ns must be 0 or more (got {args.sa_overhead_ns})")
    network = _netsparse_network(args)
    started = time.perf_counter()
    matrix = load_matrix(args.matrix)
    if matrix.shape[0] != matrix.shape[1]:
        raise InputError(
            f"NetSparse's workload needs a square matrix (rows and properties split alike); got {matrix.shape[0]} x "
            f"{matrix.shape[1]}"
        )
    n_rows, nnz = int(matrix.shape[0]), int(matrix.nnz)
    hardware = ns.Hardware(
        batch=args.batch,
        nic_delay_cycles=args.nic_delay,
        cache_bytes=None if args.cache_mb == -1 else int(args.cache_mb * (1 << 20)),
    )
    estimate = None
    if progress and args.estimate:
        estimate = estimate_seconds(
            lambda sample: _simulate(ns.Workload.from_matrix(sample, args.nodes), args, network, hardware, sweeps, None), matrix
        )
        progress(estimate.describe("the simulation"))
    workload = ns.Workload.from_matrix(matrix, args.nodes)
    if not args.compare_plans:
        del matrix  # the simulator needs only the pattern: the values (8 bytes a nonzero) are freed
    if progress:
        progress(f"{args.matrix}: {n_rows} x {n_rows}, {nnz:,} nonzeros over {args.nodes} nodes; {network.describe()}")
    simulated = time.perf_counter()
    results, su = _simulate(workload, args, network, hardware, sweeps, progress)
    report = {
        "matrix": {"path": args.matrix, "n_rows": n_rows, "nnz": nnz},
        "nodes": args.nodes,
        "rack": args.rack,
        "k": args.k,
        "network": network.describe(),
        **results,
    }
    if args.compare_plans:
        comparison = report["results"] + _plans_rows(matrix, network, args.nodes, args.k, su, progress)
        report["comparison"] = comparison
        write_output(
            args.plot,
            "--plot",
            lambda target: _plot(
                comparison, target, f"{os.path.basename(args.matrix)}: {args.nodes} nodes, K = {args.k}, {network.name}"
            ),
        )
        report["plot"] = args.plot
    if estimate is not None:
        progress(f"simulated in {format_seconds(time.perf_counter() - simulated)} (estimated {format_seconds(estimate.seconds)})")
    report["elapsed_seconds"] = round(time.perf_counter() - started, 2)
    if args.json:
        print(json_text(report))
        return 0
    _print_netsparse(report)
    return 0


def _fmt(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if np.isfinite(value) else "inf"


def _print_netsparse(report: dict) -> None:
    c = report["characterization"]
    print(
        f"{report['matrix']['path']}: {report['matrix']['n_rows']} rows, {report['matrix']['nnz']:,} nonzeros; "
        f"{report['nodes']} nodes, K = {report['k']}; {report['network']}"
    )
    print("characterization (NetSparse sec. 3):")
    print(
        f"  useful : redundant transfers  SU 1 : {_fmt(c['su_redundant_per_useful'])}   SA 1 : "
        f"{_fmt(c['sa_redundant_per_useful'])}"
    )
    print("  header share of SA traffic   " + ", ".join(f"K={k}: {v}%" for k, v in c["header_share_percent"].items()))
    print(f"  unique destinations per 64 consecutive requests: {c['unique_destinations_per_64']:.2f}")
    print(f"  requests useful to more than one node of a {c['group_size']}-node group: {c['group_shared_percent']:.1f}%")

    def table(title: str, rows: list[dict], first: str = "mechanisms") -> None:
        print(title)
        body = [
            [
                r.get("topology", r[first]) if first == "topology" else r[first],
                f"{r['seconds'] * 1e6:.1f}",
                _fmt(r["speedup_vs_su"]),
                _fmt(r["traffic_reduction_vs_su"]),
                format_bytes(r["tail_traffic_bytes"]),
                f"{r.get('goodput_percent', float('nan')):.1f}",
                f"{r.get('line_utilization_percent', float('nan')):.1f}",
                f"{r.get('requests_per_packet', float('nan')):.1f}",
                f"{r.get('filter_coalesce_percent', float('nan')):.1f}",
                f"{r.get('cache_hit_percent', float('nan')):.1f}",
            ]
            for r in rows
        ]
        print(
            format_table(
                [
                    first,
                    "comm us",
                    "speedup vs SU",
                    "traffic / SU",
                    "tail traffic",
                    "goodput %",
                    "line util %",
                    "PR/packet",
                    "filter+coalesce %",
                    "cache hit %",
                ],
                body,
            )
        )

    table("baselines and NetSparse:", report["results"])
    if "ablation" in report:
        table("ablation (Table 8 order), against SUOpt:", report["ablation"])
    for entry in report.get("sweeps", []):
        print(f"sweep: {entry['description']}")
        print(
            format_table(
                ["value", "comm us", "speedup", "cache hit %", "PR/packet"],
                [
                    [
                        p["value"],
                        f"{p['seconds'] * 1e6:.1f}",
                        _fmt(p["speedup"]),
                        f"{p['cache_hit_percent']:.1f}",
                        f"{p['requests_per_packet']:.1f}",
                    ]
                    for p in entry["points"]
                ],
            )
        )
    if "topologies" in report:
        table("topologies (Fig. 22), NetSparse against SUOpt:", report["topologies"], "topology")
    if "comparison" in report:
        print("software plans versus hardware (same cluster, same matrix):")
        print(
            format_table(
                ["approach", "comm us", "speedup vs SU", "traffic / SU", "tail traffic"],
                [
                    [
                        r["mechanisms"],
                        f"{r['seconds'] * 1e6:.1f}",
                        _fmt(r["speedup_vs_su"]),
                        _fmt(r["traffic_reduction_vs_su"]),
                        format_bytes(r["tail_traffic_bytes"]),
                    ]
                    for r in report["comparison"]
                ],
            )
        )
        print(f"plot: {report['plot']}")
    print(f"elapsed {report['elapsed_seconds']} s")
