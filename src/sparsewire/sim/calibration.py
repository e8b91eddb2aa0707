"""Calibration of the simulator's compute model: the local SpMM rate of this machine.

:func:`measure_compute_rate` times the executor's CSR x dense kernel; ``sparsewire calibrate``
stores the result at :func:`default_calibration_path` and ``sparsewire simulate`` reads it.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np

__all__ = ["measure_compute_rate", "default_calibration_path"]


def default_calibration_path() -> Path:
    """Not collective. Where ``sparsewire calibrate`` writes and ``simulate`` reads the measured compute rate:
    ``$XDG_CACHE_HOME/sparsewire/calibration.json`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparsewire" / "calibration.json"


def measure_compute_rate(repeat: int = 5, progress=None) -> dict:
    """Not collective. Median local SpMM rate (nonzero-columns per second) of the executor's CSR x dense kernel on
    one thread of this machine, with B and C on cache lines as the executor allocates them."""
    from sparsewire.aligned import empty_aligned
    from sparsewire.exec import kernels
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
        "compute_rate": float(np.median(list(per_k.values()))),
        "per_k": per_k,
        "matrix": "rmat:16:8:1",
        "nnz": int(matrix.nnz),
        "machine": platform.node(),
        "processor": platform.processor() or platform.machine(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
