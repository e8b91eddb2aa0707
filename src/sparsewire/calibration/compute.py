"""The compute calibration: the local SpMM rate of this machine, for the simulator's compute model.

:func:`measure_compute_rate` times the executor's CSR x dense kernel; ``sparsewire calibrate``
stores the record (kind ``compute``) at :func:`default_calibration_path` in the calibration cache
(:mod:`sparsewire.calibration.store`) and ``sparsewire simulate`` reads it (:func:`load_compute_rate`).
"""

from __future__ import annotations

import functools
import os
import platform
import time
from pathlib import Path

import numpy as np

from sparsewire.calibration.store import read_record, record_path, stamp
from sparsewire.errors import InputError

__all__ = ["COMPUTE_KIND", "measure_compute_rate", "default_calibration_path", "load_compute_rate"]

#: The ``kind`` of a compute calibration record.
COMPUTE_KIND = "compute"


def default_calibration_path() -> Path:
    """Not collective. Where ``sparsewire calibrate`` writes and ``simulate`` reads the measured compute
    rate: ``compute.json`` in :func:`~sparsewire.calibration.store.cache_directory`."""
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


def benchmark_products(ks, threads: int = 1, ranks_on_node: int = 1):
    """Not collective. For each k of ``ks``, ``(product, nonzero_columns)``: a call of the executor's CSR x dense
    kernel on :data:`BENCHMARK_MATRIX` (float64, ``threads`` threads, B and C on cache lines as the executor
    allocates them), run once already (compiled, pages touched), and the nonzero-columns each call does."""
    from sparsewire.aligned import empty_aligned
    from sparsewire.exec.kernels import compiled as kernels
    from sparsewire.generators import deterministic_dense, rmat

    matrix = rmat(16, 8, seed=1).astype(np.float64)  # BENCHMARK_MATRIX
    kernels.set_threads(threads, ranks_on_node)
    operand = kernels.CsrOperand.from_matrix(matrix, np.float64, threads)
    products = []
    for k in ks:
        dense = deterministic_dense(0, matrix.shape[1], k)
        out = empty_aligned((matrix.shape[0], k), np.float64)
        product = functools.partial(kernels.multiply, operand, dense, out)
        product()
        products.append((product, matrix.nnz * k))
    return products


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
