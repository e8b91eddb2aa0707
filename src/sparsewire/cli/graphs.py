"""The graph commands ``bfs``, ``sssp``, ``triangles`` and ``reach`` (all under mpiexec): thin handlers over
:mod:`sparsewire.apps.graphs`."""

from __future__ import annotations

import argparse

import numpy as np

from sparsewire._lib.text import format_bytes
from sparsewire.cli.common import MATRIX_HELP, add_partition_arguments
from sparsewire.cli.spgemm import VALUES_HELP, load_on_root, print_report, start_mpi

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``bfs``, ``sssp``, ``triangles`` and ``reach`` to the CLI's subparsers."""
    for name, summary in (
        ("bfs", "BFS levels from a source: repeated A^T (any.pair) frontier, 1D"),
        ("sssp", "single-source shortest paths: Bellman-Ford with A^T (min.+) changed distances, 1D"),
    ):
        command = commands.add_parser(name, help=summary, description=f"{summary}. Checked against SciPy with --check.")
        command.add_argument("matrix", help=MATRIX_HELP)
        command.add_argument("--source", type=int, default=0, help="source vertex (default: 0)")
        command.add_argument("--values", default="file", help=VALUES_HELP)
        add_partition_arguments(command)
        command.add_argument("--check", action="store_true", help="compare with SciPy's shortest paths")
        command.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
        command.set_defaults(handler=_run_vertex_algorithm)

    triangles = commands.add_parser(
        "triangles",
        help="count triangles: sum(L (+.pair) L masked by L), distributed",
        description="Triangles of the undirected graph of the matrix: L = strictly lower triangle of the pattern "
        "of A + A^T, count = sum of L (+.pair) L masked by L.",
    )
    reach = commands.add_parser(
        "reach",
        help="k-hop reachability: (I + A)^k over (lor, land) by repeated squaring",
        description="Pairs (u, v) with v reachable from u in at most --hops steps, by distributed repeated squaring.",
    )
    reach.add_argument("--hops", type=int, required=True, help="the k of k-hop reachability (>= 0)")
    for command in (triangles, reach):
        command.add_argument("matrix", help=MATRIX_HELP)
        command.add_argument(
            "--algorithm",
            choices=["summa", "1d", "auto"] if command is triangles else ["summa", "1d"],
            default="auto" if command is triangles else "summa",
            help="(default: %(default)s)",
        )
        command.add_argument("--grid", help="SUMMA grid ROWSxCOLS (default: most nearly square)")
        add_partition_arguments(command)
        command.add_argument("--check", action="store_true", help="compare with a SciPy reference")
        command.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    triangles.set_defaults(handler=_run_triangles)
    reach.set_defaults(handler=_run_reach)


def _timed(comm, function):
    """Collective. One run of ``function``, timed as the slowest rank (:func:`sparsewire.profile.timed.timed_run`)."""
    from sparsewire.profile.timed import timed_run

    run = timed_run(comm, function, 1, warmup=0)
    return run.result, run.seconds[0]


def _run_vertex_algorithm(args: argparse.Namespace) -> int:
    from sparsewire.spgemm.values import check_values_spec

    check_values_spec(args.values)
    comm = start_mpi(args)
    from sparsewire.apps import graphs

    matrix = load_on_root(comm, args.matrix, args.values)
    function = graphs.bfs_levels if args.command == "bfs" else graphs.shortest_paths
    run, seconds = _timed(comm, lambda: function(comm, matrix, args.source, partition=args.partition, imbalance=args.imbalance))
    if comm.Get_rank() != 0:
        return 0
    values = run["values"]
    reached = np.isfinite(values)
    report = {
        "command": args.command,
        "matrix": args.matrix,
        "ranks": comm.Get_size(),
        "source": args.source,
        "algorithm": run["algorithm"],
        "seconds": seconds,
        "steps": run["steps"],
        "bytes_moved": run["bytes_moved"],
        "reached": int(reached.sum()),
        "max_value": float(values[reached].max()),
        "sum_values": float(values[reached].sum()),
    }
    if args.check:
        reference = (graphs.reference_bfs_levels if args.command == "bfs" else graphs.reference_shortest_paths)(
            matrix, args.source
        )
        report["check_passed"] = bool(np.array_equal(values, reference))
    name = "level" if args.command == "bfs" else "distance"
    lines = [
        f"{args.command} from {args.source} on {args.matrix}, {comm.Get_size()} ranks ({run['algorithm']})",
        f"reached {report['reached']} of {values.size} vertices; max {name} {report['max_value']:g}, sum "
        f"{report['sum_values']:g}",
        f"{run['steps']} steps in {seconds:.4f} s, bytes_moved {run['bytes_moved']} ({format_bytes(run['bytes_moved'])})",
    ]
    if args.check:
        lines.append(f"check against SciPy: {'passed' if report['check_passed'] else 'FAILED'}")
    return print_report(args, report, lines)


def _run_on_pattern(args: argparse.Namespace, algorithm):
    """Load the pattern (values 1) on rank 0 and time ``algorithm(comm, matrix, grid)`` on every
    rank; (comm, matrix, run, seconds), or None on ranks other than 0."""
    comm = start_mpi(args)
    from sparsewire.spgemm.summa import parse_grid

    grid = parse_grid(args.grid, comm.Get_size())
    matrix = load_on_root(comm, args.matrix, "ones")
    run, seconds = _timed(comm, lambda: algorithm(comm, matrix, grid))
    return (comm, matrix, run, seconds) if comm.Get_rank() == 0 else None


def _run_triangles(args: argparse.Namespace) -> int:
    from sparsewire.apps import graphs

    outcome = _run_on_pattern(
        args,
        lambda comm, matrix, grid: graphs.triangle_count(
            comm, matrix, algorithm=args.algorithm, grid=grid, partition=args.partition, imbalance=args.imbalance
        ),
    )
    if outcome is None:
        return 0
    comm, matrix, run, seconds = outcome
    report = {
        "command": "triangles",
        "matrix": args.matrix,
        "ranks": comm.Get_size(),
        "algorithm": run["algorithm"],
        "triangles": run["values"],
        "seconds": seconds,
        "bytes_moved": run["bytes_moved"],
    }
    if args.check:
        report["reference_triangles"] = graphs.reference_triangle_count(matrix)
        report["check_passed"] = report["reference_triangles"] == run["values"]
    lines = [
        f"triangles in {args.matrix}: {run['values']} ({comm.Get_size()} ranks, {run['algorithm']}, {seconds:.4f} s, "
        f"bytes_moved {format_bytes(run['bytes_moved'])})"
    ]
    if args.check:
        lines.append(f"check against SciPy: {'passed' if report['check_passed'] else 'FAILED'} ({report['reference_triangles']})")
    return print_report(args, report, lines)


def _run_reach(args: argparse.Namespace) -> int:
    from sparsewire.apps import graphs

    outcome = _run_on_pattern(
        args,
        lambda comm, matrix, grid: graphs.reachable_within(
            comm, matrix, args.hops, algorithm=args.algorithm, grid=grid, partition=args.partition, imbalance=args.imbalance
        ),
    )
    if outcome is None:
        return 0
    comm, matrix, run, seconds = outcome
    reach = run["values"]
    report = {
        "command": "reach",
        "matrix": args.matrix,
        "ranks": comm.Get_size(),
        "hops": args.hops,
        "algorithm": run["algorithm"],
        "reachable_pairs": int(reach.nnz),
        "products": run["steps"],
        "seconds": seconds,
        "bytes_moved": run["bytes_moved"],
    }
    if args.check:
        reference = graphs.reference_reachable_within(matrix, args.hops)
        report["check_passed"] = bool(reach.shape == reference.shape and (reach != reference).nnz == 0)
    lines = [
        f"{args.hops}-hop reachability in {args.matrix}: {reach.nnz} pairs, {run['steps']} distributed products "
        f"({run['algorithm']}, {seconds:.4f} s, bytes_moved {format_bytes(run['bytes_moved'])})"
    ]
    if args.check:
        lines.append(f"check against SciPy: {'passed' if report['check_passed'] else 'FAILED'}")
    return print_report(args, report, lines)
