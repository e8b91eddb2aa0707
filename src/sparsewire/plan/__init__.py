"""Plan: the pure inspector, without MPI. Communication plans (:func:`build_plan` for every rank in one
process, :func:`build_rank_plan_collective` for one rank of a job), their strategies, the vertex-cover
solver, volumes and counts (:func:`plan_stats`, :func:`strategy_stats`), the cost model
(:func:`predicted_seconds`), the executor modes a plan runs in, and the partition-and-strategy advisor
(:func:`advise`)."""

from sparsewire.plan.advisor import advise
from sparsewire.plan.blocks import LocalBlocks, split_local_rows
from sparsewire.plan.cover import maximum_matching_size, minimum_vertex_cover
from sparsewire.plan.modes import MODES, Mode, layout_for_mode
from sparsewire.plan.plan import CommPlan, Exchange, RankPlan, build_plan, build_rank_plan_collective
from sparsewire.plan.stats import PlanStats, block_stats, plan_stats, predicted_seconds, rowwise_stats, strategy_stats
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, FLAT_STRATEGIES, Strategy, parse_strategies

__all__ = [
    "CommPlan",
    "EXECUTABLE_STRATEGIES",
    "FLAT_STRATEGIES",
    "MODES",
    "Mode",
    "advise",
    "layout_for_mode",
    "predicted_seconds",
    "Exchange",
    "LocalBlocks",
    "PlanStats",
    "RankPlan",
    "Strategy",
    "block_stats",
    "build_plan",
    "build_rank_plan_collective",
    "maximum_matching_size",
    "minimum_vertex_cover",
    "parse_strategies",
    "plan_stats",
    "rowwise_stats",
    "split_local_rows",
    "strategy_stats",
]
