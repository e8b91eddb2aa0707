"""Distributed SpMM sessions: load on rank 0, partition, hand out rows, plan, run, check.

These are the ``load -> partition -> plan -> execute -> report`` pipelines of ``sparsewire spmm``
and ``sparsewire eigs``, as collective functions that return results (on rank 0) for the CLI to
print.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, ranks_on_node
from sparsewire.exec.spmm import SpmmExecutor, layout_for_mode
from sparsewire.generators import deterministic_dense
from sparsewire.io import load_matrix, nonfinite_entries
from sparsewire.partition import RowPartition, partition_matrix
from sparsewire.plan.plan import build_rank_plan_collective
from sparsewire.plan.stats import plan_stats, rank_send_summary
from sparsewire.plan.strategies import Strategy
from sparsewire.topology import Topology

__all__ = ["DistributedMatrix", "distribute_matrix", "run_spmm_session", "run_eigs_session", "check_tolerance"]


@dataclass(frozen=True)
class DistributedMatrix:
    """One rank's rows of A (global column indices) and the partitions they came from."""

    local_rows: sp.csr_array
    row_partition: RowPartition
    col_partition: RowPartition
    shape: tuple[int, int]
    nnz: int


def distribute_matrix(comm: MPI.Comm, matrix: sp.csr_array | None, partition: str) -> DistributedMatrix:
    """Collective. Rank 0 holds ``matrix`` (others pass None); every rank gets its rows."""
    size = comm.Get_size()
    if comm.Get_rank() == 0:
        row_partition, col_partition = partition_matrix(matrix, size, partition)
        pieces = [matrix[slice(*row_partition.range(p))] for p in range(size)]
        header = (row_partition.offsets, col_partition.offsets, matrix.shape, matrix.nnz)
    else:
        pieces, header = None, None
    row_offsets, col_offsets, shape, nnz = comm.bcast(header, root=0)
    local_rows = comm.scatter(pieces, root=0)
    return DistributedMatrix(sp.csr_array(local_rows), RowPartition(row_offsets), RowPartition(col_offsets), shape, nnz)


def _auto_mode(comm: MPI.Comm, k: int, threads: int | None) -> str:
    """Collective. :func:`~sparsewire.exec.spmm.choose_mode` for this node's ranks."""
    from sparsewire.exec.kernels import default_threads
    from sparsewire.exec.spmm import choose_mode

    sharing = ranks_on_node(comm)
    return choose_mode(k, sharing, threads or default_threads(sharing))


def check_tolerance(dtype: np.dtype, reference: np.ndarray) -> float:
    """Largest acceptable |C - C_ref| for ``--check``: 1e-9 in float64, 1e-3 * max(1, max|C_ref|) in float32."""
    if np.dtype(dtype) == np.float64:
        return 1e-9
    return 1e-3 * max(1.0, float(np.abs(reference).max(initial=0.0)))


def run_spmm_session(
    comm: MPI.Comm,
    spec: str,
    strategies: list[Strategy],
    modes: list[str],
    *,
    k: int = 32,
    dtype=np.float64,
    repeat: int = 10,
    partition: str = "even",
    check: bool = False,
    symmetrize: bool = False,
    topology: Topology | None = None,
    proxy: str = "local",
    threads: int | None = None,
    deterministic: bool = False,
    progress=None,
) -> list[dict] | None:
    """Collective. Run every (strategy, mode) on the matrix ``spec`` and return one result dict per
    run on rank 0 (None on other ranks). B is :func:`~sparsewire.generators.deterministic_dense`.

    Each run: plan collectively (timed; one plan per layout, shared by the modes that run it), one
    untimed warm-up multiply, then ``repeat`` timed multiplies, each between barriers and timed as
    the slowest rank's time. Measured bytes are what MPI delivered (receive statuses), summed over
    the ranks; with a topology, every run also reports planned and measured bytes per link class
    (``intra_group`` / ``inter_group``, each counted from the senders' groups) and the predicted
    communication time. ``delivery_problems`` counts messages whose size differed from the
    receiver's plan.
    """
    rank = comm.Get_rank()
    dtype = np.dtype(dtype)
    matrix, problem = None, None
    if rank == 0:
        try:
            matrix = load_matrix(spec, symmetrize=symmetrize)
        except Exception as error:  # reported on every rank by agree_on_error
            problem = str(error)
        if matrix is not None:
            bad = nonfinite_entries(matrix)
            if bad and check:
                problem = (
                    f"{spec}: {bad} stored values are NaN or infinite, so --check cannot compare results; "
                    "clean the matrix or run without --check"
                )
            elif bad:
                print(f"sparsewire: warning: {spec}: {bad} stored values are NaN or infinite; C will hold NaN", file=sys.stderr)
    agree_on_error(comm, problem)
    if modes == ["auto"]:
        modes = [_auto_mode(comm, k, threads)]
    distributed = distribute_matrix(comm, matrix, partition)
    col_start, col_stop = distributed.col_partition.range(rank)
    b_local = deterministic_dense(col_start, col_stop, k, dtype)
    reference = None
    if check and rank == 0:
        reference = matrix @ deterministic_dense(0, matrix.shape[1], k, np.float64)

    groups = topology.groups(comm.Get_size()) if topology is not None else None
    results = []
    for strategy in strategies:
        plans = {}
        for mode in modes:
            layout = layout_for_mode(mode)
            if layout in plans:
                continue
            comm.Barrier()
            started = MPI.Wtime()
            plan = build_rank_plan_collective(
                comm, distributed.local_rows, distributed.row_partition, distributed.col_partition, strategy,
                topology, layout=layout, proxy=proxy,
            )
            plan_seconds = comm.allreduce(MPI.Wtime() - started, op=MPI.MAX)
            summaries = comm.allgather(rank_send_summary(plan))
            stats = plan_stats(summaries, k, dtype.itemsize, strategy, comm.Get_size(), topology)
            plans[layout] = (plan, plan_seconds, stats)
        for mode in modes:
            plan, plan_seconds, stats = plans[layout_for_mode(mode)]
            if progress and rank == 0:
                progress(f"running {strategy.value}/{mode}")
            with SpmmExecutor(plan, comm, k, dtype, mode, threads=threads, deterministic=deterministic) as executor:
                result = np.empty((plan.local_shape[0], k), dtype)
                executor.multiply(b_local, out=result)  # warm-up: first-touch of buffers, MPI connections
                times = []
                for _ in range(repeat):
                    comm.Barrier()
                    started = MPI.Wtime()
                    executor.multiply(b_local, out=result)
                    times.append(comm.allreduce(MPI.Wtime() - started, op=MPI.MAX))
                received = executor.bytes_received_from
                measured = comm.allreduce(int(received.sum()), op=MPI.SUM)
                if groups is not None:
                    same = groups == groups[rank]
                    measured_intra = comm.allreduce(int(received[same].sum()), op=MPI.SUM)
                    measured_inter = comm.allreduce(int(received[~same].sum()), op=MPI.SUM)
                problems = [p for ps in comm.allgather(executor.delivery_problems) for p in ps]
                used_threads = executor.threads
            checksum_sum = comm.allreduce(float(result.sum(dtype=np.float64)), op=MPI.SUM)
            checksum_squares = comm.allreduce(float(np.square(result, dtype=np.float64).sum()), op=MPI.SUM)
            gathered = comm.gather(result, root=0) if check else None
            if rank != 0:
                continue
            row = {
                "matrix": spec,
                "n_rows": distributed.shape[0],
                "n_cols": distributed.shape[1],
                "nnz": distributed.nnz,
                "ranks": comm.Get_size(),
                "strategy": strategy.value,
                "mode": mode,
                "threads": used_threads,
                "deterministic": deterministic,
                "k": k,
                "dtype": dtype.name,
                "median_seconds": statistics.median(times) if times else None,
                "min_seconds": min(times) if times else None,
                "plan_seconds": plan_seconds,
                "planned_bytes": stats.total_bytes,
                "measured_bytes": int(measured),
                "delivery_problems": len(problems),
                "messages": stats.messages,
                "setup_bytes": stats.setup_bytes,
                "layout": plan.layout,
                "checksum_sum": checksum_sum,
                "checksum_fro": float(np.sqrt(checksum_squares)),
            }
            if topology is not None:
                classes = stats.class_totals()
                row["topology"] = topology.name
                row["proxy"] = proxy
                row["intra_group_bytes"] = classes["intra_group_bytes"]
                row["inter_group_bytes"] = classes["inter_group_bytes"]
                row["measured_intra_group_bytes"] = int(measured_intra)
                row["measured_inter_group_bytes"] = int(measured_inter)
                row["predicted_seconds"] = stats.as_dict()["predicted_seconds"]
            if problems:
                row["first_delivery_problem"] = problems[0]
            if check:
                full = np.vstack(gathered).astype(np.float64)
                row["max_abs_error"] = float(np.abs(full - reference).max(initial=0.0))
                row["check_passed"] = bool(row["max_abs_error"] <= check_tolerance(dtype, reference))
            results.append(row)
    return results if rank == 0 else None


def run_eigs_session(
    comm: MPI.Comm,
    spec: str,
    nev: int,
    *,
    block: int | None = None,
    steps: int = 8,
    tol: float = 1e-8,
    max_iterations: int = 500,
    strategy: Strategy = Strategy.JOINT,
    mode: str = "overlap",
    threads: int | None = None,
    partition: str = "even",
    symmetrize: bool = False,
    check: bool = False,
    progress=None,
) -> dict | None:
    """Collective. The ``nev`` largest-magnitude eigenvalues of the symmetric matrix ``spec`` by
    :func:`~sparsewire.exec.eigensolver.block_krylov_eigs` on one plan; a result dict on rank 0
    (None elsewhere). ``check`` adds SciPy's ``eigsh`` (ARPACK) on rank 0 and the largest relative
    difference."""
    from sparsewire.exec.eigensolver import block_krylov_eigs

    rank = comm.Get_rank()
    block = block or nev + 4
    matrix, problem = None, None
    if rank == 0:
        try:
            matrix = load_matrix(spec, symmetrize=symmetrize)
            if matrix.shape[0] != matrix.shape[1]:
                problem = f"{spec} is {matrix.shape[0]} x {matrix.shape[1]}; eigs needs a square symmetric matrix"
            elif nonfinite_entries(matrix):
                problem = f"{spec}: stored values are NaN or infinite; clean the matrix first"
            elif abs(matrix - matrix.T).max() != 0:
                problem = f"{spec} is not symmetric; eigs computes eigenpairs of symmetric matrices (use --symmetrize for edge lists)"
            elif not 1 <= nev < matrix.shape[0]:
                problem = f"--nev {nev} must be between 1 and n - 1 = {matrix.shape[0] - 1}"
            elif block < nev:
                problem = f"--block {block} must be at least --nev {nev}"
        except Exception as error:  # reported on every rank by agree_on_error
            problem = str(error)
    agree_on_error(comm, problem)
    if mode == "auto":
        mode = _auto_mode(comm, block, threads)
    distributed = distribute_matrix(comm, matrix, partition)
    plan = build_rank_plan_collective(
        comm, distributed.local_rows, distributed.row_partition, distributed.col_partition, strategy, None,
        layout=layout_for_mode(mode),
    )
    with SpmmExecutor(plan, comm, block, np.float64, mode, threads=threads) as executor:
        result = block_krylov_eigs(
            executor, int(distributed.row_partition.offsets[rank]), distributed.shape[0], nev,
            steps=steps, tol=tol, max_iterations=max_iterations, progress=progress,
        )
        bytes_per_multiply = comm.allreduce(executor.bytes_received, op=MPI.SUM)
        used_threads = executor.threads
    seconds = comm.allreduce(result.seconds, op=MPI.MAX)
    multiply_seconds = comm.allreduce(result.multiply_seconds, op=MPI.MAX)
    if rank != 0:
        return None
    report = {
        "matrix": spec,
        "n": distributed.shape[0],
        "nnz": distributed.nnz,
        "ranks": comm.Get_size(),
        "threads": used_threads,
        "strategy": strategy.value,
        "mode": mode,
        "nev": nev,
        "block": block,
        "eigenvalues": result.eigenvalues.tolist(),
        "residuals": result.residuals.tolist(),
        "converged": result.converged,
        "iterations": result.iterations,
        "multiplies": result.multiplies,
        "seconds": seconds,
        "multiply_seconds": multiply_seconds,
        "multiplies_per_second": result.multiplies / multiply_seconds if multiply_seconds > 0 else None,
        "bytes_per_multiply": int(bytes_per_multiply),
        "bytes_per_iteration": int(bytes_per_multiply) * result.multiplies / max(result.iterations, 1),
    }
    if check:
        from scipy.sparse.linalg import eigsh

        reference = eigsh(sp.csr_array(matrix, dtype=np.float64), k=nev, which="LM", return_eigenvectors=False, tol=1e-12)
        reference = reference[np.argsort(-np.abs(reference), kind="stable")]
        report["reference_eigenvalues"] = reference.tolist()
        report["max_relative_difference"] = float(np.max(np.abs(result.eigenvalues - reference) / np.abs(reference)))
    return report
