"""The ``sparsewire`` command line: ``analyze`` (no MPI), ``spmm`` (under mpiexec), the SpGEMM
commands ``spgemm``, ``bfs``, ``sssp``, ``triangles``, ``reach`` (under mpiexec; see
:mod:`sparsewire.spgemm.commands`), and the simulation commands ``simulate``, ``calibrate``,
``netsparse`` (no MPI; see :mod:`sparsewire.sim.commands`).

Every user error prints one line ``sparsewire: error: <problem>; <fix>`` on rank 0 and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from sparsewire import __version__
from sparsewire.errors import InputError, SparsewireError
from sparsewire.report import format_bytes, format_table

__all__ = ["main", "build_parser"]

MATRIX_HELP = (
    "a .mtx/.mtx.gz (Matrix Market), .txt/.txt.gz (SNAP edge list) or .npz file, or a generator spec: "
    "rmat:SCALE:EDGE_FACTOR[:SEED], delaunay:N[:SEED], stencil2d:NX[:NY], stencil3d:N[:7|27], "
    "uniform:ROWS[xCOLS]:PER_ROW[:SEED]"
)
DTYPES = {"float32": np.float32, "float64": np.float64}
DEFAULT_MODE = "auto"


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one InputError line instead of its usage dump."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse hook
        raise InputError(f"{message}; see '{self.prog} --help'")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer (got {text!r})") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="sparsewire",
        description="Distributed sparse x dense (SpMM) and sparse x sparse semiring (SpGEMM) matrix multiplication "
        "that moves as few bytes as the sparsity allows.",
    )
    parser.add_argument("--version", action="version", version=f"sparsewire {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    analyze = commands.add_parser(
        "analyze",
        help="communication volume of each strategy for P ranks (no MPI needed)",
        description=(
            "Plan C = A @ B for P ranks from the global matrix and print, per strategy, the bytes moved per "
            "multiply, messages, the busiest rank's bytes, setup bytes and planning time. Needs no MPI."
        ),
    )
    analyze.add_argument("matrix", help=MATRIX_HELP)
    analyze.add_argument("--ranks", "-P", type=_positive_int, required=True, help="number of ranks P")
    analyze.add_argument("--k", type=_positive_int, default=32, help="columns of B (default: 32)")
    analyze.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="element type; float32 is the papers' unit (default: float32)")
    analyze.add_argument(
        "--strategies",
        default="all",
        help="comma-separated list or 'all': block, rowwise, column, row, joint, and with a topology column-hier, "
        "joint-hier, joint-group (default: all)",
    )
    analyze.add_argument("--partition", choices=["even", "nnz"], default="even", help="row partition: even rows or balanced nonzeros (default: even)")
    analyze.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    _add_topology_arguments(analyze, allow_mpi=False)
    analyze.add_argument("--json", action="store_true", help="print exactly one JSON object instead of a table")
    analyze.set_defaults(handler=_run_analyze)

    spmm = commands.add_parser(
        "spmm",
        help="run distributed C = A @ B under mpiexec",
        description=(
            "Run C = A @ B on the ranks of mpiexec -n P with B[i, j] a hash of (i, j) in [-0.5, 0.5) (see docs/cli.md). Rank 0 loads "
            "the matrix and hands each rank its rows; the ranks plan collectively, then multiply --repeat times "
            "after one warm-up. Several strategies or modes (comma-separated, or 'all') print a comparison table."
        ),
    )
    spmm.add_argument("matrix", help=MATRIX_HELP)
    spmm.add_argument("--k", type=_positive_int, default=32, help="columns of B (default: 32)")
    spmm.add_argument("--dtype", choices=sorted(DTYPES), default="float64", help="element type (default: float64)")
    spmm.add_argument(
        "--strategy",
        default="joint",
        help="block, column, row, joint, with a topology also column-hier, joint-hier, joint-group; a comma list, "
        "or all (default: joint)",
    )
    spmm.add_argument(
        "--mode",
        default=DEFAULT_MODE,
        help="bulk (exchange, then compute), overlap (diagonal block while messages fly), pipelined (CoLa Alg. 3: "
        "one stage per remote group, double buffers), early (each message multiplied as it arrives), partitioned "
        "(MPI-4 partitioned messages, one partition per thread), a comma list, all, or auto: early for k <= 16 when "
        f"ranks x threads fit the cores, else overlap (chosen by bench/async_modes.py; default: {DEFAULT_MODE})",
    )
    spmm.add_argument(
        "--threads",
        "-T",
        type=_positive_int,
        help="threads per rank for the local kernels and partitions per message (default: cores / ranks on the node)",
    )
    spmm.add_argument(
        "--deterministic",
        action="store_true",
        help="fixed summation order: C bitwise identical across runs, modes and threads (and across P for block, "
        "column, column-hier); C is computed after all messages arrive",
    )
    spmm.add_argument("--repeat", type=_positive_int, default=10, help="timed multiplies per run (default: 10)")
    spmm.add_argument("--partition", choices=["even", "nnz"], default="even", help="row partition (default: even)")
    spmm.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    _add_topology_arguments(spmm, allow_mpi=True)
    spmm.add_argument("--check", action="store_true", help="gather C on rank 0 and compare with SciPy (max_abs_error)")
    spmm.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    spmm.set_defaults(handler=_run_spmm)

    eigs = commands.add_parser(
        "eigs",
        help="largest-magnitude eigenpairs of a symmetric matrix under mpiexec (block Krylov on one SpMM plan)",
        description=(
            "Compute the --nev largest-magnitude eigenvalues of a symmetric matrix by a restarted block Krylov method "
            "with Rayleigh-Ritz: every multiply is one distributed SpMM of width --block on one plan; the small dense "
            "problems are solved on every rank. Prints eigenvalues, iterations, multiplies per second and bytes per "
            "iteration."
        ),
    )
    eigs.add_argument("matrix", help=MATRIX_HELP)
    eigs.add_argument("--nev", type=_positive_int, default=4, help="eigenpairs wanted (default: 4)")
    eigs.add_argument("--block", type=_positive_int, help="block width b >= nev (default: nev + 4)")
    eigs.add_argument("--steps", type=_positive_int, default=8, help="blocks per Krylov basis before a restart (default: 8)")
    eigs.add_argument("--tol", type=float, default=1e-8, help="relative residual ||Ax - theta x|| / |theta| (default: 1e-8)")
    eigs.add_argument("--max-iterations", type=_positive_int, default=500, help="restart cycles before giving up (default: 500)")
    eigs.add_argument("--strategy", default="joint", help="block, column, row or joint (default: joint)")
    eigs.add_argument("--mode", default=DEFAULT_MODE, help=f"executor mode or auto, as for spmm (default: {DEFAULT_MODE})")
    eigs.add_argument("--threads", "-T", type=_positive_int, help="threads per rank (default: cores / ranks on the node)")
    eigs.add_argument("--partition", choices=["even", "nnz"], default="even", help="row partition (default: even)")
    eigs.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    eigs.add_argument("--check", action="store_true", help="compare with SciPy's eigsh (ARPACK) on rank 0")
    eigs.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    eigs.set_defaults(handler=_run_eigs)

    from sparsewire.spgemm.commands import add_commands as add_spgemm_commands
    from sparsewire.sim.commands import add_commands as add_simulation_commands

    add_spgemm_commands(commands, MATRIX_HELP, _positive_int)
    add_simulation_commands(commands, MATRIX_HELP, _positive_int)
    return parser


def _add_topology_arguments(parser: argparse.ArgumentParser, allow_mpi: bool) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--group-size", "-G", type=_positive_int, help="groups of G consecutive ranks (same as --topology nodes:G)"
    )
    presets = "flat, nodes:G, cola-a800, shiro-h100, leafspine-16" + (", mpi (shared-memory nodes)" if allow_mpi else "")
    where.add_argument("--topology", help=f"cluster model: {presets}; adds per-link-class bytes and predicted time")
    parser.add_argument(
        "--proxy",
        choices=["local", "balanced"],
        default="local",
        help="hierarchical strategies: which rank of a group receives a remote rank's B rows: the same local rank "
        "(CoLa) or spread by bytes (default: local)",
    )


def _topology(args: argparse.Namespace, comm=None):
    from sparsewire.topology import Topology, parse_topology

    if args.group_size is not None:
        return Topology.nodes(args.group_size)
    if args.topology is None:
        return None
    if args.topology.strip().lower() == "mpi":
        if comm is None:
            raise InputError("--topology mpi needs MPI (it groups the ranks of each node); use it with spmm or give nodes:G")
        return Topology.from_mpi(comm)
    return parse_topology(args.topology)


def _run_analyze(args: argparse.Namespace) -> int:
    from sparsewire.io import load_matrix
    from sparsewire.partition import partition_matrix
    from sparsewire.plan.stats import strategy_stats
    from sparsewire.plan.strategies import parse_strategies

    topology = _topology(args)
    strategies = parse_strategies(args.strategies, hierarchical=topology is not None)
    if topology is not None:
        topology.groups(args.ranks)  # checks the rank count against an explicit grouping
    element_bytes = np.dtype(DTYPES[args.dtype]).itemsize
    matrix = load_matrix(args.matrix, symmetrize=args.symmetrize)
    row_partition, col_partition = partition_matrix(matrix, args.ranks, args.partition)
    entries = []
    for strategy in strategies:
        if not args.json:
            print(f"planning {strategy.value} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        stats = strategy_stats(
            matrix, row_partition, col_partition, strategy, args.k, element_bytes, topology, proxy=args.proxy
        )
        entry = stats.as_dict()
        entry["plan_seconds"] = round(time.perf_counter() - started, 6)
        entries.append(entry)
    report = {
        "matrix": {"path": args.matrix, "n_rows": int(matrix.shape[0]), "n_cols": int(matrix.shape[1]), "nnz": int(matrix.nnz)},
        "ranks": args.ranks,
        "k": args.k,
        "element_bytes": element_bytes,
        "partition": args.partition,
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
        print(json.dumps(report))
        return 0
    print(
        f"{args.matrix}: {matrix.shape[0]} x {matrix.shape[1]}, {matrix.nnz} nonzeros; "
        f"P = {args.ranks}, k = {args.k}, {args.dtype}, {args.partition} partition"
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
                [format_bytes(e["intra_group_bytes"]), format_bytes(e["inter_group_bytes"]), f"{e['predicted_seconds'] * 1e3:.4f}"]
                if topology is not None
                else []
            )
        )
    headers = ["strategy", "bytes/multiply", "", "vs block", "messages", "max send", "max recv", "setup", "plan s"]
    if topology is not None:
        headers += ["intra-group", "inter-group", "predicted ms"]
    print(format_table(headers, rows))
    return 0


def _run_spmm(args: argparse.Namespace) -> int:
    from sparsewire.plan.strategies import parse_strategies
    from sparsewire.exec.spmm import parse_modes

    hierarchical = args.group_size is not None or args.topology is not None
    strategies = parse_strategies(args.strategy, executable_only=True, hierarchical=hierarchical)
    modes = parse_modes(args.mode)
    if args.topology is not None and args.topology.strip().lower() != "mpi":
        _topology(args)  # reject an unknown preset before MPI starts

    MPI = _start_mpi(modes, args.threads)

    from sparsewire.comm.runtime import limit_threads_per_rank
    from sparsewire.exec.session import run_spmm_session

    comm = MPI.COMM_WORLD
    topology = _topology(args, comm)
    if topology is not None and topology.rank_groups is None:
        topology.groups(comm.Get_size())
    limit_threads_per_rank(comm)
    progress = None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))
    results = run_spmm_session(
        comm,
        args.matrix,
        strategies,
        modes,
        k=args.k,
        dtype=DTYPES[args.dtype],
        repeat=args.repeat,
        partition=args.partition,
        check=args.check,
        symmetrize=args.symmetrize,
        topology=topology,
        proxy=args.proxy,
        threads=args.threads,
        deterministic=args.deterministic,
        progress=progress,
    )
    if comm.Get_rank() != 0:
        return 0
    failed = any(not _bytes_match(r) or not r.get("check_passed", True) for r in results)
    if args.json:
        if len(results) == 1:
            print(json.dumps(results[0]))
        else:
            common = {key: results[0][key] for key in ("matrix", "n_rows", "n_cols", "nnz", "ranks", "threads", "k", "dtype")}
            print(json.dumps({**common, "runs": results}))
        return 1 if failed else 0
    first = results[0]
    print(
        f"{first['matrix']}: {first['n_rows']} x {first['n_cols']}, {first['nnz']} nonzeros; P = {first['ranks']}, "
        f"k = {first['k']}, {first['dtype']}, {first['threads']} thread(s) per rank, {args.repeat} timed multiplies"
        + (", deterministic" if args.deterministic else "")
    )
    baseline = next((r["median_seconds"] for r in results if r["strategy"] == "block"), None)
    rows = []
    for r in results:
        rows.append(
            [
                r["strategy"],
                r["mode"],
                format_bytes(r["planned_bytes"]),
                "yes" if _bytes_match(r) else f"NO ({r['measured_bytes']}, {r['delivery_problems']} bad messages)",
                r["messages"],
                f"{r['median_seconds'] * 1e3:.3f}",
                f"{r['min_seconds'] * 1e3:.3f}",
                f"{baseline / r['median_seconds']:.2f}x" if baseline else "-",
                f"{r['plan_seconds']:.3f}",
            ]
            + ([format_bytes(r["inter_group_bytes"]), f"{r['predicted_seconds'] * 1e3:.4f}"] if topology is not None else [])
            + ([f"{r['max_abs_error']:.2e}"] if args.check else [])
        )
    headers = ["strategy", "mode", "bytes/multiply", "MPI delivered=planned", "messages", "median ms", "min ms", "speedup vs block", "plan s"]
    headers += ["inter-group", "predicted ms"] if topology is not None else []
    if topology is not None:
        print(f"topology {topology.describe()}; proxy {args.proxy}")
    print(format_table(headers + (["max abs error"] if args.check else []), rows))
    for r in results:
        if "first_delivery_problem" in r:
            print(f"sparsewire: {r['strategy']}/{r['mode']}: {r['first_delivery_problem']}", file=sys.stderr)
    if failed:
        print("sparsewire: error: a run moved other bytes than planned or failed --check; see the table", file=sys.stderr)
        return 1
    return 0


def _start_mpi(modes: list[str], threads: int | None):
    """Import mpi4py's MPI at the thread level the modes need: MULTIPLE only for the partitioned
    mode with several threads (every thread calls MPI), FUNNELED otherwise."""
    import mpi4py

    several_threads = threads is None or threads > 1
    mpi4py.rc.thread_level = "multiple" if "partitioned" in modes and several_threads else "funneled"
    from mpi4py import MPI

    return MPI


def _run_eigs(args: argparse.Namespace) -> int:
    from sparsewire.exec.spmm import parse_modes
    from sparsewire.plan.strategies import parse_strategies

    strategies = parse_strategies(args.strategy, executable_only=True, hierarchical=False)
    modes = parse_modes(args.mode)
    if len(strategies) != 1 or len(modes) != 1:
        raise InputError("eigs runs one strategy and one mode; give one of each")
    if not args.tol > 0:
        raise InputError(f"--tol must be positive (got {args.tol})")
    MPI = _start_mpi(modes, args.threads)

    from sparsewire.comm.runtime import limit_threads_per_rank
    from sparsewire.exec.session import run_eigs_session

    comm = MPI.COMM_WORLD
    limit_threads_per_rank(comm)
    progress = None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))
    report = run_eigs_session(
        comm, args.matrix, args.nev, block=args.block, steps=args.steps, tol=args.tol,
        max_iterations=args.max_iterations, strategy=strategies[0], mode=modes[0], threads=args.threads,
        partition=args.partition, symmetrize=args.symmetrize, check=args.check, progress=progress,
    )
    if comm.Get_rank() != 0:
        return 0
    failed = not report["converged"] or report.get("max_relative_difference", 0.0) > 1e-6
    if args.json:
        print(json.dumps(report))
        return 1 if failed else 0
    print(
        f"{report['matrix']}: n = {report['n']}, {report['nnz']} nonzeros; P = {report['ranks']}, "
        f"{report['threads']} thread(s) per rank, {report['strategy']}/{report['mode']}, block {report['block']}"
    )
    rows = [[i + 1, f"{value:.12g}", f"{residual:.2e}"] + ([f"{report['reference_eigenvalues'][i]:.12g}"] if args.check else [])
            for i, (value, residual) in enumerate(zip(report["eigenvalues"], report["residuals"]))]
    print(format_table(["#", "eigenvalue", "residual"] + (["eigsh (ARPACK)"] if args.check else []), rows))
    print(
        f"{'converged' if report['converged'] else 'NOT converged'} after {report['iterations']} iterations, "
        f"{report['multiplies']} multiplies ({report['multiplies_per_second']:.1f} per second), "
        f"{format_bytes(report['bytes_per_iteration'])} per iteration, {report['seconds']:.3f} s"
        + (f"; largest relative difference to eigsh {report['max_relative_difference']:.2e}" if args.check else "")
    )
    if failed:
        print("sparsewire: error: eigs did not converge or differs from eigsh by more than 1e-6; see above", file=sys.stderr)
        return 1
    return 0


def _bytes_match(result: dict) -> bool:
    """Bytes MPI delivered equal the plan's, in total and per link class, and every message had
    the size its receiver's plan expects."""
    same = result["measured_bytes"] == result["planned_bytes"] and result["delivery_problems"] == 0
    if "inter_group_bytes" in result:
        same = same and result["measured_inter_group_bytes"] == result["inter_group_bytes"]
        same = same and result["measured_intra_group_bytes"] == result["intra_group_bytes"]
    return same


def _is_root() -> bool:
    """Rank 0 of the job, also before MPI is initialised (argument errors): then the launcher's
    rank variable tells (MPICH/Hydra: PMI_RANK, Open MPI: OMPI_COMM_WORLD_RANK)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank() == 0
    launcher_rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    return launcher_rank == "0"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sparsewire`` console script and ``python -m sparsewire``."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return args.handler(args)
    except SparsewireError as error:
        if _is_root():
            print(f"sparsewire: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception:
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
            # One rank failing would leave the others waiting forever in a collective (mpi4py.run does the same).
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
            mpi.COMM_WORLD.Abort(1)
        raise
