"""What the optional machinery costs, one probe per subcommand, each in one run:

* ``trace``: the profiling views. Per matrix, mode and k at P = 2, the median time per multiply
  untraced, with the summary only (``sparsewire.trace(plan)``: counts and times per phase) and with
  the full trace (``sparsewire.trace(plan, DIR)``: every event), ``--rounds`` times in a rotating
  order, each variant's fastest median kept; ratios summary / untraced and trace / untraced, their
  geometric means over all entries and over those of 10 ms or more.
* ``compress-auto``: ``compress="auto"`` where the wire is free (P = 2 on one machine: shared memory),
  beside ``none`` in one process: fresh plans per instance, the two taking turns in blocks of
  multiplies; auto / none per matrix (the median of the per-block ratios), its geometric mean and the
  largest; checks that auto coded nothing (wire bytes = payload, from MPI's receive statuses) and that
  C is bitwise the same.
* ``codec-rates``: encode and decode rates of bf16, fp16 and int8 in GB/s of payload, one core, for a
  message of ``--rows`` x ``--k`` standard normal float64 entries (what ``compress="auto"`` weighs
  against a link's bandwidth).
* ``setup-coding``: the planner's setup exchange plain (the flat planner's arrays) and bit-packed
  (``code_setup``: the records all-to-all), each rank planning from its own rows, the two taking turns
  in one process: bytes delivered, ratios, median build times; checks the two plans are equal.

    .venv/bin/python bench/overhead.py trace [--matrices M ...] [--modes overlap,bulk,early] [--ks 32]
    .venv/bin/python bench/overhead.py compress-auto [--matrices M ...] [--codec bf16] [--k 32]
    .venv/bin/python bench/overhead.py codec-rates [--rows 4096] [--k 32] [--repeat 20]
    .venv/bin/python bench/overhead.py setup-coding [--matrices M ...] [--strategy joint] [--ranks 2]

Matrices default to every ../shared/data/*.mtx.gz. Each probe writes bench/results/PROBE.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, default_matrices, geometric_mean, job, run_json, short_name  # noqa: E402

TRACE_VARIANTS = ("untraced", "summary", "trace")
CODED = ("bf16", "fp16", "int8")


def _slowest_rank_median(comm, run_one, repeat: int) -> float:
    """Collective. Median over ``repeat`` calls of ``run_one`` between barriers, each the slowest rank's time."""
    from mpi4py import MPI

    times = []
    for _ in range(repeat):
        comm.Barrier()
        started = time.perf_counter()
        run_one()
        times.append(comm.allreduce(time.perf_counter() - started, op=MPI.MAX))
    return statistics.median(times)


def trace_worker(args) -> None:
    from mpi4py import MPI

    import sparsewire

    comm = MPI.COMM_WORLD
    distributed = sparsewire.distribute(comm, args.worker)
    start, stop = distributed.col_partition.range(comm.Get_rank())
    folder = comm.bcast(tempfile.mkdtemp(prefix="sparsewire-overhead-") if comm.Get_rank() == 0 else None)
    entries = []
    for mode in args.modes.split(","):
        for k in [int(k) for k in args.ks.split(",")]:
            with distributed.spmm_plan(k, strategy="joint", mode=mode) as plan:
                b = np.ones((stop - start, k))
                out = sparsewire.empty_aligned((plan.output_rows, k), np.float64)
                plan.multiply(b, out)  # compiles, connects
                best = dict.fromkeys(TRACE_VARIANTS, float("inf"))
                for round_index in range(args.rounds):
                    for variant in TRACE_VARIANTS[round_index % 3 :] + TRACE_VARIANTS[: round_index % 3]:
                        if variant == "untraced":
                            seconds = _slowest_rank_median(comm, lambda: plan.multiply(b, out), args.repeat)
                        else:
                            directory = folder if variant == "trace" else None
                            with sparsewire.trace(plan, directory, name=f"{mode}-{k}.json", summary=False):
                                seconds = _slowest_rank_median(comm, lambda: plan.multiply(b, out), args.repeat)
                        best[variant] = min(best[variant], seconds)
                entries.append({"matrix": short_name(args.worker), "mode": mode, "k": k, **best})
    if comm.Get_rank() == 0:
        print(json.dumps({"entries": entries}), flush=True)


def trace_report(args, results: list[dict]) -> dict:
    entries = [e for result in results for e in result["entries"]]
    print(
        f"{'matrix':<22} {'mode':<8} {'k':>4} {'untraced ms':>12} {'summary ms':>11} {'trace ms':>9} "
        f"{'summary/off':>12} {'trace/off':>10}"
    )
    for e in entries:
        e["summary_ratio"], e["trace_ratio"] = e["summary"] / e["untraced"], e["trace"] / e["untraced"]
        print(
            f"{e['matrix']:<22} {e['mode']:<8} {e['k']:>4} {e['untraced'] * 1e3:>12.3f} {e['summary'] * 1e3:>11.3f} "
            f"{e['trace'] * 1e3:>9.3f} {e['summary_ratio']:>12.3f} {e['trace_ratio']:>10.3f}"
        )
    long = [e for e in entries if e["untraced"] >= 0.010]
    summary = {
        "summary_over_untraced": geometric_mean(e["summary_ratio"] for e in entries),
        "trace_over_untraced": geometric_mean(e["trace_ratio"] for e in entries),
        "entries_of_10ms_or_more": len(long),
        "summary_over_untraced_10ms_or_more": geometric_mean(e["summary_ratio"] for e in long),
        "trace_over_untraced_10ms_or_more": geometric_mean(e["trace_ratio"] for e in long),
    }
    print(
        f"geometric means: summary / untraced {summary['summary_over_untraced']:.4f}, trace / untraced "
        f"{summary['trace_over_untraced']:.4f}; where a multiply takes 10 ms or more ({len(long)} entries): summary "
        f"{summary['summary_over_untraced_10ms_or_more']:.4f}, trace {summary['trace_over_untraced_10ms_or_more']:.4f}"
    )
    return {"entries": entries, "summary": summary}


def compress_auto_worker(args) -> None:
    from mpi4py import MPI

    import sparsewire

    comm = MPI.COMM_WORLD
    distributed = sparsewire.distribute(comm, args.worker)
    start, stop = distributed.col_partition.range(comm.Get_rank())
    b = np.random.default_rng(7).standard_normal((stop - start, args.k))
    variants = {"none": "none", "auto": f"auto:{args.codec}"}
    seconds = {name: [] for name in variants}
    build = []
    for instance in range(args.instances):
        order = list(variants) if instance % 2 == 0 else list(variants)[::-1]
        plans, outs = {}, {}
        for name in order:  # fresh plans in alternating order: where a plan's arrays land biases it slightly
            began = time.perf_counter()
            options = sparsewire.ExecOptions(strategy="joint", mode=args.mode, compress=variants[name])
            plans[name] = distributed.spmm_plan(args.k, options=options)
            if name == "auto":  # the whole plan, its codec measurement included
                build.append(comm.allreduce(time.perf_counter() - began, op=MPI.MAX))
            outs[name] = sparsewire.empty_aligned((plans[name].output_rows, args.k), np.float64)
        for name in order:
            _slowest_rank_median(comm, lambda: plans[name].multiply(b, outs[name]), args.repeat)  # warm
        for index in range(args.blocks):
            for name in order if index % 2 == 0 else order[::-1]:
                seconds[name].append(_slowest_rank_median(comm, lambda: plans[name].multiply(b, outs[name]), args.repeat))
        payload = comm.allreduce(plans["auto"].bytes_received, op=MPI.SUM)
        wire = comm.allreduce(plans["auto"].wire_bytes_received, op=MPI.SUM)
        assert wire == payload, f"{args.worker}: auto coded messages on shared memory ({wire} wire bytes of {payload})"
        assert np.array_equal(outs["none"], outs["auto"]), f"{args.worker}: auto's C differs from none's"
        for plan in plans.values():
            plan.close()
    if comm.Get_rank() == 0:
        ratios = np.array(seconds["auto"]) / np.array(seconds["none"])
        entry = {name: float(np.median(values)) for name, values in seconds.items()}
        entry.update(matrix=short_name(args.worker), ratio=float(np.median(ratios)), auto_build_seconds=float(np.median(build)))
        print(json.dumps(entry), flush=True)


def compress_auto_report(args, entries: list[dict]) -> dict:
    print(f"{'matrix':<22} {'none ms':>9} {'auto ms':>9} {'auto/none':>10} {'auto plan build ms':>19}")
    for e in entries:
        print(
            f"{e['matrix']:<22} {e['none'] * 1e3:>9.3f} {e['auto'] * 1e3:>9.3f} {e['ratio']:>10.4f} "
            f"{e['auto_build_seconds'] * 1e3:>19.1f}"
        )
    summary = {"geometric_mean": geometric_mean(e["ratio"] for e in entries), "largest": max(e["ratio"] for e in entries)}
    print(f"auto / none: geometric mean {summary['geometric_mean']:.4f}, largest {summary['largest']:.4f} (P = 2, shared memory)")
    return {"codec": args.codec, "entries": entries, "summary": summary}


def codec_rates(args) -> dict:
    from sparsewire.wire import decode, encode, max_message_bytes

    rng = np.random.default_rng(1)
    rows = rng.standard_normal((args.rows, args.k))
    rates = {}
    for name in CODED:
        wire = np.zeros(max_message_bytes(name, args.rows, args.k, 8), np.uint8)
        out = np.empty_like(rows)
        decode(name, wire[: encode(name, rows, wire, rng)], out)  # compiles
        encoded, decoded = [], []
        for _ in range(args.repeat):
            began = time.perf_counter()
            size = encode(name, rows, wire, rng)
            encoded.append(time.perf_counter() - began)
            began = time.perf_counter()
            decode(name, wire[:size], out)
            decoded.append(time.perf_counter() - began)
        rates[name] = {"encode": rows.nbytes / float(np.median(encoded)), "decode": rows.nbytes / float(np.median(decoded))}
    print(f"{args.rows} x {args.k} float64 rows, GB/s of payload, one core")
    for name, rate in rates.items():
        print(f"{name:<5} encode {rate['encode'] / 1e9:6.2f}  decode {rate['decode'] / 1e9:6.2f}")
    return {"rows": args.rows, "k": args.k, "rates": rates}


def setup_coding_worker(args) -> None:
    from mpi4py import MPI

    import sparsewire
    from sparsewire.plan import build_rank_plan_collective

    comm = MPI.COMM_WORLD
    a = sparsewire.distribute(comm, args.worker)

    def build(coded: bool):
        comm.Barrier()
        began = time.perf_counter()
        plan = build_rank_plan_collective(comm, a.local_rows, a.row_partition, a.col_partition, args.strategy, code_setup=coded)
        return plan, comm.allreduce(time.perf_counter() - began, op=MPI.MAX)

    seconds = {False: [], True: []}
    plans = {}
    for coded in (False, True):
        build(coded)  # warm: the compiled kernels load once
    for index in range(args.repeat):
        for coded in (False, True) if index % 2 == 0 else (True, False):
            plans[coded], elapsed = build(coded)
            seconds[coded].append(elapsed)
    assert plans[True].equals(plans[False]), f"{args.worker}: the coded all-to-all gave another plan"
    wire, words = (comm.allreduce(int(v), op=MPI.SUM) for v in plans[True].setup_exchange_bytes)
    plain_wire, plain_words = (comm.allreduce(int(v), op=MPI.SUM) for v in plans[False].setup_exchange_bytes)
    assert plain_wire == plain_words, (plain_wire, plain_words)
    if comm.Get_rank() == 0:
        entry = {"matrix": short_name(args.worker), "plain_bytes": plain_wire, "words_bytes": words, "coded_bytes": wire}
        entry.update(bytes_ratio=wire / words, coded_plain_ratio=wire / plain_wire)
        entry.update(plain_seconds=statistics.median(seconds[False]), coded_seconds=statistics.median(seconds[True]))
        entry["time_ratio"] = statistics.median(c / p for c, p in zip(seconds[True], seconds[False]))
        print(json.dumps(entry), flush=True)


def setup_coding_report(args, entries: list[dict]) -> dict:
    print(
        f"{'matrix':<22} {'plain':>12} {'words':>12} {'coded':>10} {'c/words':>8} {'c/plain':>8} "
        f"{'plain ms':>9} {'coded ms':>9} {'time ratio':>10}"
    )
    for e in entries:
        print(
            f"{e['matrix']:<22} {e['plain_bytes']:>12,} {e['words_bytes']:>12,} {e['coded_bytes']:>10,} "
            f"{e['bytes_ratio']:>8.4f} {e['coded_plain_ratio']:>8.4f} "
            f"{e['plain_seconds'] * 1e3:>9.1f} {e['coded_seconds'] * 1e3:>9.1f} {e['time_ratio']:>10.4f}"
        )
    summary = {
        "bytes_ratio": geometric_mean(e["bytes_ratio"] for e in entries),
        "coded_plain_ratio": geometric_mean(e["coded_plain_ratio"] for e in entries),
        "time_ratio": geometric_mean(e["time_ratio"] for e in entries),
        "largest_time_ratio": max(e["time_ratio"] for e in entries),
    }
    print(
        f"coded / words: bytes {summary['bytes_ratio']:.4f}; coded / plain: bytes {summary['coded_plain_ratio']:.4f}, "
        f"build time {summary['time_ratio']:.4f} (geometric means; largest time ratio {summary['largest_time_ratio']:.4f}; "
        f"P = {args.ranks}, {args.strategy})"
    )
    return {"strategy": args.strategy, "entries": entries, "summary": summary}


#: Per probe: (its worker under mpiexec, its report over the workers' results, the worker's own arguments).
MPI_PROBES = {
    "trace": (trace_worker, trace_report, ("modes", "ks", "repeat", "rounds")),
    "compress-auto": (compress_auto_worker, compress_auto_report, ("codec", "k", "mode", "instances", "blocks", "repeat")),
    "setup-coding": (setup_coding_worker, setup_coding_report, ("strategy", "repeat")),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    probes = parser.add_subparsers(dest="probe", required=True, metavar="PROBE")
    trace = probes.add_parser("trace", help="what the summary and the full trace cost (P = 2)")
    trace.add_argument("--modes", default="overlap,bulk,early", help="executor modes (default: overlap,bulk,early)")
    trace.add_argument("--ks", default="32", help="block widths (default: 32)")
    trace.add_argument("--repeat", type=int, default=20, help="multiplies per median (default: 20)")
    trace.add_argument("--rounds", type=int, default=3, help="rounds of the three variants (default: 3)")
    auto = probes.add_parser("compress-auto", help="compress=auto beside none where the wire is free (P = 2)")
    auto.add_argument("--codec", default="bf16", choices=CODED, help="auto's codec (default: bf16)")
    auto.add_argument("--k", type=int, default=32, help="block width (default: 32)")
    auto.add_argument("--mode", default="overlap", help="executor mode (default: overlap)")
    auto.add_argument("--instances", type=int, default=3, help="fresh plans per variant (default: 3)")
    auto.add_argument("--blocks", type=int, default=6, help="blocks per variant and plan (default: 6)")
    auto.add_argument("--repeat", type=int, default=20, help="multiplies per block (default: 20)")
    rates = probes.add_parser("codec-rates", help="encode and decode rates of the payload codecs (one core)")
    rates.add_argument("--rows", type=int, default=4096, help="rows per message (default: 4096)")
    rates.add_argument("--k", type=int, default=32, help="entries per row (default: 32)")
    rates.add_argument("--repeat", type=int, default=20, help="timed round trips (default: 20)")
    setup = probes.add_parser("setup-coding", help="the planner's setup exchange plain and bit-packed")
    setup.add_argument("--strategy", default="joint", help="the plan's strategy (default: joint)")
    setup.add_argument("--ranks", type=int, default=2, help="ranks (default: 2, this machine's cores)")
    setup.add_argument("--repeat", type=int, default=7, help="timed builds per variant (default: 7)")
    for probe in (trace, auto, setup):
        probe.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
        probe.add_argument("--worker", metavar="MATRIX", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = build_parser().parse_args()
    if args.probe == "codec-rates":
        result = codec_rates(args)
    else:
        worker, report, own = MPI_PROBES[args.probe]
        if args.worker:
            worker(args)
            return
        ranks = getattr(args, "ranks", 2)
        results = []
        for matrix in args.matrices:
            print(f"{args.probe}: {short_name(matrix)} ...", file=sys.stderr, flush=True)
            command = job(ranks, __file__, args.probe, "--worker", matrix)
            for name in own:
                command += [f"--{name}", str(getattr(args, name))]
            results.append(run_json(command, timeout=3600, cwd=ROOT))
        result = report(args, results)
    folder = ROOT / "bench" / "results"
    folder.mkdir(exist_ok=True)
    (folder / f"{args.probe.replace('-', '_')}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
