"""``sparsewire spmm`` and ``sparsewire eigs`` (under mpiexec): thin handlers over the public API
(:func:`sparsewire.distribute`, :meth:`DistributedMatrix.spmm_plan`, :class:`SpmmPlan`)."""

from __future__ import annotations

import argparse
import sys

from sparsewire.cli.common import (
    DEFAULT_MODE, DTYPES, MATRIX_HELP, add_backend_arguments, resolve_backend_arguments, agree_on_arguments, TRANSPORT_HELP, TRANSPORTS, add_partition_arguments, add_topology_arguments, json_text, parse_modes,
    positive_int, progress_printer, start_mpi, topology_from_args,
)
from sparsewire.errors import InputError
from sparsewire.report import format_bytes, format_table

__all__ = ["add_commands"]


def add_commands(commands) -> None:
    """Add ``spmm`` and ``eigs`` to the CLI's subparsers."""
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
    spmm.add_argument("--k", type=positive_int, default=32, help="columns of B (default: 32)")
    spmm.add_argument("--dtype", choices=sorted(DTYPES), default="float64", help="element type (default: float64)")
    spmm.add_argument(
        "--strategy",
        default="auto",
        help="auto (the least predicted communication time under the topology's cost model, flat without one; "
        "ties go to fewer bytes), block, column, row, joint, with a topology also column-hier, joint-hier, "
        "joint-group; a comma list, or all (default: auto)",
    )
    spmm.add_argument(
        "--mode",
        default=DEFAULT_MODE,
        help="bulk (exchange, then compute), overlap (diagonal block while messages fly), pipelined (CoLa Alg. 3: "
        "one stage per remote group, double buffers), early (each message multiplied as it arrives), partitioned "
        "(MPI-4 partitioned messages, one partition per thread), a comma list, all, or auto: early for k <= 16 when "
        f"ranks x threads fit the cores, else overlap (chosen by bench/async_modes.py; default: {DEFAULT_MODE})",
    )
    spmm.add_argument("--transport", choices=TRANSPORTS, default="mpi", help=TRANSPORT_HELP)
    add_backend_arguments(spmm)
    spmm.add_argument("--transfer-calibration", help="file of 'sparsewire calibrate --device': messages below its threshold are staged "
                      "through host memory (default: the stored calibration of the device's type when there is one, else none is)")
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
    spmm.add_argument("--repeat", type=positive_int, default=10, help="timed multiplies per run (default: 10)")
    add_partition_arguments(spmm)
    spmm.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    add_topology_arguments(spmm, allow_mpi=True)
    spmm.add_argument("--check", action="store_true", help="gather C on rank 0 and compare with SciPy (max_abs_error)")
    spmm.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
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
    eigs.add_argument("--tol", type=float, default=1e-8, help="relative residual ||Ax - theta x|| / |theta| (default: 1e-8)")
    eigs.add_argument("--max-iterations", type=positive_int, default=500, help="restart cycles before giving up (default: 500)")
    eigs.add_argument("--strategy", default="auto", help="auto, block, column, row or joint (default: auto)")
    eigs.add_argument("--mode", default=DEFAULT_MODE, help=f"executor mode or auto, as for spmm (default: {DEFAULT_MODE})")
    eigs.add_argument("--transport", choices=TRANSPORTS, default="mpi", help=TRANSPORT_HELP)
    eigs.add_argument("--threads", "-T", type=positive_int, help="threads per rank (default: cores / ranks on the node)")
    add_partition_arguments(eigs)
    eigs.add_argument("--symmetrize", action="store_true", help="edge lists only: use the undirected graph max(A, A^T)")
    eigs.add_argument("--check", action="store_true", help="compare with SciPy's eigsh (ARPACK) on rank 0")
    eigs.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    eigs.set_defaults(handler=run_eigs)



def run_spmm(args: argparse.Namespace) -> int:
    from sparsewire.plan.strategies import parse_strategies

    hierarchical = args.group_size is not None or args.topology is not None
    strategies = ["auto"] if args.strategy.strip().lower() == "auto" else [
        s.value for s in parse_strategies(args.strategy, executable_only=True, hierarchical=hierarchical)
    ]
    modes = parse_modes(args.mode)
    resolve_backend_arguments(args, "numpy")
    from sparsewire.exec.backends import backend_problem
    from sparsewire.exec.spmm import transport_problem

    def problem_of(mode: str | None) -> str | None:  # None or auto: the device alone (auto picks a mode that runs)
        mode = None if mode == "auto" else mode
        return (mode and transport_problem(args.transport, mode, args.device)) or backend_problem(args.backend, args.device, mode)

    if args.mode.strip().lower() == "all":  # every mode the transport and backend run on the device
        modes = [mode for mode in modes if not problem_of(mode)]
    problem = problem_of(None) or next(filter(None, map(problem_of, modes)), None)
    if problem:
        raise InputError(problem)
    if args.topology is not None and args.topology.strip().lower() != "mpi":
        topology_from_args(args)  # reject an unknown preset before MPI starts

    MPI = start_mpi(modes, args.threads)

    from sparsewire.comm.runtime import limit_threads_per_rank

    comm = MPI.COMM_WORLD
    agree_on_arguments(comm, args)
    resolve_backend_arguments(args, "numpy", comm)
    topology = topology_from_args(args, comm)
    if topology is not None and topology.rank_groups is None:
        topology.groups(comm.Get_size())
    limit_threads_per_rank(comm)
    results = _spmm_session(
        comm,
        args.matrix,
        strategies,
        modes,
        k=args.k,
        dtype=DTYPES[args.dtype],
        repeat=args.repeat,
        partition=args.partition,
        imbalance=args.imbalance,
        check=args.check,
        symmetrize=args.symmetrize,
        topology=topology,
        proxy=args.proxy,
        threads=args.threads,
        deterministic=args.deterministic,
        transport=args.transport,
        backend=args.backend,
        device=args.device,
        transfer_calibration=args.transfer_calibration,
        progress=progress_printer(args),
    )
    if comm.Get_rank() != 0:
        return 0
    failed = any(not _bytes_match(r) or not r.get("check_passed", True) for r in results)
    if args.json:
        if len(results) == 1:
            print(json_text(results[0]))
        else:
            common = {key: results[0][key] for key in ("matrix", "n_rows", "n_cols", "nnz", "ranks", "threads", "k", "dtype", "transport", "backend",
                                                       "device")}
            print(json_text({**common, "runs": results}))
        return 1 if failed else 0
    first = results[0]
    print(
        f"{first['matrix']}: {first['n_rows']} x {first['n_cols']}, {first['nnz']} nonzeros; P = {first['ranks']}, "
        f"k = {first['k']}, {first['dtype']}, {first['threads']} thread(s) per rank, {args.repeat} timed multiplies"
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
            + ([f"{r['max_abs_error']:.2e}"] if args.check else [])
        )
    headers = ["strategy", "mode", "bytes/multiply", "delivered=planned", "messages", "median ms", "min ms", "speedup vs block", "plan s"]
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


def run_eigs(args: argparse.Namespace) -> int:
    from sparsewire.plan.strategies import parse_strategies

    strategies = ["auto"] if args.strategy.strip().lower() == "auto" else [
        s.value for s in parse_strategies(args.strategy, executable_only=True, hierarchical=False)
    ]
    modes = parse_modes(args.mode)
    if len(strategies) != 1 or len(modes) != 1:
        raise InputError("eigs runs one strategy and one mode; give one of each")
    if not args.tol > 0:
        raise InputError(f"--tol must be positive (got {args.tol})")
    MPI = start_mpi(modes, args.threads)

    from sparsewire.comm.runtime import limit_threads_per_rank

    comm = MPI.COMM_WORLD
    agree_on_arguments(comm, args)
    limit_threads_per_rank(comm)
    report = _eigs_session(
        comm, args.matrix, args.nev, block=args.block, steps=args.steps, tol=args.tol,
        max_iterations=args.max_iterations, strategy=strategies[0], mode=modes[0], threads=args.threads,
        partition=args.partition, imbalance=args.imbalance, symmetrize=args.symmetrize, check=args.check,
        transport=args.transport, progress=progress_printer(args),
    )
    if comm.Get_rank() != 0:
        return 0
    failed = not report["converged"] or not report.get("check_passed", True)
    if args.json:
        print(json_text(report))
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
        + (f"; largest difference to eigsh {report['max_difference']:.2e} ({'within' if report['check_passed'] else 'OUTSIDE'} "
           "the tolerance of sparsewire.tolerance.eigenvalues_allowed)" if args.check else "")
    )
    if failed:
        print("sparsewire: error: eigs did not converge or differs from eigsh by more than the tolerance; see above", file=sys.stderr)
        return 1
    return 0


def _bytes_verdict(result: dict) -> str:
    """The table's delivered=planned cell: yes / NO (measured) on MPI; on torch, whose counts are
    the receivers' own tensor sizes, that they were agreed with the senders at setup."""
    if not _bytes_match(result):
        return f"NO ({result['measured_bytes']}, {result['delivery_problems']} bad messages)"
    return "yes" if result["bytes_measured"] else "agreed at setup"


def _bytes_match(result: dict) -> bool:
    """Bytes MPI delivered equal the plan's, in total and per link class, and every message had
    the size its receiver's plan expects. On a transport without receive statuses (torch) only the
    received tensor sizes can be compared; their agreement with the senders was checked at setup."""
    if not result["bytes_measured"]:
        return result["received_tensor_bytes"] == result["planned_bytes"] and result["delivery_problems"] == 0
    same = result["measured_bytes"] == result["planned_bytes"] and result["delivery_problems"] == 0
    if "inter_group_bytes" in result:
        same = same and result["measured_inter_group_bytes"] == result["inter_group_bytes"]
        same = same and result["measured_intra_group_bytes"] == result["intra_group_bytes"]
    return same


def _load(comm, spec: str, partition: str, symmetrize: bool, topology=None, imbalance: float = 0.03):
    """Collective. ``sparsewire.distribute`` of the matrix and its count of NaN/infinite values."""
    import numpy as np
    from mpi4py import MPI

    import sparsewire

    matrix = sparsewire.distribute(comm, spec, partition, symmetrize=symmetrize, topology=topology, imbalance=imbalance)
    bad = comm.allreduce(int(np.count_nonzero(~np.isfinite(matrix.local_rows.data))), op=MPI.SUM)
    return matrix, bad


def _no_wait() -> None:
    """Nothing to wait for after a multiply on the CPU."""


def _spmm_session(comm, spec, strategies, modes, *, k, dtype, repeat, partition, imbalance, check, symmetrize, topology, proxy,
                  threads, deterministic, progress, transport="mpi", backend="numpy", device="cpu", transfer_calibration=None) -> list[dict] | None:
    """Collective. Every (strategy, mode) on the matrix ``spec``: one result dict per run on rank 0
    (None on other ranks). B is :func:`~sparsewire.generators.deterministic_dense`.

    Each run: plan (timed, the slowest rank), one untimed warm-up multiply, then ``repeat`` timed
    multiplies, each between barriers and timed as the slowest rank's time. Measured bytes are
    what MPI delivered (receive statuses), summed over the ranks; with a topology, per link class
    (each counted from the senders' groups) and the predicted communication time. On the torch
    transport, which has no receive status, ``measured_bytes`` is None and
    ``received_tensor_bytes`` sums the sizes of the tensors received into.
    ``delivery_problems`` counts messages whose size differed from the receiver's plan.
    """
    import statistics

    import numpy as np
    from mpi4py import MPI

    from sparsewire.generators import deterministic_dense, deterministic_dense_rows
    from sparsewire.tolerance import allowed_error, within

    rank = comm.Get_rank()
    dtype = np.dtype(dtype)
    matrix, bad = _load(comm, spec, partition, symmetrize, topology, imbalance)
    if bad and check:
        raise InputError(f"{spec}: {bad} stored values are NaN or infinite, so --check cannot compare results; clean the matrix or run without --check")
    if bad and rank == 0:
        print(f"sparsewire: warning: {spec}: {bad} stored values are NaN or infinite; C will hold NaN", file=sys.stderr)
    b_local = deterministic_dense_rows(matrix.input_ids(), k, dtype)  # original indices: any partitioner
    whole = matrix.gather() if check else None
    reference = allowed = None
    if check and rank == 0:
        b_reference = deterministic_dense(0, matrix.shape[1], k, np.float64)
        reference = whole @ b_reference
        allowed = allowed_error(abs(whole) @ np.abs(b_reference), np.diff(whole.indptr)[:, None], dtype)
    groups = topology.groups(comm.Get_size()) if topology is not None else None
    results = []
    for strategy in strategies:
        for mode in modes:
            if progress and rank == 0:
                progress(f"planning and running {strategy}/{mode}")
            comm.Barrier()
            started = MPI.Wtime()
            plan = matrix.spmm_plan(k, dtype, strategy, topology, mode, threads, deterministic, proxy=proxy, transport=transport,
                                    backend=backend, device=device, transfer_calibration=transfer_calibration)
            plan_seconds = comm.allreduce(MPI.Wtime() - started, op=MPI.MAX)
            with plan:
                result = np.empty((plan.output_rows, k), dtype)
                out, b_in, finish = result, b_local, _no_wait
                if backend == "torch":
                    import torch

                    out = torch.from_numpy(result).to(device)  # on the CPU the same memory
                    b_in = torch.from_numpy(b_local).to(device)  # uploaded once, outside the timing
                    if out.device.type == "cuda":
                        finish = torch.cuda.synchronize  # the kernels are asynchronous: time them done
                plan.multiply(b_in, out=out)  # warm-up: first-touch of buffers, MPI connections
                times = []
                for _ in range(repeat):
                    comm.Barrier()
                    started = MPI.Wtime()
                    plan.multiply(b_in, out=out)
                    finish()
                    times.append(comm.allreduce(MPI.Wtime() - started, op=MPI.MAX))
                if backend == "torch" and out.device.type != "cpu":
                    result = out.cpu().numpy()
                received = plan.bytes_received_from
                measured = comm.allreduce(int(received.sum()), op=MPI.SUM)
                if groups is not None:
                    same = groups == groups[rank]
                    measured_intra = comm.allreduce(int(received[same].sum()), op=MPI.SUM)
                    measured_inter = comm.allreduce(int(received[~same].sum()), op=MPI.SUM)
                problems = [p for ps in comm.allgather(plan.delivery_problems) for p in ps]
                stats, chosen, used_threads, layout = plan.stats, plan.rank_plan.strategy.value, plan.threads, plan.rank_plan.layout
                used_mode = plan.mode  # "auto" is decided by the plan
                counted_by, measured_independently = plan.counted_by, plan.bytes_measured
                reason = plan.choice.reason()
                staged_below = plan.executor.transfer_rule.staged_below_bytes if plan.executor.stages_messages else None
                transfer_paths = plan.transfer_summary
            checksum_sum = comm.allreduce(float(result.sum(dtype=np.float64)), op=MPI.SUM)
            checksum_squares = comm.allreduce(float(np.square(result, dtype=np.float64).sum()), op=MPI.SUM)
            gathered = matrix.gather_dense(result) if check else None
            if rank != 0:
                continue
            row = {
                "matrix": spec, "n_rows": matrix.shape[0], "n_cols": matrix.shape[1], "nnz": matrix.nnz,
                "ranks": comm.Get_size(), "strategy": chosen, "strategy_requested": strategy, "strategy_reason": reason,
                "mode": used_mode, "threads": used_threads, "deterministic": deterministic, "k": k, "dtype": dtype.name,
                "median_seconds": statistics.median(times) if times else None,
                "min_seconds": min(times) if times else None,
                "plan_seconds": plan_seconds,
                "planned_bytes": stats.total_bytes,
                "transport": transport,
                "backend": backend,
                "device": device,
                "staged_below_bytes": staged_below,
                "transfer_paths": transfer_paths,
                "bytes_counted_by": counted_by,
                "bytes_measured": measured_independently,
                "measured_bytes": int(measured) if measured_independently else None,
                "delivery_problems": len(problems),
                "messages": stats.messages,
                "setup_bytes": int(stats.setup_bytes),
                "layout": layout,
                "checksum_sum": checksum_sum,
                "checksum_fro": float(np.sqrt(checksum_squares)),
            }
            if not measured_independently:
                row["received_tensor_bytes"] = int(measured)
            if topology is not None:
                classes = stats.class_totals()
                row.update(topology=topology.name, proxy=proxy, intra_group_bytes=classes["intra_group_bytes"],
                           inter_group_bytes=classes["inter_group_bytes"],
                           measured_intra_group_bytes=int(measured_intra) if measured_independently else None,
                           measured_inter_group_bytes=int(measured_inter) if measured_independently else None, predicted_seconds=stats.as_dict()["predicted_seconds"])
            if problems:
                row["first_delivery_problem"] = problems[0]
            if check:
                full = gathered.astype(np.float64)
                row["max_abs_error"] = float(np.abs(full - reference).max(initial=0.0))
                row["check_passed"] = bool(within(full, reference, allowed).all())
            results.append(row)
    return results if rank == 0 else None


def _eigs_session(comm, spec, nev, *, block, steps, tol, max_iterations, strategy, mode, threads, partition, imbalance, symmetrize,
                  check, progress, transport="mpi") -> dict | None:
    """Collective. The ``nev`` largest-magnitude eigenvalues of the symmetric matrix ``spec`` by
    :func:`~sparsewire.exec.eigensolver.block_krylov_eigs` on one plan; a result dict on rank 0
    (None elsewhere). ``check`` adds SciPy's ``eigsh`` (ARPACK) on rank 0 and the largest relative
    difference."""
    import numpy as np
    import scipy.sparse as sp
    from mpi4py import MPI

    from sparsewire.comm.runtime import agree_on_error
    from sparsewire.exec.eigensolver import block_krylov_eigs
    from sparsewire.tolerance import eigenvalues_allowed, within

    rank = comm.Get_rank()
    block = block or nev + 4
    matrix, bad = _load(comm, spec, partition, symmetrize, imbalance=imbalance)
    whole = matrix.gather()
    problem = None
    if rank == 0:
        if matrix.shape[0] != matrix.shape[1]:
            problem = f"{spec} is {matrix.shape[0]} x {matrix.shape[1]}; eigs needs a square symmetric matrix"
        elif matrix.shape[0] < 2:
            problem = f"{spec} is {matrix.shape[0]} x {matrix.shape[1]}; eigs needs a matrix of order at least 2"
        elif bad:
            problem = f"{spec}: stored values are NaN or infinite; clean the matrix first"
        elif (whole != whole.T).nnz:
            problem = f"{spec} is not symmetric; eigs computes eigenpairs of symmetric matrices (use --symmetrize for edge lists)"
        elif not 1 <= nev < matrix.shape[0]:
            problem = f"--nev {nev} must be between 1 and n - 1 = {matrix.shape[0] - 1}"
        elif block < nev:
            problem = f"--block {block} must be at least --nev {nev}"
    agree_on_error(comm, problem)
    with matrix.spmm_plan(block, np.float64, strategy, None, mode, threads, transport=transport) as plan:
        result = block_krylov_eigs(
            plan.executor, matrix.row_offset, matrix.shape[0], nev, steps=steps, tol=tol, max_iterations=max_iterations,
            progress=progress,
        )
        bytes_per_multiply = comm.allreduce(plan.bytes_received, op=MPI.SUM)
        used_threads, chosen, mode = plan.threads, plan.rank_plan.strategy.value, plan.mode
    seconds = comm.allreduce(result.seconds, op=MPI.MAX)
    multiply_seconds = comm.allreduce(result.multiply_seconds, op=MPI.MAX)
    if rank != 0:
        return None
    report = {
        "matrix": spec, "n": matrix.shape[0], "nnz": matrix.nnz, "ranks": comm.Get_size(), "threads": used_threads,
        "strategy": chosen, "mode": mode, "transport": transport, "nev": nev, "block": block,
        "eigenvalues": result.eigenvalues.tolist(), "residuals": result.residuals.tolist(), "converged": result.converged,
        "iterations": result.iterations, "multiplies": result.multiplies, "seconds": seconds,
        "multiply_seconds": multiply_seconds,
        "multiplies_per_second": result.multiplies / multiply_seconds if multiply_seconds > 0 else None,
        "bytes_per_multiply": int(bytes_per_multiply),
        "bytes_per_iteration": int(bytes_per_multiply) * result.multiplies / max(result.iterations, 1),
    }
    if check:
        from scipy.sparse.linalg import eigsh

        reference = eigsh(sp.csr_array(whole, dtype=np.float64), k=nev, which="LM", return_eigenvectors=False, tol=1e-12)
        reference = reference[np.argsort(-np.abs(reference), kind="stable")]
        report["reference_eigenvalues"] = reference.tolist()
        report["max_difference"] = float(np.max(np.abs(result.eigenvalues - reference)))
        report["check_passed"] = bool(within(result.eigenvalues, reference, eigenvalues_allowed(reference, matrix.shape[0])).all())
    return report
