"""What a plan's executor holds after it is dropped: freed at the next one's construction, and a bound on how many live.

Why: every SpMM executor duplicates its communicator (its own tag space) and holds persistent
requests; every SpGEMM engine duplicates or splits communicators too (the "executors" below).
MPICH has 2,048 communicator ids per process, so a program that makes plans in a loop and never
closes them (no ``close()``, no ``with``) used to end, after about 2,045 plans, in MPI's own
"Too many communicators" abort.

How (the model is PETSc's garbage list, ``PetscGarbageCleanup``: objects collected by Python are
destroyed later, at a point every rank reaches): an executor registers its resources with
:func:`track`; when it is garbage-collected, a :class:`weakref.finalize` callback only queues them
(a collection may happen in any thread, in the middle of another MPI call); :func:`admit`, called by
every new executor before it duplicates its communicator, frees the queue (persistent requests and
communicator frees are local operations in MPICH) and refuses, on every rank alike, a new executor
when :data:`LIVE_LIMIT` are still open, naming the count and the fix. A full collection
(``gc.collect``) runs first each time the live count grows by :data:`COLLECT_FROM` (from that
count on), so plans kept alive only by reference cycles (a plan and its transpose, a matrix and
the plans :func:`~sparsewire.spmm` keeps on it) are counted as freed.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable

__all__ = ["track", "release_now", "admit", "free_communicators", "live_executors", "LIVE_LIMIT", "COLLECT_FROM"]

#: Open executors a process may hold: half of MPICH's 2,048 communicator ids, the rest left to the program.
LIVE_LIMIT = 1024
#: Live executors from which an admission first collects cyclic garbage (then again each time this many more are live).
COLLECT_FROM = 256

_queued: list[Callable[[], None]] = []  # release callbacks of collected executors, not yet run
_queue_lock = threading.Lock()
_live = weakref.WeakSet()
_next_collect = COLLECT_FROM


def _queue(release: Callable[[], None]) -> None:
    with _queue_lock:
        _queued.append(release)


def track(owner: object, release: Callable[[], None]) -> weakref.finalize:
    """Not collective. Count ``owner`` as live; when it is collected, queue ``release`` (which must not
    refer to ``owner``) for the next :func:`admit`; :func:`release_now` releases at once (``close()``)."""
    _live.add(owner)
    finalizer = weakref.finalize(owner, _queue, release)
    finalizer.atexit = False  # MPI_Finalize frees what is left
    return finalizer


def release_now(owner: object, finalizer: weakref.finalize) -> None:
    """Not collective. ``owner`` is closed: run its release now (once) and stop counting it."""
    _live.discard(owner)
    detached = finalizer.detach()
    if detached is not None:
        detached[2][0]()  # the release given to track()


def release_queued() -> int:
    """Not collective. Run the queued releases (in the calling thread); how many ran."""
    with _queue_lock:
        pending = _queued[:]
        _queued.clear()
    for release in pending:
        release()
    return len(pending)


def free_communicators(*comms) -> None:
    """Not collective (local in MPICH). Free each communicator not yet freed (a release for :func:`track`)."""
    from mpi4py import MPI

    for comm in comms:
        if comm != MPI.COMM_NULL:
            comm.Free()


def live_executors() -> int:
    """Not collective. Executors of this process not yet closed or collected."""
    return len(_live)


def admit() -> str | None:
    """Not collective (its result must be agreed, e.g. with ``agree_on_error``). Free what collected
    executors held; the problem with making one more executor now, or None."""
    global _next_collect
    if len(_live) >= _next_collect:
        gc.collect()
        _next_collect = len(_live) + COLLECT_FROM
    release_queued()
    if len(_live) < LIVE_LIMIT:
        return None
    return (
        f"{len(_live)} plans are open on this process, the most sparsewire allows ({LIVE_LIMIT}: each holds an MPI "
        "communicator and MPICH has 2,048); close plans you no longer need (plan.close(), or `with plan:`), or "
        "drop every reference to them"
    )
