"""The product in one line: :func:`spmm` plans on first use (strategy and mode ``auto``) and keeps the plan with
the matrix."""

from __future__ import annotations

import numpy as np

from sparsewire.comm.runtime import agree_on_error, collective_errors
from sparsewire.distributed.matrix import DistributedMatrix
from sparsewire.distributed.spmm import plan_spmm

__all__ = ["spmm"]


@collective_errors
def spmm(matrix: DistributedMatrix, b_local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Collective. This rank's rows of ``C = A @ B`` in one line.

    The first call for a given A, k and dtype plans (strategy and mode ``auto``) and keeps the plan
    with A; later calls with the same A, k and dtype reuse it. ``b_local``: this rank's rows of B
    (``matrix.col_partition.range(rank)``), float32 or float64 (integers and booleans are converted
    to float64; a complex B is refused). Every rank must pass the same k and dtype.
    """
    b_local = np.asarray(b_local)
    dtype = b_local.dtype if b_local.dtype in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(np.float64)
    key = (b_local.shape[1] if b_local.ndim == 2 else -1, dtype.name)
    # One small allgather per call: a rank with another k or dtype would otherwise plan while the others
    # multiply (a hang). Code that needs every microsecond keeps a plan from spmm_plan.
    keys = matrix.comm.allgather(key)
    problem = None
    if key[0] < 1:
        problem = f"rank {matrix.comm.Get_rank()}: b_local must be a 2-D array (rows, k); got shape {b_local.shape}"
    elif len(set(keys)) != 1:
        problem = f"the ranks passed B blocks of other widths or types {sorted(set(keys))}; pass the same k and dtype"
    agree_on_error(matrix.comm, problem)
    # Kept on the matrix: both are collected together (a weak-keyed cache's plans pointing back never let go).
    plans = matrix.__dict__.setdefault("_spmm_plans", {})
    if key not in plans:
        plans[key] = plan_spmm(matrix, key[0], dtype)
    return plans[key].multiply(np.ascontiguousarray(b_local, dtype=dtype), out)
