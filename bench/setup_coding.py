"""What bit-packing the planner's setup all-to-all saves and costs (issue 43): each rank plans from its own rows
(``build_rank_plan_collective``, as ``plan_spmm`` does under mpiexec) plain and with ``code_setup``, taking turns
in one process. Plain, a flat strategy (``column``, ``row``, ``joint``) takes the flat planner (``plan/flat.py``:
32-bit columns and lengths, 64-bit values, written into the plan's arrays); coded, the records all-to-all, its
boxes bit-packed.

    .venv/bin/python bench/setup_coding.py [--matrices M ...] [--strategy joint] [--ranks 2] [--repeat 7]

Per matrix (default: every ../shared/data/*.mtx.gz) one ``mpiexec -n RANKS`` job builds the plan ``--repeat``
times per variant, alternating which goes first, each build between barriers and timed as the slowest rank.
Bytes: what each exchange delivered, summed over the ranks (the receive counts of the ``Alltoallv``): plain, and
coded, with the coded boxes as int64 words beside them. Checks that the two plans are equal field for field.
Prints per matrix the bytes, the ratios coded / words and coded / plain, the median build times and their ratio,
then the geometric means; writes bench/results/setup_coding.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, default_matrices, geometric_mean, run_json, short_name  # noqa: E402


def worker(matrix: str, strategy: str, repeat: int) -> None:
    from mpi4py import MPI

    import sparsewire
    from sparsewire.plan import build_rank_plan_collective

    comm = MPI.COMM_WORLD
    a = sparsewire.distribute(comm, matrix)

    def build(coded: bool):
        comm.Barrier()
        began = time.perf_counter()
        plan = build_rank_plan_collective(comm, a.local_rows, a.row_partition, a.col_partition, strategy, code_setup=coded)
        return plan, comm.allreduce(time.perf_counter() - began, op=MPI.MAX)

    seconds = {False: [], True: []}
    plans = {}
    for coded in (False, True):
        build(coded)  # warm: the compiled kernels load once
    for index in range(repeat):
        for coded in (False, True) if index % 2 == 0 else (True, False):
            plans[coded], elapsed = build(coded)
            seconds[coded].append(elapsed)
    assert plans[True].equals(plans[False]), f"{matrix}: the coded all-to-all gave another plan"
    wire, words = (comm.allreduce(int(v), op=MPI.SUM) for v in plans[True].setup_exchange_bytes)
    plain_wire, plain_words = (comm.allreduce(int(v), op=MPI.SUM) for v in plans[False].setup_exchange_bytes)
    assert plain_wire == plain_words, (plain_wire, plain_words)
    if comm.Get_rank() == 0:
        entry = {"matrix": short_name(matrix), "plain_bytes": plain_wire, "words_bytes": words, "coded_bytes": wire}
        entry.update(bytes_ratio=wire / words, coded_plain_ratio=wire / plain_wire)
        entry.update(plain_seconds=statistics.median(seconds[False]), coded_seconds=statistics.median(seconds[True]))
        entry["time_ratio"] = statistics.median(c / p for c, p in zip(seconds[True], seconds[False]))
        print(json.dumps(entry), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--strategy", default="joint", help="the plan's strategy (default: joint)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks (default: 2, this machine's cores)")
    parser.add_argument("--repeat", type=int, default=7, help="timed builds per variant (default: 7)")
    parser.add_argument("--worker", metavar="MATRIX", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.strategy, args.repeat)
        return
    if min(args.ranks, args.repeat) < 1:
        parser.error("--ranks and --repeat must be at least 1")
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    entries = []
    print(
        f"{'matrix':<22} {'plain':>12} {'words':>12} {'coded':>10} {'c/words':>8} {'c/plain':>8} "
        f"{'plain ms':>9} {'coded ms':>9} {'time ratio':>10}"
    )
    for matrix in args.matrices:
        command = [mpiexec, "-n", str(args.ranks), sys.executable, __file__, "--worker", matrix]
        command += ["--strategy", args.strategy, "--repeat", str(args.repeat)]
        e = run_json(command, timeout=3600, cwd=ROOT)
        entries.append(e)
        print(
            f"{e['matrix']:<22} {e['plain_bytes']:>12,} {e['words_bytes']:>12,} {e['coded_bytes']:>10,} "
            f"{e['bytes_ratio']:>8.4f} {e['coded_plain_ratio']:>8.4f} "
            f"{e['plain_seconds'] * 1e3:>9.1f} {e['coded_seconds'] * 1e3:>9.1f} {e['time_ratio']:>10.4f}",
            flush=True,
        )
    summary = {
        "bytes_ratio": geometric_mean(e["bytes_ratio"] for e in entries),
        "coded_plain_ratio": geometric_mean(e["coded_plain_ratio"] for e in entries),
        "time_ratio": geometric_mean(e["time_ratio"] for e in entries),
        "largest_time_ratio": max(e["time_ratio"] for e in entries),
    }
    print(
        f"coded / words: bytes {summary['bytes_ratio']:.4f}; coded / plain: bytes {summary['coded_plain_ratio']:.4f}, "
        f"build time {summary['time_ratio']:.4f} (geometric means; "
        f"largest time ratio {summary['largest_time_ratio']:.4f}; P = {args.ranks}, {args.strategy})"
    )
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "setup_coding.json").write_text(
        json.dumps({"strategy": args.strategy, "entries": entries, "summary": summary}, indent=1)
    )


if __name__ == "__main__":
    main()
