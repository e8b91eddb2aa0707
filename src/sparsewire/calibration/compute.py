"""The compute calibration: the local SpMM rate of this machine, for the simulator's compute model.

:func:`measure_compute_rate` times the executor's CSR x dense kernel; ``sparsewire calibrate``
stores the record (kind ``compute``) at :func:`default_calibration_path` in the calibration cache
(:mod:`sparsewire.calibration.store`) and ``sparsewire simulate`` reads it (:func:`load_compute_rate`).
"""

from __future__ import annotations

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


def measure_compute_rate(repeat: int = 5, progress=None) -> dict:
    """Not collective. Median local SpMM rate (nonzero-columns per second) of the executor's CSR x dense kernel on
    one thread of this machine, with B and C on cache lines as the executor allocates them."""
    from sparsewire.aligned import empty_aligned
    from sparsewire.exec.kernels import compiled as kernels
    from sparsewire.generators import deterministic_dense, rmat

    matrix = rmat(16, 8, seed=1).astype(np.float64)
    kernels.set_threads(1)
    operand = kernels.CsrOperand.from_matrix(matrix, np.float64, 1)
    per_k = {}
    for k in (16, 32, 64):
        dense = deterministic_dense(0, matrix.shape[1], k)
        out = empty_aligned((matrix.shape[0], k), np.float64)
        kernels.multiply(operand, dense, out)
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            kernels.multiply(operand, dense, out)
            times.append(time.perf_counter() - started)
        per_k[str(k)] = matrix.nnz * k / float(np.median(times))
        if progress:
            progress(f"k = {k}: {per_k[str(k)]:.3g} nonzero-columns/s")
    return {
        **stamp(COMPUTE_KIND),
        "compute_rate": float(np.median(list(per_k.values()))),
        "per_k": per_k,
        "matrix": "rmat:16:8:1",
        "nnz": int(matrix.nnz),
        "processor": platform.processor() or platform.machine(),
    }
