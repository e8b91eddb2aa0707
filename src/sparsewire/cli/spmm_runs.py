"""The runs behind ``sparsewire spmm`` and ``sparsewire eigs`` (Collective): distribute, plan, time
(:func:`sparsewire.profile.timed.time_plan`), count and check; the commands only format the reports."""

from __future__ import annotations

import sys

from sparsewire.cli.profiling import trace_fields
from sparsewire.errors import InputError

__all__ = ["spmm_session", "eigs_session", "bytes_match"]


def bytes_match(result: dict) -> bool:
    """Bytes MPI delivered equal the plan's, in total, per link class and per pair of ranks, and every message had
    the size its receiver's plan expects. On a transport without receive statuses (torch) only the
    received tensor sizes can be compared; their agreement with the senders was checked at setup."""
    if not result["bytes_measured"]:
        return result["received_tensor_bytes"] == result["planned_bytes"] and result["delivery_problems"] == 0
    same = result["measured_bytes"] == result["planned_bytes"] and result["delivery_problems"] == 0
    same = same and not result.get("traffic_differences")  # every rank pair, not only the totals
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


def _input_rows(matrix) -> int:
    """This rank's rows of B (counted, not listed: a hypersparse wide A has 10^11 of them)."""
    start, stop = matrix.col_partition.range(matrix.comm.Get_rank())
    return int(stop - start)


def spmm_session(
    comm,
    spec,
    strategies,
    modes,
    options,
    *,
    k,
    dtype,
    repeat,
    partition,
    imbalance,
    check,
    symmetrize,
    progress,
    trace=None,
    rounds=1,
    local_rate="topology",
) -> list[dict] | None:
    """Collective. Every (strategy, mode) on the matrix ``spec`` with the other choices of
    ``options`` (:class:`~sparsewire.exec.options.ExecOptions`): one result dict per run on rank 0 (None
    on other ranks). B is :func:`~sparsewire.io.generators.deterministic_dense`.

    Each run: plan (timed, the slowest rank), one untimed warm-up multiply, then ``repeat`` timed
    multiplies, each between barriers and timed as the slowest rank's time. With ``rounds`` R > 1 every plan is
    made first and kept, and the runs take turns R times (each turn a warm-up and ``repeat`` timed multiplies; in
    the given order on even turns, reversed on odd ones: :func:`~sparsewire.profile.timed.turn_order`), so
    a machine whose speed drifts during the session (a shared or virtual one) slows every run alike; the medians are
    over all R x ``repeat`` multiplies. Measured bytes are
    what MPI delivered (receive statuses), summed over the ranks; with a topology, per link class
    (each counted from the senders' groups) and the predicted time (with its communication part). On the torch
    transport, which has no receive status, ``measured_bytes`` is None and
    ``received_tensor_bytes`` sums the sizes of the tensors received into.
    ``delivery_problems`` counts messages whose size differed from the receiver's plan. ``local_rate`` ``matrix``:
    where the topology holds a measured local rate (and the kernels run on the CPU), the one of this matrix's rows
    (:meth:`~sparsewire.distributed.matrix.DistributedMatrix.local_rate`) takes its place for every plan.
    """
    import contextlib

    import numpy as np
    from mpi4py import MPI

    from sparsewire._lib.tolerance import allowed_error, within
    from sparsewire.cli.common import refuse_oversized
    from sparsewire.io.generators import deterministic_dense, deterministic_dense_rows
    from sparsewire.profile.timed import TimedRun, time_plan, turn_order
    from sparsewire.profile.tracing import trace as trace_plan
    from sparsewire.wire import codecs

    if rounds > 1 and trace is not None:
        raise InputError("--rounds takes turns between the runs' plans, a trace follows one run: trace with --rounds 1")
    rank = comm.Get_rank()
    topology, device = options.topology, options.device
    dtype = np.dtype(dtype)
    matrix, bad = _load(comm, spec, partition, symmetrize, topology, imbalance)
    if progress and rank == 0 and matrix.partition_reason:
        progress(f"{matrix.partition_reason} ({matrix.partition_seconds:.2f} s)")
    if local_rate == "matrix" and topology is not None and topology.local_rate is not None and options.backend == "numpy":
        if progress and rank == 0:
            progress(
                f"the CSR kernel's rate on this matrix's rows (the topology's: {topology.local_rate:.3g} nonzero-columns/s "
                f"on {topology.local_rate_matrix})"
            )
        rate = matrix.local_rate(k, dtype, options.threads)
        if rate is not None:
            topology = topology.with_local_rate(rate, spec)
            options = options.replace(topology=topology)
            if progress and rank == 0:
                progress(f"local work priced at {rate:.3g} nonzero-columns/s, measured on {spec}")
    # B and C (and B's hashes while generated); with --check, rank 0 also holds A @ B, |A| |B| and B whole.
    rows = matrix.local_rows.shape[0] + _input_rows(matrix) + (2 * matrix.shape[0] + matrix.shape[1]) * (check and rank == 0)
    what = f"--k {k}: B and C ({rows} rows x {k} columns)"
    refuse_oversized(comm, rows * k * (dtype.itemsize + 8), what, "use a smaller --k (B has a row for each column of A)")
    if bad and check:
        raise InputError(
            f"{spec}: {bad} stored values are NaN or infinite, so --check cannot compare results; clean the matrix or run "
            "without --check"
        )
    if bad and rank == 0:
        print(f"sparsewire: warning: {spec}: {bad} stored values are NaN or infinite; C will hold NaN", file=sys.stderr)
    b_local = deterministic_dense_rows(matrix.input_ids(), k, dtype)  # original indices: any partitioner
    whole = matrix.gather() if check else None
    reference = allowed = None
    if check and rank == 0:
        b_reference = deterministic_dense(0, matrix.shape[1], k, np.float64)
        reference = whole @ b_reference
        magnitude, pattern = abs(whole), whole.astype(bool).astype(np.float64)
        operands = magnitude.sum(axis=1)[:, None] + pattern @ np.abs(b_reference)  # sum |a_ik| + sum |b_kj|
        scale, terms = magnitude @ np.abs(b_reference), np.diff(whole.indptr)[:, None]
        row_scale = magnitude @ np.abs(b_reference).max(axis=1)[:, None]  # sum_k |a_ik| max_j |b_kj|
        allowed = allowed_error(scale, terms, dtype, operands)
    groups = topology.groups(comm.Get_size()) if topology is not None else None
    results, opened = {}, {}
    runs = [(strategy, mode) for strategy in strategies for mode in modes]
    with contextlib.ExitStack() as unwind:  # a failed run closes the plans still held (--rounds)
        unwind.callback(lambda: [entry[0].close() for entry in opened.values()])
        for turn, index in ((t, i) for t in range(rounds) for i in turn_order(range(len(runs)), t)):
            strategy, mode = runs[index]
            if progress and rank == 0:
                progress(
                    f"round {turn + 1} of {rounds}: running {strategy}/{mode}"
                    if turn
                    else f"planning and running {strategy}/{mode}"
                )
            if turn == 0:
                comm.Barrier()
                started = MPI.Wtime()
                plan = matrix.spmm_plan(
                    k, dtype, options=options.replace(strategy=strategy, mode=None if mode == "auto" else mode)
                )
                plan_seconds = comm.allreduce(MPI.Wtime() - started, op=MPI.MAX)
                if progress and rank == 0 and plan.choice.measured:
                    progress(plan.choice.reason())
                result = np.empty((plan.output_rows, k), dtype)
                out, b_in = result, b_local
                if options.backend == "torch":
                    import torch

                    out = torch.from_numpy(result).to(device)  # on the CPU the same memory
                    b_in = torch.from_numpy(b_local).to(device)  # uploaded once, outside the timing
                # What a user waits for before the first C: partitioning, planning, then the first multiply (MPI's
                # connections too); reading the file is left out, as for a peer handed the matrix.
                first = matrix.partition_seconds + plan_seconds + time_plan(plan, b_in, out, 1, warmup=0).seconds[0]
                opened[index] = (plan, plan_seconds, first, result, out, b_in, [])
            plan, plan_seconds, first, result, out, b_in, seconds = opened[index]
            traced = contextlib.nullcontext()
            if trace is not None:  # (directory or None, window, summary): the warm-up is multiply 0
                name = f"trace-{plan.rank_plan.strategy.value}-{plan.options.mode.value}.json"
                traced = trace_plan(plan, trace[0], window=trace[1], name=name, summary=trace[2])
            with traced as tracer:
                timing = time_plan(plan, b_in, out, repeat)  # one warm-up: first-touch of buffers, MPI connections
            seconds.extend(timing.seconds)
            if turn < rounds - 1:
                continue
            del opened[index]
            timing = TimedRun(seconds, timing.result)
            with plan:
                if options.backend == "torch" and out.device.type != "cpu":
                    result = out.cpu().numpy()
                received = plan.bytes_received_from
                measured = comm.allreduce(int(received.sum()), op=MPI.SUM)
                wire = comm.allreduce(plan.wire_bytes_received, op=MPI.SUM)
                passes = plan.codec_passes
                setup_wire, setup_words = comm.allreduce(np.array(plan.rank_plan.setup_exchange_bytes, np.int64), op=MPI.SUM)
                if groups is not None:
                    same = groups == groups[rank]
                    measured_intra = comm.allreduce(int(received[same].sum()), op=MPI.SUM)
                    measured_inter = comm.allreduce(int(received[~same].sum()), op=MPI.SUM)
                problems = [p for ps in comm.allgather(plan.delivery_problems) for p in ps]
                stats, chosen, layout, used = plan.stats, plan.rank_plan.strategy.value, plan.rank_plan.layout, plan.options
                predicted = (plan.predicted_seconds, plan.predicted_communication_seconds) if topology is not None else None
                counted_by, measured_independently = plan.counted_by, plan.bytes_measured
                reason = plan.choice.reason()
                staged_below = plan.transfer_rule.staged_below_bytes if plan.transfer_rule else None
                transfer_paths = plan.transfer_summary
                traffic, planned_traffic = plan.traffic()  # collective: every rank's ledger
            checksum_sum = comm.allreduce(float(result.sum(dtype=np.float64)), op=MPI.SUM)
            checksum_squares = comm.allreduce(float(np.square(result, dtype=np.float64).sum()), op=MPI.SUM)
            gathered = matrix.gather_dense(result) if check else None
            if rank != 0:
                continue
            row = {
                "matrix": spec,
                "n_rows": matrix.shape[0],
                "n_cols": matrix.shape[1],
                "nnz": matrix.nnz,
                "ranks": comm.Get_size(),
                "strategy": chosen,
                "strategy_requested": strategy,
                "strategy_reason": reason,
                "mode": used.mode.value,
                "threads": used.threads,
                "deterministic": used.deterministic,
                "k": k,
                "dtype": dtype.name,
                "median_seconds": timing.median_seconds,
                "min_seconds": timing.min_seconds,
                "timed_multiplies": len(timing.seconds),
                "rounds": rounds,
                # the slowest rank's time of every timed multiply, turn after turn (rounds x repeat): paired comparisons
                "multiply_seconds": [float(x) for x in timing.seconds],
                "plan_seconds": plan_seconds,
                "partition": matrix.partitioned_by,
                "partition_reason": matrix.partition_reason,
                "partition_seconds": matrix.partition_seconds,
                "first_product_seconds": first,
                "planned_bytes": stats.total_bytes,
                "transport": used.transport,
                "backend": used.backend,
                "device": used.device,
                "options": used.as_dict(),
                "staged_below_bytes": staged_below,
                "transfer_paths": transfer_paths,
                "bytes_counted_by": counted_by,
                "bytes_measured": measured_independently,
                "measured_bytes": int(measured) if measured_independently else None,
                "payload_bytes": int(measured),
                "wire_bytes": int(wire),
                "codec_passes": passes,
                "compress_auto": plan.executor.codec_choice,
                "delivery_problems": len(problems),
                "messages": stats.messages,
                "setup_bytes": int(stats.setup_bytes),
                "setup_exchange_bytes": int(setup_words),
                "setup_exchange_wire_bytes": int(setup_wire),
                "layout": layout,
                "checksum_sum": checksum_sum,
                "checksum_fro": float(np.sqrt(checksum_squares)),
                # rank x rank (rows: sources) as the transport counted it; the matrices up to 64 ranks
                "traffic": traffic.as_dict(topology, matrices=comm.Get_size() <= 64),
                "traffic_differences": traffic.differences(planned_traffic),
            }
            row.update(trace_fields(tracer) if trace is not None else {})
            if not measured_independently:
                row["received_tensor_bytes"] = int(measured)
            if topology is not None:
                classes = stats.class_totals()
                row.update(
                    topology=topology.name,
                    local_rate=topology.local_rate,
                    local_rate_matrix=topology.local_rate_matrix,
                    proxy=used.proxy.value,
                    intra_group_bytes=classes["intra_group_bytes"],
                    inter_group_bytes=classes["inter_group_bytes"],
                    measured_intra_group_bytes=int(measured_intra) if measured_independently else None,
                    measured_inter_group_bytes=int(measured_inter) if measured_independently else None,
                    predicted_seconds=predicted[0],
                    predicted_communication_seconds=predicted[1],
                )
            if problems:
                row["first_delivery_problem"] = problems[0]
            if check:
                full = gathered.astype(np.float64)
                row["max_abs_error"] = float(np.abs(full - reference).max(initial=0.0))
                coded = codecs.product_error_bound(
                    used.codec, passes, scale, row_scale, magnitude.sum(axis=1)[:, None], terms, dtype
                )
                row["check_passed"] = bool(within(full, reference, allowed + coded).all())
            results[index] = row
    return [results[index] for index in sorted(results)] if rank == 0 else None


def eigs_session(
    comm, spec, nev, options, *, block, steps, tol, max_iterations, partition, imbalance, symmetrize, check, progress, trace=None
) -> dict | None:
    """Collective. The ``nev`` largest-magnitude eigenvalues of the symmetric matrix ``spec`` by
    :func:`~sparsewire.apps.eigensolver.block_krylov_eigs` on one plan made with ``options``
    (:class:`~sparsewire.exec.options.ExecOptions`); a result dict on rank 0
    (None elsewhere). ``check`` adds SciPy's ``eigsh`` (ARPACK) on rank 0 and the largest relative
    difference."""
    import contextlib

    import numpy as np
    import scipy.sparse as sp
    from mpi4py import MPI

    from sparsewire._lib.tolerance import eigenvalues_allowed, within
    from sparsewire.apps.eigensolver import block_krylov_eigs
    from sparsewire.cli.common import refuse_oversized
    from sparsewire.comm.runtime import agree_on_error
    from sparsewire.io.readers import is_edge_list
    from sparsewire.profile.tracing import trace as trace_plan

    rank = comm.Get_rank()
    block = block or nev + 4
    matrix, bad = _load(comm, spec, partition, symmetrize, imbalance=imbalance)
    rows = matrix.local_rows.shape[0] + _input_rows(matrix)
    refuse_oversized(
        comm,
        rows * block * (steps + 3) * 8,
        f"--block {block} --steps {steps}: a Krylov basis ({steps + 1} blocks of {rows} rows x {block} columns)",
        "use a smaller --block or --steps",
    )
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
            differ = (whole != whole.T).nnz
            hint = " (add --symmetrize for the undirected graph)" if is_edge_list(spec) and not symmetrize else ""
            problem = f"{spec} is not symmetric (A and A^T differ in {differ} entries); eigs needs a symmetric matrix{hint}"
        elif not 1 <= nev < matrix.shape[0]:
            problem = f"--nev {nev} must be between 1 and n - 1 = {matrix.shape[0] - 1}"
        elif block < nev:
            problem = f"--block {block} must be at least --nev {nev}"
    agree_on_error(comm, problem)
    with matrix.spmm_plan(block, np.float64, options=options) as plan:
        traced = contextlib.nullcontext()
        if trace is not None:  # (directory or None, window, summary): the first multiply is 0
            name = f"trace-eigs-{plan.rank_plan.strategy.value}-{plan.options.mode.value}.json"
            traced = trace_plan(plan, trace[0], window=trace[1], name=name, summary=trace[2])
        with traced as tracer:
            result = block_krylov_eigs(
                plan.executor,
                matrix.row_offset,
                matrix.shape[0],
                nev,
                steps=steps,
                tol=tol,
                max_iterations=max_iterations,
                progress=progress,
            )
        bytes_per_multiply = comm.allreduce(plan.bytes_received, op=MPI.SUM)
        traffic, planned_traffic = plan.traffic()  # the last multiply's
        used_threads, chosen, mode, plan_options = plan.threads, plan.rank_plan.strategy.value, plan.mode, plan.options.as_dict()
        passes = plan.codec_passes
    seconds = comm.allreduce(result.seconds, op=MPI.MAX)
    multiply_seconds = comm.allreduce(result.multiply_seconds, op=MPI.MAX)
    if rank != 0:
        return None
    report = {
        "matrix": spec,
        "n": matrix.shape[0],
        "nnz": matrix.nnz,
        "ranks": comm.Get_size(),
        "threads": used_threads,
        "strategy": chosen,
        "mode": mode,
        "transport": options.transport,
        "options": plan_options,
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
        "k": block,
        "traffic": traffic.as_dict(options.topology, matrices=comm.Get_size() <= 64),
        "traffic_differences": traffic.differences(planned_traffic),
    }
    report.update(trace_fields(tracer) if trace is not None else {})
    if check:
        from scipy.sparse.linalg import eigsh

        operator = sp.csr_array(whole, dtype=np.float64)
        operator.eliminate_zeros()
        # A zero matrix's eigenvalues are all 0; ARPACK cannot start on it ("starting vector is zero").
        reference = eigsh(operator, k=nev, which="LM", return_eigenvectors=False, tol=1e-12) if operator.nnz else np.zeros(nev)
        # Paired with ours by value, not by magnitude: +x and -x tie in magnitude up to rounding, so each solver may list
        # either first (a rank-2 matrix's +-403.346 came out in opposite orders).
        aligned = np.empty_like(reference)
        aligned[np.argsort(result.eigenvalues, kind="stable")] = np.sort(reference)
        reference = aligned
        report["reference_eigenvalues"] = reference.tolist()
        report["max_difference"] = float(np.max(np.abs(result.eigenvalues - reference)))
        allowed = eigenvalues_allowed(reference, matrix.shape[0])
        if passes:  # coded messages: a Ritz value is within its true residual, the computed one plus ||dA x||
            from sparsewire.wire.codecs import operator_change

            norm = float(abs(operator).sum(axis=1).max(initial=0.0))  # || |A| ||_inf = || |A| ||_2 bound (symmetric)
            allowed = allowed + tol * np.abs(reference) + operator_change(options.codec, passes, block) * norm
        report["check_passed"] = bool(within(result.eigenvalues, reference, allowed).all())
    return report
