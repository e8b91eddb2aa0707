"""The ``simulate`` command (no MPI needed): a thin handler over :mod:`sparsewire.sim` (plans on a modelled
network, with a compute model)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from sparsewire._lib.text import format_bytes, format_table
from sparsewire.calibration.compute import default_calibration_path, load_compute_rate, measure_compute_rate
from sparsewire.cli.common import (
    MATRIX_HELP,
    add_partition_arguments,
    json_text,
    number,
    positive_int,
    progress_printer,
    refuse_ranks_beyond_memory,
)
from sparsewire.errors import InputError

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``simulate`` to the CLI's subparsers."""
    from sparsewire.sim.network_builders import network_presets

    presets = ", ".join(network_presets())

    simulate = commands.add_parser(
        "simulate",
        help="predicted time of each strategy's plan on a modelled cluster (no MPI needed)",
        description=(
            "Plan C = A @ B for P ranks (one per host of the modelled network) and predict, per strategy, the "
            "communication time of every plan step with a max-min fair flow model (latency, per-message overhead "
            "and packet headers added), its lower bound (busiest link), the slowest rank, and the total with a "
            "compute model (local SpMM at a rate measured by 'sparsewire calibrate', or --compute-rate); the "
            "diagonal block overlaps communication as in the overlap executor."
        ),
    )
    simulate.add_argument("matrix", help=MATRIX_HELP)
    simulate.add_argument("--ranks", "-P", type=positive_int, required=True, help="number of ranks P (one per host)")
    simulate.add_argument("--topology", required=True, help=f"network preset: {presets}")
    simulate.add_argument(
        "--strategies",
        default="auto",
        help="comma list (block, rowwise, column, row, joint, column-hier, joint-hier, "
        "joint-group) or auto: column, joint, and the hierarchical ones when the network has groups (default: auto)",
    )
    simulate.add_argument("--k", type=positive_int, default=32, help="columns of B (default: 32)")
    simulate.add_argument("--element-bytes", type=positive_int, default=4, help="bytes per element of B (default: 4, float32)")
    add_partition_arguments(simulate)
    rate = simulate.add_mutually_exclusive_group()
    rate.add_argument(
        "--compute-rate", type=number(0.0, above=True), help="local SpMM rate in nonzero-columns per second (nnz * k / s)"
    )
    rate.add_argument(
        "--calibration",
        help=f"file written by 'sparsewire calibrate' (default: {default_calibration_path()}; measured now if absent)",
    )
    simulate.add_argument("--no-compute", action="store_true", help="communication only")
    simulate.add_argument("--json", action="store_true", help="print exactly one JSON object")
    simulate.set_defaults(handler=_run_simulate)


def _compute_rate(args: argparse.Namespace, progress) -> tuple[float | None, str]:
    if args.no_compute:
        return None, "none"
    if args.compute_rate is not None:
        if not np.isfinite(args.compute_rate) or args.compute_rate <= 0:
            raise InputError(f"--compute-rate must be a positive number (got {args.compute_rate})")
        return args.compute_rate, "given"
    path = Path(args.calibration) if args.calibration else default_calibration_path()
    if args.calibration:
        return load_compute_rate(path), str(path)
    if path.exists():
        try:
            return load_compute_rate(path), str(path)
        except InputError as error:  # the stored one is ours: a damaged cache (a killed calibration) is as good as none
            if progress:
                progress(f"ignoring the damaged stored calibration ({error})")
    if progress:
        progress(f"no usable calibration at {path}: measuring the local SpMM rate now (run 'sparsewire calibrate' to keep one)")
    return measure_compute_rate(3)["compute_rate"], "measured now"


def _run_simulate(args: argparse.Namespace) -> int:
    from sparsewire.io.readers import load_matrix
    from sparsewire.partition import partition
    from sparsewire.plan.stats import strategy_stats
    from sparsewire.plan.strategies import parse_strategies
    from sparsewire.sim.network_builders import build_network
    from sparsewire.sim.plan_timing import rank_nonzeros, simulate_plan
    from sparsewire.topology.presets import PRESETS

    refuse_ranks_beyond_memory(args.ranks)
    progress = progress_printer(args)
    network = build_network(args.topology, args.ranks)
    topology = network.planner_topology(args.ranks)
    grouped = len(topology.levels) > 1
    text = (
        "column,joint" + (",column-hier,joint-hier,joint-group" if grouped else "")
        if args.strategies == "auto"
        else args.strategies
    )
    strategies = parse_strategies(text, hierarchical=grouped)
    rate, rate_source = _compute_rate(args, progress)
    matrix = load_matrix(args.matrix)
    partitioning = partition(matrix, args.ranks, args.partition, topology=topology, imbalance=args.imbalance)
    matrix, rows, cols = partitioning.permute(matrix), partitioning.rows, partitioning.cols
    diagonal, off = rank_nonzeros(matrix, rows, cols)
    entries = []
    for strategy in strategies:
        if progress:
            progress(f"planning and simulating {strategy.value} ...")
        started = time.perf_counter()
        stats = strategy_stats(matrix, rows, cols, strategy, args.k, args.element_bytes, topology if grouped else None)
        result = simulate_plan(stats, network, diagonal_nonzeros=diagonal, off_diagonal_nonzeros=off, compute_rate=rate)
        entry = result.as_dict()
        entry["total_bytes"] = stats.total_bytes
        entry["simulation_seconds"] = round(time.perf_counter() - started, 3)
        entries.append(entry)
    report = {
        "matrix": {"path": args.matrix, "n_rows": int(matrix.shape[0]), "n_cols": int(matrix.shape[1]), "nnz": int(matrix.nnz)},
        "ranks": args.ranks,
        "k": args.k,
        "element_bytes": args.element_bytes,
        "network": network.describe(),
        "machine": PRESETS[network.name].description,
        "compute_rate": rate,
        "compute_rate_source": rate_source,
        "strategies": entries,
    }
    if args.json:
        print(json_text(report))
        return 0
    print(f"{args.matrix}: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nonzeros; P = {args.ranks}, k = {args.k}")
    print(f"network {network.describe()} ({report['machine']})")
    print(f"compute model: {'none' if rate is None else f'{rate:.3g} nonzero-columns/s ({rate_source})'}")
    rows_out = []
    for e in entries:
        steps = " + ".join(f"{s['seconds'] * 1e6:.1f}" for s in e["steps"]) or "0"
        rows_out.append(
            [
                e["name"],
                format_bytes(e["total_bytes"]),
                steps,
                f"{e['communication_seconds'] * 1e6:.1f}",
                f"{e['lower_bound_seconds'] * 1e6:.1f}",
                f"{e['compute_seconds'] * 1e6:.1f}",
                f"{e['total_seconds'] * 1e6:.1f}",
                e["slowest_rank"],
            ]
        )
    print(
        format_table(
            ["strategy", "bytes", "steps (us)", "comm us", "lower bound us", "compute us", "total us", "slowest rank"], rows_out
        )
    )
    return 0
