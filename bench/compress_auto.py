"""What ``compress="auto"`` costs where the wire is free (issue 43): on this machine every rank shares memory,
so auto must code nothing and run as fast as ``none``. Both run in the same process, taking turns.

    .venv/bin/python bench/compress_auto.py [--matrices M ...] [--codec bf16] [--k 32] [--mode overlap]
        [--instances 3] [--blocks 6] [--repeat 20]

Per matrix (default: every ../shared/data/*.mtx.gz) one ``mpiexec -n 2`` job plans the matrix ``--instances``
times per variant (``none`` and ``auto:CODEC``, fresh plans in alternating order: where a plan's arrays land
biases it by a percent or two) and lets the two take turns in ``--blocks`` blocks of ``--repeat`` multiplies
between barriers (the slowest rank's time); the entry's ratio auto / none is the median of the ratios within a
block, so the machine's drift hits both alike. The time of building an auto plan (the whole plan, its codec
measurement included) is reported apart. Also checks that auto coded nothing here (wire bytes = payload, from
MPI's receive statuses) and that C is bitwise the same. Prints per matrix the medians and the ratio, then the
geometric mean and the largest; writes bench/results/compress_auto.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, default_matrices, geometric_mean, short_name  # noqa: E402


def worker(matrix: str, codec: str, k: int, mode: str, instances: int, blocks: int, repeat: int) -> None:
    from mpi4py import MPI

    import sparsewire
    from sparsewire.exec.options import ExecOptions

    comm = MPI.COMM_WORLD
    distributed = sparsewire.distribute(comm, matrix)
    start, stop = distributed.col_partition.range(comm.Get_rank())
    b = np.random.default_rng(7).standard_normal((stop - start, k))
    variants = {"none": "none", "auto": f"auto:{codec}"}
    seconds = {name: [] for name in variants}
    build = []
    for instance in range(instances):
        order = list(variants) if instance % 2 == 0 else list(variants)[::-1]
        plans, outs = {}, {}
        for name in order:
            began = time.perf_counter()
            options = ExecOptions(strategy="joint", mode=mode, compress=variants[name])
            plans[name] = distributed.spmm_plan(k, options=options)
            if name == "auto":
                build.append(comm.allreduce(time.perf_counter() - began, op=MPI.MAX))
            outs[name] = sparsewire.empty_aligned((plans[name].output_rows, k), np.float64)

        def block(name: str) -> float:
            plan, out, times = plans[name], outs[name], []
            for _ in range(repeat):
                comm.Barrier()
                began = time.perf_counter()
                plan.multiply(b, out)
                times.append(comm.allreduce(time.perf_counter() - began, op=MPI.MAX))
            return statistics.median(times)

        for name in order:
            block(name)  # warm
        for index in range(blocks):
            for name in order if index % 2 == 0 else order[::-1]:
                seconds[name].append(block(name))
        payload = comm.allreduce(plans["auto"].bytes_received, op=MPI.SUM)
        wire = comm.allreduce(plans["auto"].wire_bytes_received, op=MPI.SUM)
        assert wire == payload, f"{matrix}: auto coded messages on shared memory ({wire} wire bytes of {payload})"
        assert np.array_equal(outs["none"], outs["auto"]), f"{matrix}: auto's C differs from none's"
        for plan in plans.values():
            plan.close()
    if comm.Get_rank() == 0:
        ratios = np.array(seconds["auto"]) / np.array(seconds["none"])
        entry = {name: float(np.median(values)) for name, values in seconds.items()}
        entry.update(matrix=short_name(matrix), ratio=float(np.median(ratios)), auto_build_seconds=float(np.median(build)))
        print(json.dumps(entry), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices([]), help="matrix files or generator specs")
    parser.add_argument("--codec", default="bf16", choices=["bf16", "fp16", "int8"], help="auto's codec (default: bf16)")
    parser.add_argument("--k", type=int, default=32, help="block width (default: 32)")
    parser.add_argument("--mode", default="overlap", help="executor mode (default: overlap)")
    parser.add_argument("--instances", type=int, default=3, help="fresh plans per variant (default: 3)")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per variant and plan (default: 6)")
    parser.add_argument("--repeat", type=int, default=20, help="multiplies per block (default: 20)")
    parser.add_argument("--worker", metavar="MATRIX", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.codec, args.k, args.mode, args.instances, args.blocks, args.repeat)
        return
    if min(args.k, args.instances, args.blocks, args.repeat) < 1:
        parser.error("--k, --instances, --blocks and --repeat must be at least 1")
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    entries = []
    print(f"{'matrix':<22} {'none ms':>9} {'auto ms':>9} {'auto/none':>10} {'auto plan build ms':>19}")
    for matrix in args.matrices:
        command = [mpiexec, "-n", "2", sys.executable, __file__, "--worker", matrix, "--codec", args.codec, "--k", str(args.k)]
        command += ["--mode", args.mode, "--instances", str(args.instances), "--blocks", str(args.blocks)]
        command += ["--repeat", str(args.repeat)]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT)
        if completed.returncode != 0:
            raise SystemExit(f"{short_name(matrix)} failed: {completed.stderr[-2000:]}")
        e = json.loads(completed.stdout.strip().splitlines()[-1])
        entries.append(e)
        print(
            f"{e['matrix']:<22} {e['none'] * 1e3:>9.3f} {e['auto'] * 1e3:>9.3f} {e['ratio']:>10.4f} "
            f"{e['auto_build_seconds'] * 1e3:>19.1f}",
            flush=True,
        )
    summary = {"geometric_mean": geometric_mean(e["ratio"] for e in entries), "largest": max(e["ratio"] for e in entries)}
    print(f"auto / none: geometric mean {summary['geometric_mean']:.4f}, largest {summary['largest']:.4f} (P = 2, shared memory)")
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "compress_auto.json").write_text(
        json.dumps({"codec": args.codec, "entries": entries, "summary": summary}, indent=1)
    )


if __name__ == "__main__":
    main()
