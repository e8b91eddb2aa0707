"""``auto``'s trial: where the cost model cannot tell the candidate plans apart, time them on the job itself and keep
one that is faster than the model's choice in every turn (FFTW's ``FFTW_MEASURE`` planning times its candidate
transforms).

The model's predictions come within 25% of the measured times on the emulated cluster (docs/benchmarks.md, "Over a
real link"), so a plan predicted within :data:`TRIAL_WITHIN` of the least may be the fastest; a relay's cost under
a multiply's load, for one, is not priced (docs/design-decisions.md). The trial runs only where the topology was
measured (``calibrate --network``): a topology of assumed or named links prices a cluster the job does not run on,
where this machine's times say nothing."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from sparsewire.exec.executor import SpmmExecutor
from sparsewire.exec.options import ExecOptions
from sparsewire.plan.plan import RankPlan
from sparsewire.profile.timed import timed_run, turn_order
from sparsewire.topology.model import Topology

__all__ = [
    "TRIAL_WITHIN",
    "TRIAL_TURNS",
    "TRIAL_REPEAT",
    "TRIAL_MOST_REPEAT",
    "TRIAL_TURN_SECONDS",
    "Trial",
    "trial_applies",
    "trial_of",
    "time_plans",
    "faster_in_every_turn",
]

#: Candidates predicted within this fraction of the least are timed: the error the model's predictions keep
#: on the emulated cluster where the link is at least half the time.
TRIAL_WITHIN = 0.25
#: Turns the timed plans take, and the fewest and most multiplies of each plan per turn (a turn's time: the median of
#: its multiplies): a plan's turn has as many as take about :data:`TRIAL_TURN_SECONDS`, so that the turn of a plan of
#: a few milliseconds is the median of several (at 5 Gbit/s one multiply of 2.4 ms against another moved its turn by
#: more than the 8% between the two plans' medians), and at least 3, the fewest whose median drops one slow multiply
#: (a median of 2 is their mean).
TRIAL_TURNS = 4
TRIAL_REPEAT = 3
TRIAL_MOST_REPEAT = 16
TRIAL_TURN_SECONDS = 0.02


def trial_applies(comm, options: ExecOptions) -> bool:
    """Not collective. Whether ``auto`` times its near candidates: asked for (``options.trial``), more than one rank
    of an MPI job, a topology measured by ``calibrate --network`` (its predictions price this job's links) and the
    NumPy backend (the trial's B is an array of the CPU)."""
    topology = options.topology
    return (
        bool(options.trial)
        and isinstance(comm, MPI.Comm)
        and comm.Get_size() > 1
        and isinstance(topology, Topology)
        and topology.prices() == "measured links"
        and options.backend == "numpy"
    )


Trial = Callable[[dict[str, RankPlan]], dict[str, list[float]]]
"""What ``auto`` calls with its near candidates' plans: each plan's time per turn (:func:`time_plans`)."""


def trial_of(comm, k: int, dtype: np.dtype, options: ExecOptions) -> Trial | None:
    """Not collective. :func:`time_plans` for ``auto``'s candidates at width ``k`` and ``dtype`` under ``options``
    where :func:`trial_applies`, else None."""
    if not trial_applies(comm, options):
        return None
    return lambda plans: time_plans(comm, plans, k, dtype, options)


def time_plans(
    comm: MPI.Comm, plans: dict[str, RankPlan], k: int, dtype: np.dtype, options: ExecOptions, *, turns: int = TRIAL_TURNS,
    repeat: int = TRIAL_REPEAT, turn_seconds: float = TRIAL_TURN_SECONDS, most: int = TRIAL_MOST_REPEAT,
) -> dict[str, list[float]]:  # fmt: skip
    """Collective. Each plan of ``plans``' time per turn (every rank passes the same names in the same order): an
    executor per plan, one untimed multiply each (connections, first touches) and one timed, then ``turns`` turns in
    which each plan multiplies once untimed (the first after another plan's finds its buffers and messages out of the
    caches) and ``ceil(turn_seconds / that time)`` times timed, at least ``repeat`` and at most ``most``
    (:func:`~sparsewire.profile.timed.timed_run`: a multiply's time is the slowest rank's, from a barrier to its
    product), a turn's the median of its multiplies. Taking turns, the plans meet the machine's drift alike, and
    :func:`faster_in_every_turn` compares them turn by turn. B is random (the values do not change the time); the
    executors are closed before it returns. The plans take each turn in :func:`~sparsewire.profile.timed.turn_order`."""
    executors = {name: SpmmExecutor(plan, comm, k, dtype, options) for name, plan in plans.items()}
    try:
        rng = np.random.default_rng(comm.Get_rank())
        blocks = {name: rng.standard_normal((plan.local_shape[1], k)).astype(dtype) for name, plan in plans.items()}
        outputs = {name: np.empty((plan.local_shape[0], k), dtype) for name, plan in plans.items()}
        times: dict[str, list[float]] = {name: [] for name in plans}

        def timed(name: str, count: int, warmup: int) -> float:
            executor = executors[name]
            run = timed_run(
                comm,
                lambda: executor.multiply(blocks[name], outputs[name]),
                count,
                warmup=warmup,
                wait_timeout=executor.options.wait_timeout,
                yielding=executor.transport.yield_while_waiting,
            )
            return run.median_seconds  # the slowest rank's: the same on every rank, and so is each count below

        counts = {name: min(most, max(repeat, math.ceil(turn_seconds / max(timed(name, 1, 1), 1e-9)))) for name in plans}
        for turn in range(turns):
            for name in turn_order(list(plans), turn):  # each after one untimed multiply, as a user's job repeats a plan
                times[name].append(timed(name, counts[name], 1))
    finally:
        for executor in executors.values():
            executor.close()
    return times


def faster_in_every_turn(times: dict[str, list[float]], predicted: str) -> str:
    """Not collective. The plan to keep: among the plans faster than ``predicted`` (the model's choice) in every
    turn of ``times`` (:func:`time_plans`), the one of the least median; ``predicted`` where none is. Why every turn:
    a plan that is no faster wins each turn by chance half the time, all of 4 turns one time in 16, while one that is
    10% faster over a noise of a few percent wins them all; a bare least median flipped choices the model had right
    (on the emulated cluster, a plan 1.12x slower in the bench's runs)."""
    beats = [name for name, turns in times.items() if name != predicted and all(t < p for t, p in zip(turns, times[predicted]))]
    return min(beats, key=lambda name: statistics.median(times[name])) if beats else predicted
