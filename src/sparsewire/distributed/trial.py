"""``auto``'s trial: where the cost model cannot tell the candidate plans apart, time them on the job itself and keep
the fastest (what FFTW's ``FFTW_MEASURE`` planning does for transforms).

The model's predictions come within 25% of the measured times on the emulated cluster (docs/benchmarks.md, "Over a
real link"), so a plan predicted within :data:`TRIAL_WITHIN` of the least may be the fastest; a relay's cost under
a multiply's load, for one, is not priced (docs/design-decisions.md). The trial runs only where the topology was
measured (``calibrate --network``): a topology of assumed or named links prices a cluster the job does not run on,
where this machine's times say nothing."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from sparsewire.exec.executor import SpmmExecutor
from sparsewire.exec.options import ExecOptions
from sparsewire.plan.plan import RankPlan
from sparsewire.topology.model import Topology

__all__ = ["TRIAL_WITHIN", "TRIAL_TURNS", "TRIAL_REPEAT", "trial_applies", "trial_of", "time_plans"]

#: Candidates predicted within this fraction of the least are timed: the error the model's predictions keep
#: on the emulated cluster where the link is at least half the time.
TRIAL_WITHIN = 0.25
#: Turns the timed plans take, and multiplies of each plan per turn: the median of ``TRIAL_TURNS * TRIAL_REPEAT``.
TRIAL_TURNS = 3
TRIAL_REPEAT = 2


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


def trial_of(comm, k: int, dtype: np.dtype, options: ExecOptions) -> Callable[[dict[str, RankPlan]], dict[str, float]] | None:
    """Not collective. :func:`time_plans` for ``auto``'s candidates at width ``k`` and ``dtype`` under ``options``
    where :func:`trial_applies`, else None."""
    if not trial_applies(comm, options):
        return None
    return lambda plans: time_plans(comm, plans, k, dtype, options)


def time_plans(
    comm: MPI.Comm, plans: dict[str, RankPlan], k: int, dtype: np.dtype, options: ExecOptions, *, turns: int = TRIAL_TURNS,
    repeat: int = TRIAL_REPEAT,
) -> dict[str, float]:  # fmt: skip
    """Collective. Seconds per multiply of each plan of ``plans`` (every rank passes the same names in the same
    order): an executor per plan, one untimed multiply each (connections, first touches), then ``turns`` turns in
    which each plan multiplies ``repeat`` times; one multiply's time is the slowest rank's (``MPI_MAX`` of each
    rank's time from a barrier to its product), a plan's time the median of its multiplies. Taking turns, the
    plans meet the machine's drift alike. B is random (the values do not change the time); the executors are
    closed before it returns."""
    executors = {name: SpmmExecutor(plan, comm, k, dtype, options) for name, plan in plans.items()}
    try:
        rng = np.random.default_rng(comm.Get_rank())
        blocks = {name: rng.standard_normal((plan.local_shape[1], k)).astype(dtype) for name, plan in plans.items()}
        for name, executor in executors.items():
            executor.multiply(blocks[name])
        times: dict[str, list[float]] = {name: [] for name in plans}
        for _ in range(turns):
            for name, executor in executors.items():
                for _ in range(repeat):
                    comm.Barrier()
                    started = MPI.Wtime()
                    executor.multiply(blocks[name])
                    times[name].append(comm.allreduce(MPI.Wtime() - started, op=MPI.MAX))
    finally:
        for executor in executors.values():
            executor.close()
    return {name: statistics.median(seconds) for name, seconds in times.items()}
