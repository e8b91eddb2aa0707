"""MPI run-time helpers: thread caps per rank, agreeing on errors, MPI datatypes.

Importing this module initialises MPI (through mpi4py); the planner and ``sparsewire analyze``
never import it.
"""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI
from threadpoolctl import threadpool_limits

from sparsewire.errors import InputError
from sparsewire.exec.kernels import default_threads

__all__ = ["ranks_on_node", "limit_threads_per_rank", "agree_on_error", "mpi_datatype", "THREADS_ENVIRONMENT_VARIABLE"]

THREADS_ENVIRONMENT_VARIABLE = "SPARSEWIRE_THREADS_PER_RANK"

_MPI_TYPES = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE}


def ranks_on_node(comm: MPI.Comm) -> int:
    """Collective. How many ranks of ``comm`` share this rank's node (its shared memory)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    size = node.Get_size()
    node.Free()
    return size


def limit_threads_per_rank(comm: MPI.Comm) -> int:
    """Collective. Cap BLAS/OpenMP threads to ``cores / ranks on this node`` (at least 1).

    Busy-waiting BLAS threads starve MPI progress when ranks outnumber cores (measured: 90x
    slower ring exchanges on 2 cores), so every rank caps its pools. ``SPARSEWIRE_THREADS_PER_RANK``
    overrides the computed value. Returns the cap.
    """
    sharing = ranks_on_node(comm)
    setting = os.environ.get(THREADS_ENVIRONMENT_VARIABLE)
    if setting:
        try:
            threads = int(setting)
            if threads < 1:
                raise ValueError
        except ValueError:
            raise InputError(f"{THREADS_ENVIRONMENT_VARIABLE}={setting!r} must be a positive integer") from None
    else:
        threads = default_threads(sharing)
    threadpool_limits(limits=threads)
    return threads


def agree_on_error(comm: MPI.Comm, problem: str | None) -> None:
    """Collective. If any rank found a problem, every rank raises the first one (lowest rank), so
    no rank is left waiting in a collective the others skipped."""
    problems = [p for p in comm.allgather(problem) if p]
    if problems:
        raise InputError(problems[0])


def mpi_datatype(dtype: np.dtype) -> MPI.Datatype:
    """The MPI datatype of a supported element type (float32, float64)."""
    try:
        return _MPI_TYPES[np.dtype(dtype)]
    except KeyError:
        raise InputError(f"dtype {np.dtype(dtype)} is not supported; use float32 or float64") from None
