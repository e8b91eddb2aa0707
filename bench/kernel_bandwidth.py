"""The local CSR x dense kernel's achieved bandwidth against the machine's copy bandwidth, in one run.

    .venv/bin/python bench/kernel_bandwidth.py [--matrices M ...] [--ks 8,32,128] [--threads 1,2] [--orders original,rcm]

Copy bandwidth (bytes read + bytes written per second, a 256 MiB array, the same threads as the
kernel), two ways: ``memcpy`` (NumPy's ``copyto``, glibc's memcpy, one slice per thread) and a
threaded element loop (:func:`sparsewire.exec.kernels.copy`, like STREAM's Copy compiled without
streaming stores: each target line is read into the cache before it is written, so it moves three
bytes for every two it counts). The kernel is compared with the faster of the two ("of copy") and,
for comparison with earlier runs, with the loop ("of loop"). Kernel: ``C = A @ B`` into a
preallocated C, bytes = A once (values, column indices, row pointers, in the kernel's own types:
4-byte column indices) + B once + C once, per second: the rate if every byte crossed the memory
bus once. B and C start on cache lines, as the library allocates them (:mod:`sparsewire.aligned`).
The copies and the kernel run alternately, ``--repeat`` times each, and each configuration is
compared with the copies timed beside it: on a shared virtual machine the memory bandwidth drifts
(seen here: a 2-thread copy at 34 GB/s in one minute and 53 GB/s in the next). Matrices whose rows
reach B rows far apart read B rows several times from memory (the ratio is then below what a
reordering would give): ``--orders original,rcm`` also times the matrix in the order of
``--partition rcm`` (:mod:`sparsewire.partitioners`, rows and columns permuted alike), which keeps
the B rows a stretch of rows reads close together. SciPy's ``A @ B`` (allocating C) is timed beside
it. The ``prefetch`` column says whether the kernel prefetched B rows
(:data:`sparsewire.exec.kernels.PREFETCH_BELOW_ROW_NONZEROS`), ``streamed C`` whether it wrote C
with non-temporal stores (:func:`sparsewire.exec.kernels.streams`; C is aligned as the executor
allocates it). ``vs fixed halves``: the kernel's time over its time with each thread held to its
own row range (:data:`sparsewire.exec.kernels.CHUNKS_PER_THREAD`: the threads steal row chunks
from each other; timed alternately with the rest). Medians; writes bench/results/kernel_bandwidth.json.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, default_matrices, short_name  # noqa: E402

from sparsewire.aligned import empty_aligned  # noqa: E402
from sparsewire.exec import kernels  # noqa: E402
from sparsewire.generators import deterministic_dense  # noqa: E402
from sparsewire.io import load_matrix  # noqa: E402
from sparsewire.partitioners import partition  # noqa: E402
from sparsewire.report import format_table  # noqa: E402


def median_seconds(function, repeat: int) -> float:
    function()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


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


def memcpy_in_threads(source: np.ndarray, target: np.ndarray, pool: ThreadPoolExecutor, threads: int) -> None:
    """glibc's memcpy (``np.copyto``, which releases the GIL) on one slice per thread."""
    bounds = np.linspace(0, source.size, threads + 1).astype(np.int64)
    list(pool.map(lambda t: np.copyto(target[bounds[t] : bounds[t + 1]], source[bounds[t] : bounds[t + 1]]), range(threads)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrices", nargs="*", default=default_matrices(["stencil3d:40:27"]), help="matrix files or generator specs")
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
                # Each product follows a copy, which flushes the caches (512 MiB moved, L3 260 MiB here).
                seconds, loop_seconds, fixed_seconds, memcpy_seconds = alternating_medians(
                    [lambda: kernels.multiply(operand, b, out), lambda: kernels.copy(source, target, threads),
                     lambda: kernels.multiply(fixed, b, out), lambda: memcpy_in_threads(source, target, pools[threads], threads)], args.repeat
                )
                np.testing.assert_allclose(out, matrix @ b, rtol=1e-12, atol=1e-12)
                achieved, loop_bandwidth, memcpy_bandwidth = moved / seconds, 2 * source.nbytes / loop_seconds, 2 * source.nbytes / memcpy_seconds
                copy_bandwidth = max(loop_bandwidth, memcpy_bandwidth)
                streamed = kernels.streams(out)  # the library's own rule (out is aligned)
                entry = {"matrix": short_name(spec), "order": order, "k": k, "threads": threads, "prefetch": operand.prefetch, "streamed": streamed,
                         "seconds": seconds, "bytes": moved,
                         "achieved_bytes_per_second": achieved, "copy_bytes_per_second": copy_bandwidth,
                         "memcpy_bytes_per_second": memcpy_bandwidth, "loop_copy_bytes_per_second": loop_bandwidth,
                         "fraction_of_copy": achieved / copy_bandwidth, "fraction_of_loop_copy": achieved / loop_bandwidth,
                         "scipy_seconds": scipy_seconds, "fixed_halves_seconds": fixed_seconds}
                results.append(entry)
                rows.append([short_name(spec), order, k, threads, "yes" if operand.prefetch else "no", "yes" if streamed else "no", f"{seconds * 1e3:.3f}", f"{achieved / 1e9:.1f}",
                             f"{memcpy_bandwidth / 1e9:.1f}", f"{loop_bandwidth / 1e9:.1f}", f"{100 * entry['fraction_of_copy']:.0f}%",
                             f"{100 * entry['fraction_of_loop_copy']:.0f}%",
                             f"{seconds / fixed_seconds:.2f}", f"{scipy_seconds * 1e3:.3f}", f"{scipy_seconds / seconds:.1f}x"])
    print(format_table(["matrix", "order", "k", "threads", "prefetch", "streamed C", "kernel ms", "GB/s", "memcpy GB/s", "loop copy GB/s", "of copy", "of loop",
                        "vs fixed halves", "SciPy ms (1 thread)", "vs SciPy"], rows))
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "kernel_bandwidth.json").write_text(json.dumps({"results": results}, indent=1))


if __name__ == "__main__":
    main()
