"""The compute calibration: the local SpMM rate of this machine, for the simulator's compute model.

:func:`measure_compute_rate` times the executor's CSR x dense kernel; ``sparsewire calibrate``
stores the record (kind ``compute``) at :func:`default_calibration_path` in the calibration cache
(:mod:`sparsewire.topology.records`) and ``sparsewire simulate`` reads it (:func:`load_compute_rate`).
:func:`measure_rows_rate` times the same kernel on the rows of the matrix a job multiplies, every rank at once
(the planner's local rate for that matrix, :meth:`~sparsewire.topology.model.Topology.with_local_rate`).
"""

from __future__ import annotations

import functools
import os
import platform
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.topology.records import read_record, record_path, stamp

__all__ = [
    "COMPUTE_KIND",
    "measure_compute_rate",
    "measure_rows_rate",
    "rate_over",
    "rates_together",
    "kernel_products",
    "kernel_operand",
    "kernel_block",
    "benchmark_matrix",
    "default_calibration_path",
    "load_compute_rate",
]

#: The ``kind`` of a compute calibration record.
COMPUTE_KIND = "compute"


def default_calibration_path() -> Path:
    """Not collective. Where ``sparsewire calibrate`` writes and ``simulate`` reads the measured compute
    rate: ``compute.json`` in :func:`~sparsewire.topology.records.cache_directory`."""
    return record_path(COMPUTE_KIND)


def load_compute_rate(path: str | os.PathLike) -> float:
    """Not collective. The compute rate (nonzero-columns per second) stored at ``path``.

    Raises:
        InputError naming the file and the command that writes a good one.
    """
    rerun = f"rerun 'sparsewire calibrate --output {path}'"
    rate = read_record(path, COMPUTE_KIND, rerun).get("compute_rate")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not np.isfinite(rate) or rate <= 0:
        raise InputError(f"{path}: compute_rate must be a positive number (got {rate!r}); {rerun}")
    return float(rate)


#: The matrix the compute calibrations time the kernel on.
BENCHMARK_MATRIX = "rmat:16:8:1"


def kernel_operand(matrix: sp.sparray, dtype=np.float64, threads: int = 1, ranks_on_node: int = 1):
    """Not collective. ``matrix`` as the executor's CSR kernel operand of ``dtype`` (``threads`` threads set for
    ``ranks_on_node`` ranks), with :func:`kernel_block` its B and C."""
    from sparsewire.kernels import compiled as kernels

    kernels.set_threads(threads, ranks_on_node)
    return kernels.CsrOperand.from_matrix(sp.csr_array(matrix).astype(dtype), dtype, threads)


def kernel_block(shape: tuple[int, int], k: int, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. A k-column B and C for a CSR product of ``shape``, on cache lines as the executor allocates
    them."""
    from sparsewire._lib.aligned import empty_aligned
    from sparsewire.io.generators import deterministic_dense

    return deterministic_dense(0, shape[1], k, dtype), empty_aligned((shape[0], k), dtype)


def benchmark_matrix() -> sp.csr_array:
    """Not collective. :data:`BENCHMARK_MATRIX`: R-MAT scale 16, edge factor 8, seed 1."""
    from sparsewire.io.generators import rmat

    return sp.csr_array(rmat(16, 8, seed=1))


def kernel_products(matrix: sp.sparray, ks, dtype=np.float64, threads: int = 1, ranks_on_node: int = 1):
    """Not collective. For each k of ``ks``, ``(product, nonzero_columns)``: a call of the executor's CSR x dense
    kernel on ``matrix`` with a k-column B of ``dtype`` (:func:`kernel_operand`, :func:`kernel_block`), run once
    already (compiled, pages touched), and the nonzero-columns each call does."""
    from sparsewire.kernels import compiled as kernels

    operand = kernel_operand(matrix, dtype, threads, ranks_on_node)
    products = []
    for k in ks:
        dense, out = kernel_block(matrix.shape, k, dtype)
        product = functools.partial(kernels.multiply, operand, dense, out)
        product()
        products.append((product, matrix.nnz * k))
    return products


def benchmark_products(ks, threads: int = 1, ranks_on_node: int = 1):
    """Not collective. :func:`kernel_products` on :func:`benchmark_matrix`, float64."""
    return kernel_products(benchmark_matrix(), ks, np.float64, threads, ranks_on_node)


def measure_compute_rate(repeat: int = 5, progress=None) -> dict:
    """Not collective. Median local SpMM rate (nonzero-columns per second) of the executor's CSR x dense kernel on
    one thread of this machine (:func:`benchmark_products`)."""
    per_k = {}
    ks = (16, 32, 64)
    products = benchmark_products(ks)
    for k, (product, work) in zip(ks, products):
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            product()
            times.append(time.perf_counter() - started)
        per_k[str(k)] = work / float(np.median(times))
        if progress:
            progress(f"k = {k}: {per_k[str(k)]:.3g} nonzero-columns/s")
    return {
        **stamp(COMPUTE_KIND),
        "compute_rate": float(np.median(list(per_k.values()))),
        "per_k": per_k,
        "matrix": BENCHMARK_MATRIX,
        "nnz": products[0][1] // ks[0],
        "processor": platform.processor() or platform.machine(),
    }


def rate_over(work, size: float, window: float) -> float:
    """Not collective. ``work()`` repeated for ``window`` seconds: ``size`` units per call, over the time taken."""
    started, done = time.perf_counter(), 0
    while time.perf_counter() - started < window:
        work()
        done += 1
    return done * size / (time.perf_counter() - started)


def rates_together(comm, work, size: float, windows: int, window: float, yielding: bool) -> list[float]:
    """Collective. :func:`rate_over` ``windows`` times, every rank at once (a barrier before each window; the waits
    yield the core where ``yielding``, as the executor's do where the node is oversubscribed)."""
    from sparsewire.comm.runtime import wait_all

    rates = []
    for _ in range(windows):
        wait_all([comm.Ibarrier()], yielding=yielding)
        rates.append(rate_over(work, size, window))
    return rates


def measure_rows_rate(
    comm,
    rows: sp.csr_array,
    k: int,
    dtype=np.float64,
    *,
    threads: int,
    ranks_on_node: int,
    windows: int = 3,
    window: float = 0.2,
) -> float | None:
    """Collective. The executor's CSR x dense kernel on this rank's ``rows`` of A (their columns renumbered to the
    ones they hold, in order, so B is as compact as the executor's own and received rows are) times a k-column B
    of ``dtype``, in nonzero-columns per second: ``windows`` windows of ``window`` seconds, every rank at once
    (:func:`rates_together`: ranks sharing cores share them in the figure, as in a multiply); per rank the median
    of its windows, and on every rank the slowest rank's (it sets a multiply's time), as ``calibrate --network``
    takes its R-MAT rate. None where no rank holds a nonzero.

    Why: the kernel's rate depends on the matrix (how many nonzeros a row has, how far apart its columns are):
    on the emulated cluster (4 ranks, k = 32) cit-HepTh's rows ran 1.22-2.59x the calibration's R-MAT rate and
    mdual's 0.44-0.52x (docs/design-decisions.md, "Cost model and the link")."""
    from mpi4py import MPI

    from sparsewire._lib.cores import oversubscribed
    from sparsewire.comm.runtime import wait_all

    rows = sp.csr_array(rows)
    used, columns = np.unique(rows.indices, return_inverse=True)
    compact = sp.csr_array((rows.data, columns.reshape(-1), rows.indptr), shape=(rows.shape[0], len(used)))
    if rows.nnz:
        [(product, work)] = kernel_products(compact, [k], dtype, threads, ranks_on_node)
    else:  # no nonzeros: wait out the windows with the core given away
        product, work = functools.partial(time.sleep, window), 0
    yielding = oversubscribed(ranks_on_node, threads)
    rates = rates_together(comm, product, work, windows, window, yielding)
    wait_all([comm.Ibarrier()], yielding=yielding)
    slowest = comm.allreduce(float(np.median(rates)) if rows.nnz else np.inf, op=MPI.MIN)
    return None if np.isinf(slowest) else slowest
