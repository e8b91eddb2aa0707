"""MPI run-time helpers: thread caps per rank, agreeing on errors, MPI datatypes.

Importing this module initialises MPI (through mpi4py); the planner and ``sparsewire analyze``
never import it.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI
from threadpoolctl import threadpool_limits

from sparsewire import errors
from sparsewire._lib.cores import GRAPHBLAS_THREADS, default_threads
from sparsewire.errors import InputError, SparsewireError

__all__ = [
    "world",
    "is_communicator",
    "on_mpi",
    "mpi_messages_problem",
    "native_transport",
    "ranks_on_node",
    "limit_threads_per_rank",
    "node_ids",
    "agree_on_error",
    "agreed",
    "agree_on_values",
    "install_abort_on_error",
    "problem_from",
    "collective_errors",
    "abort_job",
    "mpi_datatype",
    "wait_all",
    "wait_messages",
    "message_statuses",
    "wait_any",
    "THREADS_ENVIRONMENT_VARIABLE",
]

THREADS_ENVIRONMENT_VARIABLE = "SPARSEWIRE_THREADS_PER_RANK"

_MPI_TYPES = {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE}


def wait_all(requests: list, statuses: list | None = None, *, yielding: bool = False) -> None:
    """Not collective (completes this rank's requests). ``MPI_Waitall``; ``yielding``: ``MPI_Testall`` with the
    core given away (``sched_yield``) between tries.

    Why: MPICH's waits spin, and where a node runs more ranks (x threads) than it has cores
    (:func:`sparsewire._lib.cores.oversubscribed`), the spinning ranks take the core from the rank whose message or
    relay they wait for; the scheduler lets it run a time slice later. Yielding halved a two-level multiply on 4
    ranks in shared memory, where MPICH's own ``MPIR_CVAR_POLLS_BEFORE_YIELD`` changed nothing
    (docs/design-decisions.md, "Waits that yield when oversubscribed")."""
    if not yielding:
        MPI.Request.Waitall(requests, statuses)
        return
    while not MPI.Request.Testall(requests, statuses):
        os.sched_yield()


def message_statuses(requests: list) -> list:
    """Not collective. Statuses for :func:`wait_messages` to fill: ``MPI.Status`` objects for MPI's requests; for
    torch.distributed's, the requests themselves (each says its bytes once waited for)."""
    return [request if not isinstance(request, MPI.Request) else MPI.Status() for request in requests]


def wait_messages(requests: list, statuses: list | None = None) -> None:
    """Not collective. ``MPI_Waitall`` on MPI's requests, or each torch.distributed request waited for in turn (a
    communicator of a job ``torchrun`` started): code that sends its own messages runs on either."""
    if all(isinstance(request, MPI.Request) for request in requests):
        MPI.Request.Waitall(requests, statuses)
        return
    for request in requests:
        request.Wait()


def wait_any(requests: list, status: MPI.Status, *, yielding: bool = False) -> int:
    """Not collective. ``MPI_Waitany`` (``MPI.UNDEFINED`` when no request is active); ``yielding`` as
    :func:`wait_all`."""
    if not yielding:
        return MPI.Request.Waitany(requests, status)
    while True:
        index, done = MPI.Request.Testany(requests, status)
        if done:
            return index
        os.sched_yield()


def world():
    """Collective on first use. Every process of this job as one communicator: MPI's ``COMM_WORLD`` under
    ``mpiexec`` (or a plain start), the torch.distributed group under ``torchrun``
    (:class:`~sparsewire.comm.torch_world.TorchComm`), where the processes share no MPI world."""
    from sparsewire._lib.launcher import launched_by_torchrun
    from sparsewire.comm.torch_world import torch_world

    return torch_world() if launched_by_torchrun() else MPI.COMM_WORLD


def is_communicator(value) -> bool:
    """Not collective. Whether ``value`` is a communicator the library takes (mpi4py's, or a TorchComm)."""
    from sparsewire.comm.torch_world import TorchComm

    return isinstance(value, (MPI.Comm, TorchComm))


def on_mpi(comm) -> bool:
    """Not collective. Whether ``comm``'s ranks can exchange MPI messages (not a job that ``torchrun`` started)."""
    return isinstance(comm, MPI.Comm)


def native_transport(comm) -> str:
    """Not collective. The transport that connects ``comm``'s ranks by default: ``mpi``, or ``torch`` in a job that
    ``torchrun`` started."""
    return "mpi" if on_mpi(comm) else "torch"


def mpi_messages_problem(comm, what: str) -> str | None:
    """Not collective. The line that refuses ``what`` (which sends its own MPI messages) on a communicator without
    MPI between its ranks (a job ``torchrun`` started), or None."""
    if on_mpi(comm):
        return None
    return (
        f"{what} sends its messages over MPI, and this job's processes share no MPI world (torchrun started them); "
        "start it with mpiexec"
    )


def node_ids(comm: MPI.Comm) -> np.ndarray:
    """Collective. For every rank of ``comm``, the lowest rank of ``comm`` on its node (the ranks
    sharing its memory, ``MPI_COMM_TYPE_SHARED``): equal ids, same node.

    An MPI communicator keeps the answer as an attribute of its own (``MPI_Comm_set_attr``, as PETSc keeps its inner
    communicator): its ranks never change node, and every plan and executor asks again; finding it is three
    collectives (a split, a reduction, a gather of P ids), the largest part of making a small plan. MPI drops the
    attribute when the communicator is freed; a duplicate finds it anew."""
    keyval = _node_ids_keyval() if isinstance(comm, MPI.Comm) else None
    cached = comm.Get_attr(keyval) if keyval is not None else None
    if cached is not None:
        return cached.copy()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    leader = node.allreduce(comm.Get_rank(), op=MPI.MIN)
    node.Free()
    ids = np.asarray(comm.allgather(leader), np.int64)
    if keyval is not None:
        comm.Set_attr(keyval, ids.copy())
    return ids


@functools.cache
def _node_ids_keyval() -> int:
    """The attribute key under which an MPI communicator keeps its :func:`node_ids`."""
    return MPI.Comm.Create_keyval()


def ranks_on_node(comm: MPI.Comm) -> int:
    """Collective. How many ranks of ``comm`` share this rank's node (its shared memory)."""
    ids = node_ids(comm)
    return int((ids == ids[comm.Get_rank()]).sum())


def limit_threads_per_rank(comm: MPI.Comm) -> int:
    """Collective. Cap BLAS/OpenMP threads and SuiteSparse:GraphBLAS's threads to ``cores / ranks
    on this node`` (at least 1).

    Busy-waiting BLAS threads starve MPI progress when ranks outnumber cores (ring exchanges ran
    many times slower), so every rank caps its pools. GraphBLAS keeps its own
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
    from sparsewire._lib import jit  # noqa: F401 - Numba's pool sized before python-graphblas imports Numba

    # Set now where python-graphblas is loaded, else where the package loads it: importing it here only for this
    # cost every rank 0.1 s and 15 MiB that SpMM and training never use.
    GRAPHBLAS_THREADS[:] = [threads]
    if "graphblas" in sys.modules:
        sys.modules["graphblas"].ss.config["nthreads"] = threads
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
    # Whether any rank has one, in a one-integer all-reduce (the check runs on every propagation of a training step;
    # gathering every rank's problem is two collectives of pickles); the problems are gathered only then.
    found = np.array([problem is not None], np.int32)
    comm.Allreduce(MPI.IN_PLACE, found, op=MPI.MAX)
    if found[0]:
        problems = [p for p in comm.allgather(problem) if p]
        name, message = problems[0]
        error_class = getattr(errors, name, InputError)
        raise agreed(error_class(message))


def agreed(error: SparsewireError) -> SparsewireError:
    """Not collective. ``error`` marked as raised on every rank alike (:func:`agree_on_error`, or a state every rank
    shares, such as a plan closed collectively): :func:`collective_errors` lets it reach the caller instead of
    aborting the job."""
    error.agreed = True
    return error


def agree_on_values(comm: MPI.Comm, values: dict[str, object], advice: str) -> None:
    """Collective. Raise the same :class:`~sparsewire.errors.PlanMismatchError` on every rank
    when the ranks hold different ``values`` (compared by ``repr``), naming the first argument
    that differs and what each rank holds, followed by ``advice``. Ranks that planned with
    different k or dtype, or an MPMD launch with a different ``--repeat`` per rank, would
    otherwise post messages of different sizes or counts and hang or fail inside MPI."""
    mine = {name: repr(value) for name, value in values.items()}
    gathered = comm.allgather(mine)
    problem = None
    for name in mine:
        held = [ranks_values.get(name) for ranks_values in gathered]
        if len(set(held)) > 1:
            shown = ", ".join(f"rank {rank} has {value}" for rank, value in enumerate(held[:8]))
            problem = errors.PlanMismatchError(
                f"the ranks disagree on {name} ({shown}{', ...' if len(held) > 8 else ''}); {advice}"
            )
            break
    agree_on_error(comm, problem)


def abort_job(comm: MPI.Comm, message: str, status: int = 1) -> None:
    """Not collective. Print ``sparsewire: error: <message>`` and abort every rank of ``comm`` (an error on some
    ranks only, where the others may already wait in MPI: mpi4py's own rule for an unhandled
    exception under ``python -m mpi4py``), with exit status ``status``."""
    sys.stdout.flush()
    prefix = f"rank {comm.Get_rank()}: "
    text = message if message.startswith(prefix) else prefix + message  # errors that name their rank already
    print(f"sparsewire: error: {text}; aborting the job", file=sys.stderr, flush=True)
    # MPI_Abort makes the launcher kill every process, and Hydra may do so before it has read this
    # rank's last lines from their pipe (seen in CI: the message lost, twice with 0.25 s on a loaded
    # machine); give it a moment.
    time.sleep(1.0)
    comm.Abort(status)


ABORT_ENVIRONMENT_VARIABLE = "SPARSEWIRE_ABORT_ON_ERROR"


def install_abort_on_error() -> None:
    """Not collective. Make an exception that nothing catches, or Ctrl-C (SIGINT), on one rank end
    the whole job instead of hanging it: without this, that rank's interpreter exits through
    ``MPI_Finalize``, which waits for ranks that themselves wait for it in a collective. The hook
    prints the traceback as Python would, then ``sparsewire: error: rank R: ...; aborting the
    job`` and calls ``MPI_Abort`` on ``COMM_WORLD`` (what ``python -m mpi4py`` does), and only
    when the job has several ranks. Installed once, when :mod:`sparsewire.comm.runtime` is
    imported (every MPI path of sparsewire imports it); the previous hook is kept and called for
    single-rank jobs. ``SPARSEWIRE_ABORT_ON_ERROR=0`` leaves ``sys.excepthook`` alone."""
    if os.environ.get(ABORT_ENVIRONMENT_VARIABLE, "1") == "0" or getattr(sys.excepthook, "sparsewire", False):
        return
    previous = sys.excepthook

    def abort_on_error(kind, value, trace):
        if not (MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1):
            previous(kind, value, trace)
            return
        if issubclass(kind, KeyboardInterrupt):
            message = "interrupted (SIGINT)"
        else:
            traceback.print_exception(kind, value, trace)
            message = f"{kind.__name__}: {value}" if str(value) else kind.__name__
        abort_job(MPI.COMM_WORLD, message, 130 if issubclass(kind, KeyboardInterrupt) else 1)

    abort_on_error.sparsewire = True
    sys.excepthook = abort_on_error


def collective_errors(function):
    """Decorator of collective API functions whose first argument is a communicator or has
    ``.comm``: an exception that :func:`agree_on_error` raised on every rank passes through, and so does
    one marked ``nothing_sent`` (raised before the call sent anything, its rank's state untouched); any
    other exception on a job of several ranks (raised on some ranks only, mid-collective) prints
    its traceback and aborts the job, so no rank hangs."""

    @functools.wraps(function)
    def guarded(first, *args, **kwargs):
        try:
            return function(first, *args, **kwargs)
        except BaseException as error:
            if getattr(error, "agreed", False) or getattr(error, "nothing_sent", False) or isinstance(error, KeyboardInterrupt):
                raise
            comm = first if is_communicator(first) else getattr(first, "comm", None)
            if comm is not None and comm != MPI.COMM_NULL and comm.Get_size() > 1:
                traceback.print_exc()
                abort_job(comm, f"{type(error).__name__}: {error}")
            raise

    return guarded


def mpi_datatype(dtype: np.dtype) -> MPI.Datatype:
    """Not collective. The MPI datatype of a supported element type (float32, float64)."""
    try:
        return _MPI_TYPES[np.dtype(dtype)]
    except KeyError:
        raise InputError(f"dtype {np.dtype(dtype)} is not supported; use float32 or float64") from None


install_abort_on_error()
