"""The ``auto`` strategy: plan every candidate strategy and keep the least predicted time, near ties going to
the plan of fewer steps (:func:`~sparsewire.plan.cost.preferred`), or, where a trial is given, one of those predicted
near the least that was faster on the job in every turn (:mod:`~sparsewire.distributed.trial`); :class:`StrategyChoice`
records why."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from sparsewire._lib.text import format_bytes
from sparsewire.distributed.trial import TRIAL_WITHIN, Trial, faster_in_every_turn
from sparsewire.plan.cost import NEAR_TIE, plan_steps, preferred
from sparsewire.plan.plan import RankPlan, build_rank_plan_collective
from sparsewire.plan.stats import PlanStats, plan_stats, predicted_seconds, rank_send_summary
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy
from sparsewire.topology.model import Topology

if TYPE_CHECKING:  # for annotations only: the matrix's class imports this module's users
    from sparsewire.distributed.matrix import DistributedMatrix

__all__ = ["StrategyChoice", "candidate_strategies", "collective_stats", "choose_strategy"]


@dataclass(frozen=True)
class StrategyChoice:
    """Why a plan has its strategy: every candidate's predicted seconds and bytes per multiply
    under ``model`` (the topology's cost model, :func:`~sparsewire.plan.stats.predicted_seconds`), and its steps
    that carry a message (:func:`~sparsewire.plan.cost.plan_steps`; empty in a plan file written before they were recorded)."""

    strategy: Strategy
    requested: str
    model: str
    candidates: dict[str, tuple[float, int]]
    steps: dict[str, int] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)

    def reason(self) -> str:
        """Not collective. One sentence: the chosen strategy and why."""
        if self.requested != "auto":
            return f"strategy {self.strategy.value} was requested"
        chosen = self.strategy.value
        if self.measured:
            ranked = sorted(self.measured.items(), key=lambda x: x[1])
            timed = ", ".join(f"{name} {seconds * 1e3:.3f} ms" for name, seconds in ranked)
            model = preferred({name: (*c, self.steps.get(name, 0)) for name, c in self.candidates.items()})
            why = "the model's choice, and none was faster" if chosen == model else f"faster than {model}, the model's choice,"
            least = min(s for s, _ in self.candidates.values())
            near = [name for name in self.measured if self.candidates[name][0] <= least * (1 + TRIAL_WITHIN)]
            flat = [name for name in self.measured if name not in near]  # the least flat one beside a relaying choice
            return (
                f"auto chose {chosen}: {why} in every turn of a trial on this job of the {len(near)} candidates "
                f"predicted within {TRIAL_WITHIN:.0%} of the least under {self.model}"
                + (f" and {flat[0]}, the least predicted that does not relay" if flat else "")
                + f" (median per multiply: {timed})"
            )
        seconds, nbytes = self.candidates[chosen]
        others = sorted((s, b, name) for name, (s, b) in self.candidates.items() if name != chosen)
        if others and others[0][0] < seconds:  # a near tie that went to fewer steps (preferred)
            s, b, name = others[0]
            return (
                f"auto chose {chosen}: predicted within {NEAR_TIE:.0%} of the least under {self.model} ({seconds * 1e6:.2f} us, "
                f"{format_bytes(nbytes)}, {self._steps(chosen)}) against {name} ({s * 1e6:.2f} us, {format_bytes(b)}, "
                f"{self._steps(name)}); near ties go to fewer steps"
            )
        text = f"auto chose {chosen}: least predicted time under {self.model} ({seconds * 1e6:.2f} us, {format_bytes(nbytes)})"
        if others:
            s, b, name = others[0]
            tie = " (a tie, broken by fewer bytes)" if s == seconds else ""
            text += f"; next {name} ({s * 1e6:.2f} us, {format_bytes(b)}){tie}"
        return text

    def candidate_lines(self) -> list[str]:
        """Not collective. Where ``auto`` compared several: one line of every candidate's predicted time, bytes and
        steps (where recorded), least predicted first; else none."""
        if self.requested != "auto" or len(self.candidates) < 2:
            return []
        ranked = sorted(self.candidates.items(), key=lambda x: x[1])
        parts = ", ".join(
            f"{name} {s * 1e6:.2f} us / {format_bytes(b)}"
            + (f" / {self.steps[name]}" if name in self.steps else "")
            + (f" / timed {self.measured[name] * 1e6:.2f} us" if name in self.measured else "")
            for name, (s, b) in ranked
        )
        timed = " / timed where tried" if self.measured else ""
        return [f"candidates (predicted time / bytes{' / steps' if self.steps else ''}{timed}): {parts}"]

    def _steps(self, name: str) -> str:
        count = self.steps.get(name)
        return "steps not recorded" if count is None else f"{count} step{'s' if count != 1 else ''}"


def candidate_strategies(topology: Topology | None, n_ranks: int) -> list[Strategy]:
    """Not collective. The strategies ``auto`` compares: the executable flat ones, and the hierarchical ones when
    the topology has groups (more than one level) and, for a job of ``n_ranks`` ranks, some group holds two or more.
    With a rank in each group a relay has no one to relay to: a hierarchical plan is its flat one plus an empty
    second step, which costs a little and, timed beside the flat plan in the trial, can only win by noise."""
    grouped = topology is not None and len(topology.levels) > 1 and bool(np.bincount(topology.groups(n_ranks)).max() > 1)
    return [s for s in EXECUTABLE_STRATEGIES if grouped or not s.hierarchical]


def collective_stats(comm: MPI.Comm, plan: RankPlan, k: int, itemsize: int, model: Topology) -> PlanStats:
    """Collective. The :class:`~sparsewire.plan.stats.PlanStats` of every rank's ``plan`` (each
    rank's send summary gathered everywhere), for blocks of ``k`` columns of ``itemsize`` bytes."""
    groups = None if len(model.levels) < 2 else model.groups(comm.Get_size())
    summaries = comm.allgather(rank_send_summary(plan, groups))
    return plan_stats(summaries, k, itemsize, plan.strategy, comm.Get_size(), model)


def _least_flat(candidates: dict[str, tuple[float, int]]) -> str | None:
    """Not collective. The candidate of the least predicted time among those that do not relay (None if none)."""
    flat = [name for name in candidates if not Strategy(name).hierarchical]
    return min(flat, key=lambda name: candidates[name][0]) if flat else None


def choose_strategy(
    matrix: DistributedMatrix,
    k: int,
    dtype: np.dtype,
    strategy: str,
    topology: Topology | None,
    layout: str,
    proxy: str,
    steps_in_flight: int | None = None,
    code_setup: bool = False,
    overlaps_diagonal: bool = False,
    trial: Trial | None = None,
    beside_stream: bool = False,
) -> tuple[RankPlan, PlanStats, StrategyChoice]:
    """Collective. This rank's plan of ``strategy`` (``auto``: of every
    :func:`candidate_strategies` entry, keeping the least predicted time
    ``T_comm = sum_steps max_(class, rank) (messages * (latency + overhead) + bytes / bandwidth)`` under
    ``topology``, flat when None, with a shared link as :func:`~sparsewire.plan.cost.predicted_communication_seconds`
    models it for a mode that keeps ``steps_in_flight`` steps on the links at once, with each rank's local
    work added, or its diagonal block hidden behind ``T_comm`` where the mode ``overlaps_diagonal`` (and the work on
    the messages between groups where the overlap schedule works on them while others cross, ``beside_stream``),
    where the topology has measured local rates (:func:`~sparsewire.plan.cost.predicted_seconds`); near ties, within
    :data:`~sparsewire.plan.cost.NEAR_TIE`, go to fewer steps, then fewer bytes:
    :func:`~sparsewire.plan.cost.preferred`), its stats and the choice's record. ``code_setup``: the planner's
    all-to-all travels bit-packed (:func:`~sparsewire.plan.plan.build_rank_plan_collective`). ``trial`` (``auto``
    only, :mod:`~sparsewire.distributed.trial`): given the plans predicted within
    :data:`~sparsewire.distributed.trial.TRIAL_WITHIN` of the least where there are several, with the flat plan of the
    least predicted time beside a hierarchical choice wherever it is predicted (a relay's cost under a multiply's load
    is the term the model prices least surely), their times per turn (Collective); a plan faster than the predicted
    choice in every turn is kept instead (:func:`~sparsewire.distributed.trial.faster_in_every_turn`), and the choice
    records the median times."""
    comm = matrix.comm
    model = topology or Topology.flat()
    names = candidate_strategies(topology, comm.Get_size()) if strategy == "auto" else [Strategy(strategy)]
    planned, candidates, steps = {}, {}, {}
    keep_within = max(NEAR_TIE, TRIAL_WITHIN) if trial is not None and strategy == "auto" else NEAR_TIE
    for candidate in names:
        plan = build_rank_plan_collective(
            comm,
            matrix.local_rows,
            matrix.row_partition,
            matrix.col_partition,
            candidate,
            topology,
            layout=layout,
            proxy=proxy,
            code_setup=code_setup,
        )
        stats = collective_stats(comm, plan, k, dtype.itemsize, model)
        seconds = predicted_seconds(
            stats, steps_in_flight=steps_in_flight, overlaps_diagonal=overlaps_diagonal, beside_stream=beside_stream
        )
        candidates[candidate.value] = (seconds, stats.total_bytes)
        steps[candidate.value] = plan_steps(stats)
        planned[candidate.value] = (plan, stats)
        least = min(s for s, _ in candidates.values())  # keep only the plans still near the least, and the best flat one
        flat = _least_flat(candidates) if keep_within > NEAR_TIE else None
        planned = {
            name: kept for name, kept in planned.items() if candidates[name][0] <= least * (1 + keep_within) or name == flat
        }
    chosen = preferred({name: (*candidates[name], steps[name]) for name in candidates})
    if not Strategy(chosen).hierarchical:  # the least flat plan joins the trial only to check a relaying choice
        planned = {name: kept for name, kept in planned.items() if candidates[name][0] <= least * (1 + keep_within)}
    measured = {}
    if keep_within > NEAR_TIE and len(planned) > 1:
        turns = trial({name: plan for name, (plan, _) in planned.items()})
        measured = {name: statistics.median(times) for name, times in turns.items()}
        chosen = faster_in_every_turn(turns, chosen)
    plan, stats = planned[chosen]
    requested = strategy if strategy == "auto" else Strategy(strategy).value
    return plan, stats, StrategyChoice(plan.strategy, requested, model.name, candidates, steps, measured)
