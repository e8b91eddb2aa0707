"""The local CSR x dense kernel's achieved bandwidth against the machine's copy bandwidth, in one run.

    .venv/bin/python bench/kernels/kernel_bandwidth.py [--matrices M ...] [--ks 8,32,128] [--threads 1,2] [--orders original,rcm]

Copy bandwidth (bytes read + bytes written per second, a 256 MiB array, the same threads as the
kernel), two ways: ``memcpy`` (NumPy's ``copyto``, glibc's memcpy, one slice per thread) and a
threaded element loop (:func:`sparsewire.kernels.compiled.copy`, like STREAM's Copy compiled without
streaming stores: each target line is read into the cache before it is written, so it moves three
bytes for every two it counts). The kernel is compared with the faster of the two ("of copy") and,
for comparison with earlier runs, with the loop ("of loop"). Kernel: ``C = A @ B`` into a
preallocated C, bytes = A once (values, column indices, row pointers, in the kernel's own types:
4-byte column indices) + B once + C once, per second: the rate if every byte crossed the memory
bus once. B and C start on cache lines, as the library allocates them (:mod:`sparsewire._lib.aligned`).
The copies and the kernel run alternately, ``--repeat`` times each, and each configuration is
compared with the copies timed beside it: on a shared virtual machine the memory bandwidth drifts
(seen here: a 2-thread copy at 34 GB/s in one minute and 53 GB/s in the next). Matrices whose rows
reach B rows far apart read B rows several times from memory (the ratio is then below what a
reordering would give): ``--orders original,rcm`` also times the matrix in the order of
``--partition rcm`` (:mod:`sparsewire.partition`, rows and columns permuted alike), which keeps
the B rows a stretch of rows reads close together. SciPy's ``A @ B`` (allocating C) is timed beside
it. The ``prefetch`` column says whether the kernel prefetched B rows
(:data:`sparsewire.kernels.compiled.PREFETCH_BELOW_ROW_NONZEROS`), ``streamed C`` whether it wrote C
with non-temporal stores (:func:`sparsewire.kernels.compiled.streams`; C is aligned as the executor
allocates it). ``vs fixed halves``: the kernel's time over its time with each thread held to its
own row range (:data:`sparsewire.kernels.compiled.CHUNKS_PER_THREAD`: the threads steal row chunks
from each other; timed alternately with the rest).

Two more times per configuration. ``B reads``: a loop that reads only the B rows the nonzeros name,
in the kernel's order, chunks and prefetches, and nothing else (no A values, no C), timed
alternately with the rest after a copy: no kernel that walks the rows in this order and reads each
nonzero's B row can beat it, so ``ceiling`` (the bytes above over that time, against the copy) is
the most "of copy" any such kernel could show for that matrix in that order. ``warm``: the kernel
repeated back to back, A, B and C left in the caches by the run before, as an iterative solver runs
it on a problem that fits in L3 (and as a product timed in a loop usually is); "warm of copy" is
against the same copy bandwidth. After the table, one line per order, k and thread count:
geometric means over the matrices and how many reach 60% of the copy. Medians; writes
bench/results/kernel_bandwidth.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, default_matrices, median_seconds, short_name  # noqa: E402

from sparsewire import empty_aligned  # noqa: E402
from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.kernels import compiled as kernels  # noqa: E402
from sparsewire.kernels import read_b_rows, read_b_rows_scratch  # noqa: E402
from sparsewire.partition import partition  # noqa: E402
from sparsewire.profile import format_table  # noqa: E402
from sparsewire.testing import deterministic_dense  # noqa: E402


def alternating_medians(functions, repeat: int) -> list[float]:
    """Median seconds of each function, run in turn ``repeat`` times (after one warm-up each)."""
    for function in functions:
        function()
    times = [[] for _ in functions]
    for _ in range(repeat):
        for function, sink in zip(functions, times):
            started = time.perf_counter()
            function()
            sink.append(time.perf_counter() - started)
    return [float(np.median(sink)) for sink in times]


def geometric_mean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def memcpy_in_threads(source: np.ndarray, target: np.ndarray, pool: ThreadPoolExecutor, threads: int) -> None:
    """glibc's memcpy (``np.copyto``, which releases the GIL) on one slice per thread."""
    bounds = np.linspace(0, source.size, threads + 1).astype(np.int64)
    list(pool.map(lambda t: np.copyto(target[bounds[t] : bounds[t + 1]], source[bounds[t] : bounds[t + 1]]), range(threads)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--matrices", nargs="*", default=default_matrices(["stencil3d:40:27"]), help="matrix files or generator specs"
    )
    parser.add_argument("--ks", default="8,32,128", help="block widths (default: 8,32,128)")
    parser.add_argument("--threads", default="1,2", help="thread counts (default: 1,2)")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs (default: 10)")
    parser.add_argument("--orders", default="original", help="original and/or rcm (default: original)")
    args = parser.parse_args()
    ks = [int(v) for v in args.ks.split(",")]
    thread_counts = [int(v) for v in args.threads.split(",")]
    source = np.ones(32 * 1024 * 1024)
    target = np.empty_like(source)
    pools = {threads: ThreadPoolExecutor(threads) for threads in thread_counts}
    results, rows = [], []
    orders = [o.strip() for o in args.orders.split(",")]
    for spec, order in [(spec, order) for spec in args.matrices for order in orders]:
        matrix = load_matrix(spec)
        if order == "rcm":
            matrix = partition(matrix, 1, "rcm").permute(matrix)
        n_rows, n_cols = matrix.shape
        for k in ks:
            b = deterministic_dense(0, n_cols, k)  # rows on cache lines, as the library allocates B
            out = empty_aligned((n_rows, k), np.float64)  # as the executor allocates C
            scipy_seconds = median_seconds(lambda: matrix @ b, max(3, args.repeat // 3))
            for threads in thread_counts:
                kernels.set_threads(threads)
                operand = kernels.CsrOperand.from_matrix(matrix, np.float64, threads)
                # The bytes the kernel must read and write: its own index and value arrays, B, C.
                moved = operand.indptr.nbytes + operand.indices.nbytes + operand.data.nbytes + b.nbytes + out.nbytes
                # The same product with each thread held to its own half (one chunk per thread, nothing left to steal).
                fixed = dataclasses.replace(operand, chunks=operand.bounds)
                sink, claimed = read_b_rows_scratch(operand)
                # Each product (and the B reads) follows a copy, which flushes the caches (512 MiB moved, L3 260 MiB here).
                seconds, loop_seconds, fixed_seconds, memcpy_seconds, floor_seconds, _ = alternating_medians(
                    [
                        lambda: kernels.multiply(operand, b, out),
                        lambda: kernels.copy(source, target, threads),
                        lambda: kernels.multiply(fixed, b, out),
                        lambda: memcpy_in_threads(source, target, pools[threads], threads),
                        lambda: read_b_rows(operand, b, sink, claimed),
                        lambda: kernels.copy(source, target, threads),
                    ],
                    args.repeat,
                )
                # Warm: the product repeated back to back, A, B and C left in the caches by the run before
                # (an iterative solver's multiplies on a problem that fits in L3).
                warm_seconds = median_seconds(lambda: kernels.multiply(operand, b, out), args.repeat)
                np.testing.assert_allclose(out, matrix @ b, rtol=1e-12, atol=1e-12)
                # The B reads must have read every nonzero's B row once: their sums add up to B's row sums, each
                # times the count of its column.
                sink[:] = 0
                read_b_rows(operand, b, sink, claimed)
                expected = float(b.sum(axis=1) @ np.bincount(operand.indices, minlength=n_cols))
                np.testing.assert_allclose(sink.sum(), expected, rtol=1e-9, atol=1e-6 * max(1.0, abs(expected)))
                achieved, loop_bandwidth, memcpy_bandwidth = (
                    moved / seconds,
                    2 * source.nbytes / loop_seconds,
                    2 * source.nbytes / memcpy_seconds,
                )
                copy_bandwidth = max(loop_bandwidth, memcpy_bandwidth)
                streamed = kernels.streams(out)  # the library's own rule (out is aligned)
                entry = {
                    "matrix": short_name(spec),
                    "order": order,
                    "k": k,
                    "threads": threads,
                    "prefetch": operand.prefetch,
                    "streamed": streamed,
                    "seconds": seconds,
                    "bytes": moved,
                    "achieved_bytes_per_second": achieved,
                    "copy_bytes_per_second": copy_bandwidth,
                    "memcpy_bytes_per_second": memcpy_bandwidth,
                    "loop_copy_bytes_per_second": loop_bandwidth,
                    "fraction_of_copy": achieved / copy_bandwidth,
                    "fraction_of_loop_copy": achieved / loop_bandwidth,
                    "scipy_seconds": scipy_seconds,
                    "fixed_halves_seconds": fixed_seconds,
                    "b_reads_seconds": floor_seconds,
                    "ceiling_fraction_of_copy": moved / floor_seconds / copy_bandwidth,
                    "warm_seconds": warm_seconds,
                    "warm_fraction_of_copy": moved / warm_seconds / copy_bandwidth,
                }
                results.append(entry)
                rows.append(
                    [
                        short_name(spec),
                        order,
                        k,
                        threads,
                        "yes" if operand.prefetch else "no",
                        "yes" if streamed else "no",
                        f"{seconds * 1e3:.3f}",
                        f"{achieved / 1e9:.1f}",
                        f"{memcpy_bandwidth / 1e9:.1f}",
                        f"{loop_bandwidth / 1e9:.1f}",
                        f"{100 * entry['fraction_of_copy']:.0f}%",
                        f"{100 * entry['fraction_of_loop_copy']:.0f}%",
                        f"{floor_seconds * 1e3:.3f}",
                        f"{100 * entry['ceiling_fraction_of_copy']:.0f}%",
                        f"{warm_seconds * 1e3:.3f}",
                        f"{100 * entry['warm_fraction_of_copy']:.0f}%",
                        f"{seconds / fixed_seconds:.2f}",
                        f"{scipy_seconds * 1e3:.3f}",
                        f"{scipy_seconds / seconds:.1f}x",
                    ]
                )
    print(
        format_table(
            [
                "matrix",
                "order",
                "k",
                "threads",
                "prefetch",
                "streamed C",
                "kernel ms",
                "GB/s",
                "memcpy GB/s",
                "loop copy GB/s",
                "of copy",
                "of loop",
                "B reads ms",
                "ceiling",
                "warm ms",
                "warm of copy",
                "vs fixed halves",
                "SciPy ms (1 thread)",
                "vs SciPy",
            ],
            rows,
        )
    )
    summary = []
    for key in dict.fromkeys((e["order"], e["k"], e["threads"]) for e in results):
        group = [e for e in results if (e["order"], e["k"], e["threads"]) == key]
        summary.append(
            [
                *key,
                len(group),
                f"{100 * geometric_mean([e['fraction_of_copy'] for e in group]):.1f}%",
                f"{sum(e['fraction_of_copy'] >= 0.6 for e in group)} of {len(group)}",
                f"{100 * geometric_mean([e['fraction_of_loop_copy'] for e in group]):.1f}%",
                f"{100 * geometric_mean([e['ceiling_fraction_of_copy'] for e in group]):.1f}%",
                f"{100 * geometric_mean([e['warm_fraction_of_copy'] for e in group]):.1f}%",
                f"{sum(e['warm_fraction_of_copy'] >= 0.6 for e in group)} of {len(group)}",
                f"{geometric_mean([e['seconds'] / e['fixed_halves_seconds'] for e in group]):.3f}",
            ]
        )
    print()
    print(
        format_table(
            [
                "order",
                "k",
                "threads",
                "matrices",
                "of copy (geometric mean)",
                "at >= 60% of copy",
                "of loop (geometric mean)",
                "ceiling (geometric mean)",
                "warm of copy (geometric mean)",
                "warm at >= 60%",
                "vs fixed halves (geometric mean)",
            ],
            summary,
        )
    )
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kernel_bandwidth.json").write_text(json.dumps({"results": results}, indent=1))


if __name__ == "__main__":
    main()
