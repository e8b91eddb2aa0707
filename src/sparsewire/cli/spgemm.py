"""The ``spgemm`` command (under mpiexec): a thin handler over :mod:`sparsewire.spgemm` (algorithms, values);
its MPI start, loading and printing are shared with the graph commands of :mod:`sparsewire.cli.graphs`."""

from __future__ import annotations

import argparse
import sys

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.atomic import atomic_write
from sparsewire._lib.text import format_bytes
from sparsewire.cli.common import (
    MATRIX_HELP,
    add_partition_arguments,
    agree_on_arguments,
    check_writable,
    json_text,
    positive_int,
    write_output,
)
from sparsewire.cli.profiling import (
    add_profiling_arguments,
    check_profiling_arguments,
    print_profiling,
    profiling_request,
    trace_fields,
    write_profiling_pictures,
)
from sparsewire.errors import InputError
from sparsewire.spgemm.options import SpgemmOptions

__all__ = ["add_commands", "VALUES_HELP", "start_mpi", "load_on_root", "print_report"]

SEMIRING_HELP = (
    "plus_times, min_plus, max_plus, max_times, min_times, plus_min, lor_land, plus_pair, any_pair, or a user "
    "semiring ADD.MULTIPLY from a monoid (plus, min, max, times, lor, any) and a GraphBLAS binary operator "
    "(e.g. plus.minus, min.first) (default: plus_times)"
)
VALUES_HELP = "stored values: file (pattern files read as 1), ones, or random:SEED (integers 1..9) (default: %(default)s)"


def add_commands(commands) -> None:
    """Add ``spgemm`` to the CLI's subparsers."""
    spgemm = commands.add_parser(
        "spgemm",
        help="run distributed C = A (+.x) B over a semiring under mpiexec",
        description=(
            "Compute A x A (or A x MATRIX2) over a semiring on the ranks of mpiexec -n P with Sparse SUMMA on a "
            "2D grid (any P: 3 ranks use 3x1) or 1D sparsity-aware SpGEMM (each rank fetches only the rows of B "
            "its nonzero columns need, or pushes partial C rows). 'auto' picks the one that moves the fewest "
            "bytes. Rank 0 prints ranks, grid, algorithm, semiring, median_seconds, nnz_out, checksum_sum "
            "(sum of C's values; true counts 1), bytes_moved and peak memory."
        ),
    )
    spgemm.add_argument("matrix", help=MATRIX_HELP)
    spgemm.add_argument("matrix2", nargs="?", help="B (default: A itself)")
    spgemm.add_argument("--semiring", default="plus_times", help=SEMIRING_HELP)
    spgemm.add_argument(
        "--algorithm", choices=["summa", "1d", "auto"], default="auto", help="(default: auto, by predicted bytes)"
    )
    spgemm.add_argument(
        "--strategy",
        choices=["auto", "column", "row", "joint"],
        default="auto",
        help="1D only: fetch B rows (column), push partial C rows (row), or a vertex cover of both (joint) (default: auto)",
    )
    spgemm.add_argument("--grid", help="SUMMA grid ROWSxCOLS, product = ranks (default: most nearly square, rows >= cols)")
    spgemm.add_argument(
        "--overlap",
        action="store_true",
        help="1D only: multiply the diagonal block while the rows travel, then merge the received rows' product into it "
        "(default: one product once the rows are in, which skips that merge and measured faster)",
    )
    spgemm.add_argument(
        "--compress",
        choices=["none", "index", "bf16", "auto"],
        default="none",
        help="index: every message's integers (rows, lengths, columns) travel coded, delta plus bit-packing: lossless, "
        "C bit-identical; bf16 (plus_times only): the integers coded and every value rounded to bf16 (within "
        "max(2^-8 |x|, 2^-134)), --check allowing the bound that follows for C; auto: integers coded only on the links "
        "where the wire time saved exceeds the coding time (measured at the start on each rank's block of A, against "
        "the --topology's bandwidths; without, MPI's nodes and assumed constants), values at full width (a semiring's "
        "values are often exact). bytes_moved stays the uncoded figure the predictions count, wire_bytes is what MPI "
        "counted (default: none)",
    )
    spgemm.add_argument(
        "--topology",
        help="--compress auto only: the links it weighs: a file from sparsewire calibrate --network, nodes:G, or a "
        "preset (default: MPI's shared-memory nodes)",
    )
    spgemm.add_argument(
        "--stages-per-product",
        type=positive_int,
        default=2,
        help="SUMMA only: stages multiplied as one product over their joined blocks; each further product is merged "
        "into C (a pass over C), so more is faster and holds more received blocks (default: 2)",
    )
    spgemm.add_argument(
        "--phases", type=positive_int, default=1, help="split B's columns into N phases to bound peak memory (default: 1)"
    )
    spgemm.add_argument("--repeat", type=positive_int, default=3, help="timed multiplies after one warm-up (default: 3)")
    spgemm.add_argument("--values", default="file", help=VALUES_HELP)
    add_partition_arguments(spgemm, default="auto")
    spgemm.add_argument("--check", action="store_true", help="compare C with single-process GraphBLAS, entry by entry")
    spgemm.add_argument("--output", metavar="FILE", help="write C (original row and column order) as a SciPy .npz on rank 0")
    spgemm.add_argument("--json", action="store_true", help="print one JSON object (rank 0)")
    add_profiling_arguments(spgemm, "run", "the run", "DIR/trace-spgemm-ALGORITHM.json", traffic_map=False)
    spgemm.set_defaults(handler=_run_spgemm)


def start_mpi(args: argparse.Namespace):
    """Collective over MPI_COMM_WORLD. Start MPI, agree on the arguments and limit each rank's threads."""
    from mpi4py import MPI

    from sparsewire.comm.runtime import limit_threads_per_rank

    comm = MPI.COMM_WORLD
    agree_on_arguments(comm, args)
    limit_threads_per_rank(comm)
    return comm


def load_on_root(comm, spec: str, values: str):
    """Collective. The operand ``spec`` with ``values`` on rank 0 (None elsewhere); a load error ends every rank."""
    from sparsewire.comm.runtime import agree_on_error
    from sparsewire.spgemm.values import load_operand

    matrix, problem = None, None
    if comm.Get_rank() == 0:
        try:
            matrix = load_operand(spec, values)
        except InputError as error:
            problem = str(error)
    agree_on_error(comm, problem)
    return matrix


def print_report(args, report: dict, lines: list[str]) -> int:
    """Not collective (rank 0). Print the report (JSON or lines); 1 when its check failed."""
    failed = report.get("check_passed") is False
    if args.json:
        print(json_text(report))
    else:
        print("\n".join(lines))
    if failed:
        print("sparsewire: error: the distributed result differs from the reference", file=sys.stderr)
    return 1 if failed else 0


def _run_spgemm(args: argparse.Namespace) -> int:
    from sparsewire.spgemm.semirings import get_semiring
    from sparsewire.spgemm.values import check_values_spec
    from sparsewire.topology.presets import parse_topology
    from sparsewire.wire.codec_choice import describe_choice

    semiring = get_semiring(args.semiring)
    check_values_spec(args.values)
    if args.output:
        check_writable(args.output, "--output")
    check_profiling_arguments(args)
    from sparsewire.distributed.spgemm import compress_problem

    if compress_problem(args.compress, semiring):
        raise InputError(compress_problem(args.compress, semiring).replace("compress ", "--compress "))
    if args.topology is not None and args.compress != "auto":
        raise InputError("--topology weighs the links for --compress auto; add --compress auto or drop --topology")
    topology = None if args.topology is None else parse_topology(args.topology)
    comm = start_mpi(args)
    from sparsewire.spgemm.summa import parse_grid

    options = SpgemmOptions(
        algorithm=args.algorithm,
        strategy=args.strategy,
        grid=parse_grid(args.grid, comm.Get_size()),
        phases=args.phases,
        overlap=args.overlap,
        stages_per_product=args.stages_per_product,
        compress=args.compress,
        topology=topology,
    )
    progress = None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))
    report = _spgemm_session(
        comm,
        args.matrix,
        args.matrix2,
        semiring,
        options,
        repeat=args.repeat,
        values=args.values,
        check=args.check,
        output=args.output,
        progress=progress,
        partition=args.partition,
        imbalance=args.imbalance,
        trace=profiling_request(args, comm),
    )
    if comm.Get_rank() != 0:
        return 0
    r = report
    write_profiling_pictures(args, r, f"{args.matrix}: spgemm {r['algorithm']}, P = {r['ranks']}, grid {r['grid']}")
    lines = [
        f"{r['matrix']} x {r['matrix2'] or r['matrix']}: C is {r['shape'][0]} x {r['shape'][1]}; semiring {r['semiring']} "
        f"(identity {r['semiring_facts']['identity']}, commutes: {r['semiring_facts']['multiplication_commutes']})",
        f"ranks {r['ranks']}, grid {r['grid']}, algorithm {r['algorithm']}, phases {r['phases']}",
        f"median_seconds {r['median_seconds']:.6f} over {r['repeat']}",
        f"nnz_out {r['nnz_out']}, checksum_sum {r['checksum_sum']:.17g}",
        f"bytes_moved {r['bytes_moved']} ({format_bytes(r['bytes_moved'])})"
        + (
            f", on the wire {r['wire_bytes']} ({format_bytes(r['wire_bytes'])}, compress {r['compress']})"
            if r["compress"] != "none"
            else ""
        )
        + "; predicted by algorithm: "
        + ", ".join(
            f"{name} {'>= ' if name in r['lower_bounds_only'] else ''}{format_bytes(value)}"
            for name, value in r["predicted_bytes_by_algorithm"].items()
        ),
        f"peak_held_entries {r['peak_held_entries']}, peak_rss_bytes {r['peak_rss_bytes']} ({format_bytes(r['peak_rss_bytes'])})",
    ]
    lines += describe_choice(r["compress_auto"])
    if args.check:
        rule = "exact" if r.get("exact") else "within roundoff" + (" and the bf16 bound" if r["codec_passes"] else "")
        lines.append(
            f"check: {'passed' if r['check_passed'] else 'FAILED'} (pattern equal: {r['pattern_equal']}, "
            f"mismatched values: {r['mismatched_values']}, {rule})"
        )
    failed = print_report(args, report, lines)
    if not args.json:
        print_profiling(report, f"spgemm {r['algorithm']}")
    if report["bytes_moved"] != report["predicted_bytes"]:
        print("sparsewire: error: bytes moved differ from the predicted bytes", file=sys.stderr)
        return 1
    return failed


def _spgemm_session(
    comm,
    spec: str,
    second_spec: str | None,
    semiring,
    options: SpgemmOptions,
    *,
    repeat: int = 3,
    values: str = "file",
    check: bool = False,
    output: str | None = None,
    progress=None,
    partition: str = "auto",
    imbalance: float = 0.03,
    trace=None,
) -> dict | None:
    """Collective. ``C = A (+.x) B`` (B = A when ``second_spec`` is None) through the public path
    (:func:`sparsewire.distributed.distribute_and_plan_spgemm`: :func:`sparsewire.distribute`,
    :func:`sparsewire.plan_spgemm`); the result dict on rank 0.

    Timing: one untimed warm-up multiply, then ``repeat`` multiplies, each between barriers and
    timed as the slowest rank; each product is freed before the next multiply starts.
    ``bytes_moved`` is what MPI delivered to the ranks in one multiply
    (receive statuses; it should equal ``predicted_bytes``, predicted from counts before running);
    with ``compress`` the same messages' bytes uncoded (their integers decoded), and ``wire_bytes``
    what the receive statuses counted.
    ``peak_held_entries`` is the most stored entries any rank held at once inside the multiply;
    ``peak_rss_bytes`` the largest peak
    resident memory of any rank over the whole run. ``trace``: (folder or None, window, summary) of
    :func:`sparsewire.trace` over the warm-up (multiply 0) and the timed multiplies.
    """
    import contextlib
    import statistics

    from mpi4py import MPI

    from sparsewire import trace as trace_plan
    from sparsewire.comm.runtime import agree_on_error
    from sparsewire.distributed import distribute_and_plan_spgemm
    from sparsewire.profile.timed import timed_run
    from sparsewire.spgemm.compare import compare_products, reference_product
    from sparsewire.spgemm.distributed import peak_rss_bytes
    from sparsewire.spgemm.local import to_scipy

    rank = comm.Get_rank()
    a_global = load_on_root(comm, spec, values)
    b_global = a_global if second_spec is None else load_on_root(comm, second_spec, values)
    problem = None
    if rank == 0 and a_global.shape[1] != b_global.shape[0]:
        problem = (
            f"cannot multiply {a_global.shape[0]} x {a_global.shape[1]} by {b_global.shape[0]} x {b_global.shape[1]}: "
            "A's columns must equal B's rows"
        )
    agree_on_error(comm, problem)

    if progress and rank == 0:
        algorithm = options.algorithm
        progress(
            f"choosing among {algorithm} candidates"
            if algorithm == "auto" or options.strategy == "auto"
            else f"building {algorithm}"
        )
    a, b, plan, partition_reason = distribute_and_plan_spgemm(
        comm, a_global, b_global, second_spec is None, semiring, options, partition, imbalance
    )
    if progress and rank == 0 and partition_reason:
        progress(f"{partition_reason} ({a.partition_seconds:.2f} s)")
    if progress and rank == 0:
        progress(f"running {plan.algorithm} on a {plan.grid} grid")
    traced = contextlib.nullcontext()
    if trace is not None:  # (directory or None, window, summary): the warm-up is multiply 0
        name = f"trace-spgemm-{plan.algorithm.replace('/', '-')}.json"
        traced = trace_plan(plan, trace[0], window=trace[1], name=name, summary=trace[2])
    with traced as tracer:
        result = plan.multiply()  # warm-up
        received_before, payload_before = plan.bytes_received, plan.payload_bytes_received
        index_before = plan.index_bytes_received
        products = [result]

        def multiply():
            products[0] = plan.multiply()
            return products[0]

        # Each product is freed before the next multiply, untimed, as a C++ loop frees its C at the end of each turn
        # (python-graphblas would free it only at Python's cycle collector): the next one reuses its memory.
        timing = timed_run(comm, multiply, repeat, warmup=0, before=lambda: products[0].clear())
    result = timing.result if repeat else result
    times = timing.seconds
    wire = comm.allreduce(plan.bytes_received - received_before, op=MPI.SUM) // max(repeat, 1)
    moved = comm.allreduce(plan.payload_bytes_received - payload_before, op=MPI.SUM) // max(repeat, 1)
    index_wire, index_payload = (
        comm.allreduce(now - then, op=MPI.SUM) // max(repeat, 1) for now, then in zip(plan.index_bytes_received, index_before)
    )
    nnz_out = comm.allreduce(int(result.nvals), op=MPI.SUM)
    # float64 sum of the stored values; a boolean True counts 1
    checksum = comm.allreduce(float(to_scipy(result).data.sum(dtype=np.float64)), op=MPI.SUM)
    peak_held = comm.allreduce(plan.peak_held_entries, op=MPI.MAX)
    codec_passes = plan.codec_passes
    gathered = plan.gather(result) if check or output else None
    rss = peak_rss_bytes(comm)
    plan.close()
    if rank != 0:
        return None
    if output:

        def save(target: str) -> None:
            with atomic_write(target) as file:  # a file object: save_npz would add ".npz" to a name without it
                sp.save_npz(file, gathered)

        write_output(output, "--output", save)
    report = {
        "matrix": spec,
        "matrix2": second_spec,
        "shape": [int(a.shape[0]), int(b.shape[1])],
        "nnz_a": int(a.nnz),
        "nnz_b": int(b.nnz),
        "ranks": comm.Get_size(),
        "grid": str(plan.grid),
        "algorithm": plan.algorithm,
        "semiring": semiring.name,
        "semiring_facts": semiring.describe(),
        "values": values,
        "partition": a.partitioned_by,
        "partition_reason": partition_reason,
        "partition_seconds": a.partition_seconds,
        "phases": options.phases,
        "options": options.as_dict(),
        "repeat": repeat,
        "median_seconds": statistics.median(times) if times else None,
        "nnz_out": int(nnz_out),
        "checksum_sum": float(checksum),
        "bytes_moved": int(moved),
        "wire_bytes": int(wire),
        "index_bytes": int(index_payload),
        "index_wire_bytes": int(index_wire),
        "compress": options.compress,
        "compress_auto": plan.compress_choice,
        "codec_passes": codec_passes,
        "predicted_bytes": plan.predicted_bytes,
        "predicted_bytes_by_algorithm": plan.predicted_bytes_by_algorithm,
        "lower_bounds_only": plan.lower_bounds_only,
        "peak_held_entries": int(peak_held),
        "peak_rss_bytes": rss,
    }
    if output:
        report["output"] = output
    if trace is not None:
        report.update(trace_fields(tracer))
    if check:
        reference = reference_product(a_global, b_global, semiring)
        codec = (options.compress, codec_passes) if codec_passes else None
        report.update(compare_products(gathered, reference, a_global, b_global, semiring, codec))
    return report
