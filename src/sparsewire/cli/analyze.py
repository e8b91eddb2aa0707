"""``sparsewire analyze`` (communication volume of each strategy for P ranks) and ``sparsewire
advise`` (every partitioner x strategy and a recommendation), from the global matrix (no MPI),
over :func:`sparsewire.plan.stats.strategy_stats` and :func:`sparsewire.plan.advisor.advise`."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from sparsewire._lib.text import format_bytes, format_table
from sparsewire.cli.common import (
    DTYPES,
    MATRIX_HELP,
    add_partition_arguments,
    add_topology_arguments,
    check_plot_path,
    json_text,
    number,
    positive_int,
    refuse_ranks_beyond_memory,
    stage_progress,
    topology_from_args,
    write_output,
)
from sparsewire.cli.estimate import ESTIMATE_FROM_NONZEROS, estimate_seconds, format_seconds

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``analyze`` and ``advise`` to the CLI's subparsers."""
    advise = commands.add_parser(
        "advise",
        help="measure every partitioner x strategy for P ranks and recommend one (no MPI needed)",
        description=(
            "Partition the matrix for P ranks with every partitioner (even, nnz, metis, rcm, community, and with groups "
            "metis-hier), plan every strategy on each, and print total and inter-group bytes, messages, nonzeros and "
            "bytes per rank (max/mean), predicted time per multiply, setup seconds and the multiplies after which the "
            "partitioning pays for itself against even rows; then the recommendation (least predicted time)."
        ),
    )
    advise.add_argument("matrix", help=MATRIX_HELP)
    advise.add_argument("--ranks", "-P", type=positive_int, required=True, help="number of ranks P")
    advise.add_argument("--k", type=positive_int, default=32, help="columns of B (default: 32)")
    advise.add_argument("--dtype", choices=sorted(DTYPES), default="float64", help="element type (default: float64)")
    advise.add_argument(
        "--strategies",
        default="all",
        help="comma list or all: block, column, row, joint, with groups also the hierarchical ones (default: all)",
    )
    advise.add_argument("--partitions", default="all", help="comma list of partitioners or all (default: all)")
    advise.add_argument(
        "--imbalance",
        type=number(0.0),
        default=0.03,
        help="metis, metis-hier: allowed excess of nonzeros per rank (default: 0.03)",
    )
    advise.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    add_topology_arguments(advise, allow_mpi=False)
    advise.add_argument("--plot", help="write a bar chart (PNG) of bytes and predicted time to this path")
    advise.add_argument("--json", action="store_true", help="print exactly one JSON object")
    advise.set_defaults(handler=run_advise)

    analyze = commands.add_parser(
        "analyze",
        help="communication volume of each strategy for P ranks (no MPI needed)",
        description=(
            "Plan C = A @ B for P ranks from the global matrix and print, per strategy, the bytes moved per "
            "multiply, messages, the busiest rank's bytes, setup bytes and planning time. Needs no MPI."
        ),
    )
    analyze.add_argument("matrix", help=MATRIX_HELP)
    analyze.add_argument("--ranks", "-P", type=positive_int, required=True, help="number of ranks P")
    analyze.add_argument("--k", type=positive_int, default=32, help="columns of B (default: 32)")
    analyze.add_argument(
        "--dtype", choices=sorted(DTYPES), default="float32", help="element type; float32 is the papers' unit (default: float32)"
    )
    analyze.add_argument(
        "--strategies",
        default="all",
        help="comma-separated list or 'all': block, rowwise, column, row, joint, and with a topology column-hier, "
        "joint-hier, joint-group (default: all)",
    )
    add_partition_arguments(analyze)
    analyze.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    add_topology_arguments(analyze, allow_mpi=False)
    analyze.add_argument("--json", action="store_true", help="print exactly one JSON object instead of a table")
    analyze.set_defaults(handler=run_analyze)


def run_analyze(args: argparse.Namespace) -> int:
    from sparsewire.io.readers import load_matrix
    from sparsewire.partition import partition
    from sparsewire.plan.stats import strategy_stats
    from sparsewire.plan.strategies import parse_strategies

    refuse_ranks_beyond_memory(args.ranks)
    topology = topology_from_args(args)
    strategies = parse_strategies(args.strategies, hierarchical=topology is not None)
    if topology is not None:
        topology.groups(args.ranks)  # checks the rank count against an explicit grouping
    element_bytes = np.dtype(DTYPES[args.dtype]).itemsize
    matrix = load_matrix(args.matrix, symmetrize=args.symmetrize)
    partitioning = partition(matrix, args.ranks, args.partition, topology=topology, imbalance=args.imbalance)
    matrix, row_partition, col_partition = partitioning.permute(matrix), partitioning.rows, partitioning.cols

    def stats_of(strategy, of_matrix, progress=None):
        return strategy_stats(
            of_matrix,
            row_partition,
            col_partition,
            strategy,
            args.k,
            element_bytes,
            topology,
            proxy=args.proxy,
            progress=progress,
        )

    estimate = None
    if not args.json and matrix.nnz >= ESTIMATE_FROM_NONZEROS:
        estimate = estimate_seconds(lambda sample: [stats_of(strategy, sample) for strategy in strategies], matrix)
        print(estimate.describe(f"planning {len(strategies)} strategies"), file=sys.stderr, flush=True)
    entries = []
    all_started = time.perf_counter()
    for strategy in strategies:
        if not args.json:
            print(f"planning {strategy.value} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        entry = stats_of(strategy, matrix, None if args.json else stage_progress(f"planning {strategy.value}")).as_dict()
        entry["plan_seconds"] = round(time.perf_counter() - started, 6)
        entries.append(entry)
    if estimate is not None:
        print(
            f"planned {len(strategies)} strategies in {format_seconds(time.perf_counter() - all_started)} "
            f"(estimated {format_seconds(estimate.seconds)})",
            file=sys.stderr,
            flush=True,
        )
    report = {
        "matrix": {"path": args.matrix, "n_rows": int(matrix.shape[0]), "n_cols": int(matrix.shape[1]), "nnz": int(matrix.nnz)},
        "ranks": args.ranks,
        "k": args.k,
        "element_bytes": element_bytes,
        "partition": partitioning.method,
        "partition_reason": partitioning.reason,
        "strategies": entries,
    }
    if topology is not None:
        report["topology"] = {
            "name": topology.name,
            "groups": int(topology.groups(args.ranks).max(initial=-1)) + 1,
            "description": topology.describe(),
            "proxy": args.proxy,
        }
    if args.json:
        print(json_text(report))
        return 0
    print(
        f"{args.matrix}: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nonzeros; "
        f"P = {args.ranks}, k = {args.k}, {args.dtype}, {partitioning.method} partition"
        + (f" ({partitioning.reason})" if partitioning.reason else "")
    )
    if topology is not None:
        print(f"topology {topology.describe()}; proxy {args.proxy}")
    baseline = next((e["total_bytes"] for e in entries if e["name"] == "block"), None)
    rows = []
    for e in entries:
        ratio = f"{e['total_bytes'] / baseline:.4f}" if baseline else "-"
        rows.append(
            [
                e["name"],
                e["total_bytes"],
                format_bytes(e["total_bytes"]),
                ratio,
                e["messages"],
                format_bytes(e["max_rank_send_bytes"]),
                format_bytes(e["max_rank_recv_bytes"]),
                format_bytes(e["setup_bytes"]),
                f"{e['plan_seconds']:.3f}",
            ]
            + (
                [
                    format_bytes(e["intra_group_bytes"]),
                    format_bytes(e["inter_group_bytes"]),
                    f"{e['predicted_seconds'] * 1e3:.4f}",
                ]
                if topology is not None
                else []
            )
        )
    headers = ["strategy", "bytes/multiply", "", "vs block", "messages", "max send", "max recv", "setup", "plan s"]
    if topology is not None:
        headers += ["intra-group", "inter-group", f"predicted ms ({topology.prices()})"]
    print(format_table(headers, rows))
    return 0


def run_advise(args: argparse.Namespace) -> int:
    from sparsewire.errors import InputError
    from sparsewire.io.readers import load_matrix
    from sparsewire.partition import PARTITIONERS
    from sparsewire.plan.advisor import advise, plot_advice
    from sparsewire.plan.strategies import parse_strategies

    topology = topology_from_args(args)
    grouped = topology is not None and len(topology.levels) > 1
    strategies = parse_strategies(args.strategies, executable_only=True, hierarchical=grouped)
    partitioners = None
    if args.partitions != "all":
        partitioners = [p.strip() for p in args.partitions.split(",") if p.strip()]
        unknown = [p for p in partitioners if p not in PARTITIONERS]
        if unknown or not partitioners:
            raise InputError(f"--partitions {args.partitions!r}: choose from {', '.join(PARTITIONERS)} or all")
    if args.plot:
        check_plot_path(args.plot, "--plot")
    refuse_ranks_beyond_memory(args.ranks)
    matrix = load_matrix(args.matrix, symmetrize=args.symmetrize)
    progress = None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))
    report = advise(
        matrix,
        args.ranks,
        topology=topology,
        k=args.k,
        element_bytes=np.dtype(DTYPES[args.dtype]).itemsize,
        strategies=strategies,
        partitioners=partitioners,
        imbalance=args.imbalance,
        progress=progress,
    )
    report["matrix"]["path"] = args.matrix
    if args.plot:
        write_output(args.plot, "--plot", lambda target: plot_advice(report, target, args.matrix))
    if args.json:
        print(json_text(report))
        return 0
    print(
        f"{args.matrix}: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nonzeros; P = {args.ranks}, k = {args.k}, "
        f"{args.dtype}, {report['topology']}"
    )
    table = []
    for r in report["rows"]:
        table.append(
            [
                r["partition"],
                r["strategy"],
                format_bytes(r["total_bytes"]),
                format_bytes(r["inter_group_bytes"]),
                r["messages"],
                r["steps"],
                f"{r['nnz_imbalance']:.3f}",
                f"{r['bytes_imbalance']:.2f}",
                f"{r['predicted_seconds'] * 1e6:.1f}",
                f"{r['setup_seconds']:.2f}",
                "-" if r["break_even_multiplies"] is None else r["break_even_multiplies"],
            ]
        )
    print(
        format_table(
            [
                "partition",
                "strategy",
                "bytes/multiply",
                "inter-group",
                "messages",
                "steps",
                "nnz max/mean",
                "bytes max/mean",
                "predicted us",
                "setup s",
                "pays off after",
            ],
            table,
        )
    )
    best = report["recommendation"]
    chosen = next(r for r in report["rows"] if r["partition"] == best["partition"] and r["strategy"] == best["strategy"])
    print(
        f"recommendation: --partition {best['partition']} --strategy {best['strategy']} "
        f"({chosen['predicted_seconds'] * 1e6:.1f} us and {format_bytes(chosen['total_bytes'])} per multiply)"
    )
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
