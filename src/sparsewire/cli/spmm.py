"""``sparsewire spmm`` and ``sparsewire eigs`` (under mpiexec): thin handlers over the public API
(:func:`sparsewire.distribute`, :meth:`DistributedMatrix.spmm_plan`, :class:`SpmmPlan`)."""

from __future__ import annotations

import argparse
import sys

from sparsewire._lib.text import format_bytes, format_table
from sparsewire.cli.common import (
    DEFAULT_MODE,
    DTYPES,
    MATRIX_HELP,
    add_backend_arguments,
    add_compress_argument,
    add_partition_arguments,
    add_topology_arguments,
    add_transport_argument,
    agree_on_arguments,
    json_text,
    number,
    options_from_args,
    parse_modes,
    positive_int,
    progress_printer,
    resolve_backend_arguments,
    start_mpi,
    topology_from_args,
)
from sparsewire.cli.profiling import (
    add_profiling_arguments,
    check_profiling_arguments,
    print_profiling,
    profiling_request,
    write_profiling_pictures,
)
from sparsewire.cli.spmm_runs import bytes_match, eigs_session, spmm_session
from sparsewire.errors import InputError

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``spmm`` and ``eigs`` to the CLI's subparsers."""
    spmm = commands.add_parser(
        "spmm",
        help="run distributed C = A @ B under mpiexec",
        description=(
            "Run C = A @ B on the ranks of mpiexec -n P with B[i, j] a hash of (i, j) in [-0.5, 0.5) (see docs/cli.md). Rank 0 "
            "loads "
            "the matrix and hands each rank its rows; the ranks plan collectively, then multiply --repeat times "
            "after one warm-up. Several strategies or modes (comma-separated, or 'all') print a comparison table."
        ),
    )
    spmm.add_argument("matrix", help=MATRIX_HELP)
    spmm.add_argument("--k", type=positive_int, default=32, help="columns of B (default: 32)")
    spmm.add_argument("--dtype", choices=sorted(DTYPES), default="float64", help="element type (default: float64)")
    spmm.add_argument(
        "--strategy",
        default="auto",
        help="auto (the least predicted time under the topology's cost model: communication, plus local work "
        "with a calibrate --network file; flat without one; predictions within 2%% of the least go to fewer steps, "
        "then fewer bytes; under a calibrate --network topology on P > 1 the plans predicted within 25%% of the least "
        "(and beside a hierarchical choice the least predicted flat plan) are timed on the job, and one faster than "
        "the model's choice in every one of 4 turns replaces it), block, "
        "column, row, joint, "
        "with a topology also column-hier, joint-hier, joint-group; a comma list (auto among them: its pick is timed "
        "in turns with the others, see --rounds), or all (default: auto)",
    )
    spmm.add_argument(
        "--no-trial",
        dest="trial",
        action="store_const",
        const=False,
        help="auto: keep the model's choice, without timing the near candidates on the job",
    )
    spmm.add_argument(
        "--mode",
        default=DEFAULT_MODE,
        help="bulk (exchange, then compute), overlap (diagonal block while messages fly; messages to another node in "
        "pieces, each combined as it arrives, where the plan relays nothing), pipelined (CoLa Alg. 3: one stage per "
        "remote group, double buffers), early (each message multiplied as it arrives), partitioned (MPI-4 partitioned "
        "messages, one partition per thread), a comma list, all, or auto: early for k <= 16 when ranks x threads fit "
        f"the cores, else overlap (chosen by bench/kernels/async_modes.py; default: {DEFAULT_MODE})",
    )
    add_transport_argument(spmm)
    add_backend_arguments(spmm)
    spmm.add_argument(
        "--transfer-calibration",
        help="file of 'sparsewire calibrate --device': messages below its threshold are staged "
        "through host memory (default: the stored calibration of the device's type when there is one, else none is)",
    )
    spmm.add_argument(
        "--threads",
        "-T",
        type=positive_int,
        help="threads per rank for the local kernels and partitions per message (default: cores / ranks on the node)",
    )
    spmm.add_argument(
        "--deterministic",
        action="store_true",
        help="fixed summation order: C bitwise identical across runs, modes and threads (and across P for block, "
        "column, column-hier); C is computed after all messages arrive",
    )
    add_compress_argument(spmm)
    spmm.add_argument("--repeat", type=positive_int, default=10, help="timed multiplies per run (default: 10)")
    spmm.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="with several strategies or modes: make every plan first, then let the runs take turns ROUNDS times, "
        "--repeat timed multiplies each turn, so a machine whose speed drifts slows every run alike (medians over "
        "ROUNDS x REPEAT multiplies; every plan is held at once; default: 1, each run whole before the next)",
    )
    add_partition_arguments(spmm, default="auto")
    spmm.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    add_topology_arguments(spmm, allow_mpi=True)
    spmm.add_argument(
        "--local-rate",
        choices=("matrix", "topology"),
        default="matrix",
        help="with a --topology file of 'calibrate --network' (which holds the CSR kernel's rate on R-MAT): matrix "
        "times the kernel on this matrix's own rows (every rank at once, 0.6 s) and prices local work at that rate "
        "in predicted times and --strategy auto; topology keeps the file's rate (default: matrix)",
    )
    spmm.add_argument("--check", action="store_true", help="gather C on rank 0 and compare with SciPy (max_abs_error)")
    spmm.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    add_profiling_arguments(spmm, "run", "each run", "DIR/trace-STRATEGY-MODE.json")
    spmm.set_defaults(handler=run_spmm)

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
    eigs.add_argument("--nev", type=positive_int, default=4, help="eigenpairs wanted (default: 4)")
    eigs.add_argument("--block", type=positive_int, help="block width b >= nev (default: nev + 4)")
    eigs.add_argument("--steps", type=positive_int, default=8, help="blocks per Krylov basis before a restart (default: 8)")
    eigs.add_argument(
        "--tol", type=number(0.0, above=True), default=1e-8, help="relative residual ||Ax - theta x|| / |theta| (default: 1e-8)"
    )
    eigs.add_argument("--max-iterations", type=positive_int, default=500, help="restart cycles before giving up (default: 500)")
    eigs.add_argument("--strategy", default="auto", help="auto, block, column, row or joint (default: auto)")
    eigs.add_argument("--mode", default=DEFAULT_MODE, help=f"executor mode or auto, as for spmm (default: {DEFAULT_MODE})")
    add_transport_argument(eigs)
    add_compress_argument(eigs)
    eigs.add_argument("--threads", "-T", type=positive_int, help="threads per rank (default: cores / ranks on the node)")
    add_partition_arguments(eigs)
    eigs.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    eigs.add_argument("--check", action="store_true", help="compare with SciPy's eigsh (ARPACK) on rank 0")
    eigs.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    add_profiling_arguments(eigs, "solve", "the solve", "DIR/trace-eigs-STRATEGY-MODE.json")
    eigs.set_defaults(handler=run_eigs)


def run_spmm(args: argparse.Namespace) -> int:
    from sparsewire.plan.strategies import parse_strategies

    hierarchical = args.group_size is not None or args.topology is not None
    requested = [name.strip().lower() for name in args.strategy.split(",")]
    named = ",".join(name for name in requested if name != "auto")  # auto beside named ones: its pick, timed with them
    strategies = (["auto"] if "auto" in requested else []) + (
        [s.value for s in parse_strategies(named, executable_only=True, hierarchical=hierarchical)]
        if named or "auto" not in requested  # nothing but blanks: parse_strategies says none was given
        else []
    )
    modes = parse_modes(args.mode)
    resolve_backend_arguments(args, "numpy")

    def problem_of(mode: str | None) -> str | None:  # None or auto: the device alone (auto picks a mode that runs)
        try:
            options_from_args(args, mode=mode)
        except InputError as error:
            return str(error)
        return None

    if args.mode.strip().lower() == "all":  # every mode the transport and backend run on the device
        modes = [mode for mode in modes if not problem_of(mode)]
    problem = problem_of(None) or next(filter(None, map(problem_of, modes)), None)
    if problem:
        raise InputError(problem)
    if args.topology is not None and args.topology.strip().lower() != "mpi":
        topology_from_args(args)  # reject an unknown preset before MPI starts

    check_profiling_arguments(args)
    start_mpi(modes, args.threads)

    from sparsewire.comm.runtime import limit_threads_per_rank, world

    comm = world()
    agree_on_arguments(comm, args)
    resolve_backend_arguments(args, "numpy", comm)
    topology = topology_from_args(args, comm)
    if topology is not None and topology.rank_groups is None:
        topology.groups(comm.Get_size())
    limit_threads_per_rank(comm)
    options = options_from_args(args, topology)
    results = spmm_session(
        comm,
        args.matrix,
        strategies,
        modes,
        options,
        k=args.k,
        dtype=DTYPES[args.dtype],
        repeat=args.repeat,
        rounds=args.rounds,
        local_rate=args.local_rate,
        partition=args.partition,
        imbalance=args.imbalance,
        check=args.check,
        symmetrize=args.symmetrize,
        progress=progress_printer(args),
        trace=profiling_request(args, comm),
    )
    if comm.Get_rank() != 0:
        return 0
    failed = any(not bytes_match(r) or not r.get("check_passed", True) for r in results)
    first = results[0]
    title = f"{args.matrix}: {first['strategy']}/{first['mode']}, P = {first['ranks']}, k = {first['k']}"
    write_profiling_pictures(args, first, title, topology)
    if args.json:
        if len(results) == 1:
            print(json_text(results[0]))
        else:
            common = {
                key: results[0][key]
                for key in (
                    "matrix",
                    "n_rows",
                    "n_cols",
                    "nnz",
                    "ranks",
                    "threads",
                    "k",
                    "dtype",
                    "transport",
                    "backend",
                    "device",
                )
            }
            print(json_text({**common, "runs": results}))
        return 1 if failed else 0
    first = results[0]
    print(
        f"{first['matrix']}: {first['n_rows']} x {first['n_cols']}, {first['nnz']} nonzeros; P = {first['ranks']}, "
        f"k = {first['k']}, {first['dtype']}, {first['threads']} thread(s) per rank, {first['timed_multiplies']} timed multiplies"
        + (f" in {args.rounds} rounds" if args.rounds > 1 else "")
        + (", deterministic" if args.deterministic else "")
        + f"; {args.transport} transport, bytes counted from {first['bytes_counted_by']}; {args.backend} backend on {args.device}"
    )
    baseline = next((r["median_seconds"] for r in results if r["strategy"] == "block"), None)
    rows = []
    for r in results:
        rows.append(
            [
                r["strategy"],
                r["mode"],
                format_bytes(r["planned_bytes"]),
                _bytes_verdict(r),
                r["messages"],
                f"{r['median_seconds'] * 1e3:.3f}",
                f"{r['min_seconds'] * 1e3:.3f}",
                f"{baseline / r['median_seconds']:.2f}x" if baseline else "-",
                f"{r['plan_seconds']:.3f}",
            ]
            + ([format_bytes(r["inter_group_bytes"]), f"{r['predicted_seconds'] * 1e3:.4f}"] if topology is not None else [])
            + ([format_bytes(r["wire_bytes"])] if args.compress != "none" else [])
            + ([f"{r['max_abs_error']:.2e}"] if args.check else [])
        )
    headers = [
        "strategy",
        "mode",
        "bytes/multiply",
        "delivered=planned",
        "messages",
        "median ms",
        "min ms",
        "speedup vs block",
        "plan s",
    ]
    headers += ["inter-group", f"predicted ms ({topology.prices()})"] if topology is not None else []
    headers += [f"wire ({args.compress})"] if args.compress != "none" else []
    if topology is not None:
        print(f"topology {topology.describe()}; proxy {args.proxy}")
    print(format_table(headers + (["max abs error"] if args.check else []), rows))
    if topology is not None and topology.assumed_links:
        print(ASSUMED_LINKS_NOTE)
    for r in results:
        print_profiling(r, f"{r['strategy']}/{r['mode']}")
        if "first_delivery_problem" in r:
            print(f"sparsewire: {r['strategy']}/{r['mode']}: {r['first_delivery_problem']}", file=sys.stderr)
    if failed:
        print("sparsewire: error: a run moved other bytes than planned or failed --check; see the table", file=sys.stderr)
        return 1
    return 0


#: Under a table whose predictions price the assumed link constants, not the machine the job ran on.
ASSUMED_LINKS_NOTE = (
    "predicted ms prices the assumed links above (a cluster, not this machine); to predict for this machine, "
    "measure it once with 'mpiexec -n P sparsewire calibrate --network --output links.json' and pass --topology links.json"
)


def run_eigs(args: argparse.Namespace) -> int:
    from sparsewire.plan.strategies import parse_strategies

    strategies = (
        ["auto"]
        if args.strategy.strip().lower() == "auto"
        else [s.value for s in parse_strategies(args.strategy, executable_only=True, hierarchical=False)]
    )
    modes = parse_modes(args.mode)
    if len(strategies) != 1 or len(modes) != 1:
        raise InputError("eigs runs one strategy and one mode; give one of each")
    if not args.tol > 0:
        raise InputError(f"--tol must be positive (got {args.tol})")
    check_profiling_arguments(args)
    start_mpi(modes, args.threads)

    from sparsewire.comm.runtime import limit_threads_per_rank, world

    comm = world()
    agree_on_arguments(comm, args)
    limit_threads_per_rank(comm)
    report = eigs_session(
        comm,
        args.matrix,
        args.nev,
        options_from_args(args, strategy=strategies[0], mode=modes[0]),
        block=args.block,
        steps=args.steps,
        tol=args.tol,
        max_iterations=args.max_iterations,
        partition=args.partition,
        imbalance=args.imbalance,
        symmetrize=args.symmetrize,
        check=args.check,
        progress=progress_printer(args),
        trace=profiling_request(args, comm),
    )
    if comm.Get_rank() != 0:
        return 0
    failed = not report["converged"] or not report.get("check_passed", True) or bool(report["traffic_differences"])
    title = f"{args.matrix}: eigs {report['strategy']}/{report['mode']}, P = {report['ranks']}, k = {report['k']}"
    write_profiling_pictures(args, report, title)
    if args.json:
        print(json_text(report))
        return 1 if failed else 0
    print(
        f"{report['matrix']}: n = {report['n']}, {report['nnz']} nonzeros; P = {report['ranks']}, "
        f"{report['threads']} thread(s) per rank, {report['strategy']}/{report['mode']}, block {report['block']}"
    )
    rows = [
        [i + 1, f"{value:.12g}", f"{residual:.2e}"] + ([f"{report['reference_eigenvalues'][i]:.12g}"] if args.check else [])
        for i, (value, residual) in enumerate(zip(report["eigenvalues"], report["residuals"]))
    ]
    print(format_table(["#", "eigenvalue", "residual"] + (["eigsh (ARPACK)"] if args.check else []), rows))
    print(
        f"{'converged' if report['converged'] else 'NOT converged'} after {report['iterations']} iterations, "
        f"{report['multiplies']} multiplies ({report['multiplies_per_second']:.1f} per second), "
        f"{format_bytes(report['bytes_per_iteration'])} per iteration, {report['seconds']:.3f} s"
        + (
            f"; largest difference to eigsh {report['max_difference']:.2e} ({'within' if report['check_passed'] else 'OUTSIDE'} "
            "the tolerance of sparsewire._lib.tolerance.eigenvalues_allowed)"
            if args.check
            else ""
        )
    )
    print_profiling(report, f"eigs {report['strategy']}/{report['mode']}")
    if failed:
        print(
            "sparsewire: error: eigs did not converge, differs from eigsh by more than the tolerance, or moved other "
            "bytes than planned; see above",
            file=sys.stderr,
        )
        return 1
    return 0


def _bytes_verdict(result: dict) -> str:
    """The table's delivered=planned cell: yes / NO (measured) on MPI; on torch, whose counts are
    the receivers' own tensor sizes, that they were agreed with the senders at setup."""
    if not bytes_match(result):
        return f"NO ({result['measured_bytes']}, {result['delivery_problems']} bad messages)"
    return "yes" if result["bytes_measured"] else "agreed at setup"
