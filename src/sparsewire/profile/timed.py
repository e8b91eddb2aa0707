"""One timed collective run: a step (a multiply, a SpGEMM, a training epoch) repeated R times, each
time between a barrier and the slowest rank's finish.

Every command and bench that reports a time measures it here, one way: ``warmup`` untimed steps
(first touch of buffers, MPI connections), then per repetition a barrier, ``Wtime``, the step,
``finish`` (what makes an asynchronous step done: ``torch.cuda.synchronize`` on a GPU), and the
maximum over the ranks of the elapsed time (``MPI_Iallreduce(MAX)``), as PETSc's ``-log_view``
reports an event's Max. The report keeps every repetition's time. The barrier and the maximum
are bounded by a :class:`~sparsewire.comm.watchdog.Watchdog` (``wait_timeout``), as the
executor's multiplies are: a peer cut off between two repetitions ends the job, not hangs it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sparsewire.comm.watchdog import DEFAULT_WAIT_TIMEOUT, Watchdog

__all__ = ["TimedRun", "timed_run", "time_plan", "turn_order"]


@dataclass
class TimedRun:
    """Not collective (a report). The slowest rank's seconds of every timed repetition, and what
    the last step returned.

    Attributes:
        seconds: per repetition, the maximum over the ranks (every rank holds the same list).
        result: the value the last step returned.
    """

    seconds: list[float] = field(default_factory=list)
    result: object = None

    @property
    def median_seconds(self) -> float | None:
        """The median over the repetitions (None with none)."""
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def min_seconds(self) -> float | None:
        """The fastest repetition (None with none)."""
        return min(self.seconds) if self.seconds else None

    def as_dict(self) -> dict:
        """Not collective. ``median_seconds``, ``min_seconds`` and ``repeat`` for a JSON report."""
        return {"median_seconds": self.median_seconds, "min_seconds": self.min_seconds, "repeat": len(self.seconds)}


def timed_run(
    comm,
    step: Callable[[], object],
    repeat: int,
    *,
    warmup: int = 1,
    finish: Callable[[], None] | None = None,
    before: Callable[[], None] | None = None,
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
    yielding: bool = False,
) -> TimedRun:
    """Collective (every rank of ``comm`` calls it with the same ``repeat`` and ``warmup``). Run
    ``step`` ``warmup`` times untimed, then ``repeat`` times timed as the module docstring says;
    ``before`` runs before each timed repetition's barrier (outside the timing); the barrier and
    the maximum each end the job after ``wait_timeout`` seconds (module docstring). ``yielding``
    (where the node is oversubscribed): the barrier and the maximum give the core away between
    polls, so a rank done early does not spin on the core a slower rank's step needs."""
    from mpi4py import MPI

    from sparsewire.comm.runtime import wait_all

    run = TimedRun()
    where = ["before the first repetition"]
    guard = Watchdog(wait_timeout, lambda: f"rank {comm.Get_rank()} waits in the timing's {where[0]}; a peer stopped")
    for _ in range(warmup):
        run.result = step()
    for repetition in range(repeat):
        if before is not None:
            before()
        where[0] = f"barrier of repetition {repetition}"
        guard.arm()
        wait_all([comm.Ibarrier()], yielding=yielding)
        guard.disarm()
        started = MPI.Wtime()
        run.result = step()
        if finish is not None:
            finish()
        elapsed = MPI.Wtime() - started
        where[0] = f"maximum over the ranks of repetition {repetition}"
        guard.arm()
        slowest = np.array(elapsed)
        wait_all([comm.Iallreduce(MPI.IN_PLACE, slowest, op=MPI.MAX)], yielding=yielding)
        run.seconds.append(float(slowest))
        guard.disarm()
    return run


def time_plan(plan, b_local, out, repeat: int, *, warmup: int = 1) -> TimedRun:
    """Collective. :func:`timed_run` of ``plan.multiply(b_local, out=out)`` (an
    :class:`~sparsewire.distributed.spmm.SpmmPlan` or an executor); on a CUDA device each repetition
    ends when the device is done."""
    finish = None
    device = getattr(out, "device", None)
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        def finish() -> None:
            torch.cuda.synchronize(device)

    options = getattr(plan, "options", None)
    timeout = getattr(options, "wait_timeout", DEFAULT_WAIT_TIMEOUT)
    executor = getattr(plan, "executor", plan)
    yielding = bool(getattr(getattr(executor, "transport", None), "yield_while_waiting", False))
    multiply = lambda: plan.multiply(b_local, out=out)  # noqa: E731
    return timed_run(plan.comm, multiply, repeat, warmup=warmup, finish=finish, wait_timeout=timeout, yielding=yielding)


def turn_order(items: list, turn: int) -> list:
    """Not collective. The order in which ``items`` (runs that take turns) take turn ``turn``: as given on even turns,
    reversed on odd ones (ABBA counterbalancing), so that no run always follows the same one: in a fixed order each
    finds the caches and the network's queues as one particular neighbour left them, turn after turn, and a difference
    that is the neighbour's would read as the run's own."""
    return list(items) if turn % 2 == 0 else list(reversed(items))
