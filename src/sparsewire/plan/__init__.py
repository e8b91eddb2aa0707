"""The inspector: communication plans, their strategies, the vertex-cover solver and volumes."""

from sparsewire.plan.blocks import LocalBlocks, split_local_rows
from sparsewire.plan.cover import maximum_matching_size, minimum_vertex_cover
from sparsewire.plan.plan import CommPlan, Exchange, RankPlan, build_plan, build_rank_plan_collective
from sparsewire.plan.stats import PlanStats, block_stats, plan_stats, rowwise_stats, strategy_stats
from sparsewire.plan.strategies import Strategy, parse_strategies

__all__ = [
    "CommPlan",
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
