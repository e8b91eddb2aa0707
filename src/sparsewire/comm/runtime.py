"""MPI run-time helpers: thread caps per rank, agreeing on errors, MPI datatypes.

Importing this module initialises MPI (through mpi4py); the planner and ``sparsewire analyze``
never import it.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback

import numpy as np
from mpi4py import MPI
from threadpoolctl import threadpool_limits

from sparsewire import errors
from sparsewire.errors import InputError, SparsewireError
from sparsewire.exec.kernels import default_threads

__all__ = [
    "ranks_on_node",
    "limit_threads_per_rank",
    "agree_on_error",
    "problem_from",
    "collective_errors",
    "abort_job",
    "mpi_datatype",
    "THREADS_ENVIRONMENT_VARIABLE",
]

THREADS_ENVIRONMENT_VARIABLE = "SPARSEWIRE_THREADS_PER_RANK"

_MPI_TYPES = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE}


def ranks_on_node(comm: MPI.Comm) -> int:
    """Collective. How many ranks of ``comm`` share this rank's node (its shared memory)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    size = node.Get_size()
    node.Free()
    return size


def limit_threads_per_rank(comm: MPI.Comm) -> int:
    """Collective. Cap BLAS/OpenMP threads and SuiteSparse:GraphBLAS's threads to ``cores / ranks
    on this node`` (at least 1).

    Busy-waiting BLAS threads starve MPI progress when ranks outnumber cores (measured: 90x
    slower ring exchanges on 2 cores), so every rank caps its pools. GraphBLAS keeps its own
    thread count (read once when it loads), so it is set too: left at the core count, 4 ranks on
    2 cores ran 8 GraphBLAS threads. ``SPARSEWIRE_THREADS_PER_RANK`` overrides the computed value.
    Returns the cap.
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
    import graphblas

    graphblas.ss.config["nthreads"] = threads
    return threads


def problem_from(error: BaseException) -> str | SparsewireError:
    """Not collective. What :func:`agree_on_error` should hear about an exception caught on one
    rank: a :class:`SparsewireError` as it is, any other exception as its type and message (a
    ``MemoryError()`` has an empty message, which must not read as "no problem")."""
    if isinstance(error, SparsewireError):
        return error
    return f"{type(error).__name__}: {error}" if str(error) else f"{type(error).__name__} (without a message)"


def agree_on_error(comm: MPI.Comm, problem: str | SparsewireError | None) -> None:
    """Collective. If any rank found a problem, every rank raises the first one (lowest rank), as
    the same :class:`SparsewireError` subclass (a string is an :class:`InputError`), so no rank is
    left waiting in a collective the others skipped. Only None means no problem: an empty string
    is one (an exception without a message; :func:`problem_from` names its type)."""
    if isinstance(problem, SparsewireError):
        problem = (type(problem).__name__, str(problem) or type(problem).__name__)
    elif problem is not None:
        problem = ("InputError", str(problem) or "an error without a message")
    problems = [p for p in comm.allgather(problem or None) if p]
    if problems:
        name, message = problems[0]
        error_class = getattr(errors, name, InputError)
        error = error_class(message)
        error.agreed = True  # every rank raises it: no need to abort (see collective_errors)
        raise error


def abort_job(comm: MPI.Comm, message: str) -> None:
    """Print ``sparsewire: error: <message>`` and abort every rank of ``comm`` (an error on some
    ranks only, where the others may already wait in MPI: mpi4py's own rule for an unhandled
    exception under ``python -m mpi4py``)."""
    print(f"sparsewire: error: rank {comm.Get_rank()}: {message}; aborting the job", file=sys.stderr, flush=True)
    comm.Abort(1)


def collective_errors(function):
    """Decorator of collective API functions whose first argument is a communicator or has
    ``.comm``: an exception that :func:`agree_on_error` raised on every rank passes through; any
    other exception on a job of several ranks (raised on some ranks only, mid-collective) prints
    its traceback and aborts the job, so no rank hangs."""

    @functools.wraps(function)
    def guarded(first, *args, **kwargs):
        try:
            return function(first, *args, **kwargs)
        except BaseException as error:
            if getattr(error, "agreed", False) or isinstance(error, KeyboardInterrupt):
                raise
            comm = first if isinstance(first, MPI.Comm) else getattr(first, "comm", None)
            if comm is not None and comm != MPI.COMM_NULL and comm.Get_size() > 1:
                traceback.print_exc()
                abort_job(comm, f"{type(error).__name__}: {error}")
            raise

    return guarded


def mpi_datatype(dtype: np.dtype) -> MPI.Datatype:
    """The MPI datatype of a supported element type (float32, float64)."""
    try:
        return _MPI_TYPES[np.dtype(dtype)]
    except KeyError:
        raise InputError(f"dtype {np.dtype(dtype)} is not supported; use float32 or float64") from None
