"""Group-aware routing: who relays B rows into a group, who sums partial C rows out of a group, and
the group-level vertex cover of ``joint-group``.

With the ranks in groups (level 0 of a :class:`~sparsewire.topology.model.Topology`):

* **Column proxy** (CoLa sec. 4.2.2, "local-rank matching"): the B rows that ranks of group h need
  from a rank q outside h cross the slow link once, to ``proxy(q, h)``, the rank of h whose local
  rank equals q's local rank (modulo the size of h, for a smaller last group). It forwards to each
  rank of h the rows that rank needs. ``balanced`` instead assigns the sources of h to h's ranks by
  longest-processing-time first on the bytes each source sends, so every rank of h receives about
  the same share from outside.
* **Row aggregator** (SHIRO sec. VI-A): the partial C rows that ranks of group g compute for a rank
  p outside g are summed at ``aggregator(g, p)``, the rank of g whose local rank equals p's (modulo
  the size of g), and cross the slow link once per output row.
* **Group-level cover** (``joint-group``): one minimum vertex cover per (destination group h,
  source group g) on the block of A with the rows of h and the columns of g. Row vertices are
  (global row, source group) pairs and column vertices global columns, so one cover over all of h's
  off-group nonzeros splits into independent per-g covers.
"""

from __future__ import annotations

import numpy as np

from sparsewire.plan.strategies import cover_row_based

__all__ = [
    "group_members",
    "local_ranks",
    "local_proxies",
    "balanced_proxies",
    "aggregators",
    "shared_columns",
    "group_cover_row_based",
]


def group_members(groups: np.ndarray) -> list[np.ndarray]:
    """Not collective. Ranks of each group, ascending."""
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(int(groups.max(initial=-1)) + 2))
    return [order[bounds[g] : bounds[g + 1]].astype(np.int64) for g in range(bounds.size - 1)]


def local_ranks(groups: np.ndarray) -> np.ndarray:
    """Not collective. Position of each rank inside its group."""
    result = np.zeros(groups.size, np.int64)
    for members in group_members(groups):
        result[members] = np.arange(members.size)
    return result


def local_proxies(groups: np.ndarray, group: int) -> np.ndarray:
    """Not collective. ``proxy[q]``: the rank of ``group`` that receives q's B rows for the whole group (-1 for q inside it)."""
    members = group_members(groups)[group]
    proxy = members[local_ranks(groups) % members.size]
    proxy[groups == group] = -1
    return proxy


def balanced_proxies(groups: np.ndarray, group: int, rows_from_source: np.ndarray) -> np.ndarray:
    """Not collective. ``proxy[q]`` spreading the received rows evenly: sources in order of decreasing rows (ties by
    rank) each go to the member of ``group`` with the fewest rows so far (ties by rank).

    ``rows_from_source[q]``: distinct B rows the group needs from q (the union over its ranks).
    """
    members = group_members(groups)[group]
    proxy = np.full(groups.size, -1, np.int64)
    load = np.zeros(members.size, np.int64)
    outside = np.flatnonzero(groups != group)
    for source in outside[np.argsort(-rows_from_source[outside], kind="stable")]:
        target = int(np.argmin(load))
        proxy[source] = members[target]
        load[target] += rows_from_source[source]
    return proxy


def aggregators(groups: np.ndarray, rank: int) -> np.ndarray:
    """Not collective. ``aggregator[g]``: the rank of group g that sums g's partial C rows for ``rank`` (-1
    for rank's own group)."""
    position = local_ranks(groups)[rank]
    result = np.array([members[position % members.size] for members in group_members(groups)], np.int64)
    result[groups[rank]] = -1
    return result


def shared_columns(member_needs: list[np.ndarray]) -> list[np.ndarray]:
    """Not collective. Per member of a group, the B rows (sorted unique columns of its ``member_needs``)
    that at least one other member needs too: the ones worth fetching once through a proxy."""
    if not member_needs:
        return []
    columns, counts = np.unique(np.concatenate(member_needs), return_counts=True)
    shared = columns[counts > 1]
    return [np.intersect1d(needs, shared, assume_unique=True) for needs in member_needs]


def group_cover_row_based(
    member_rows: list[np.ndarray], member_cols: list[np.ndarray], member_source_groups: list[np.ndarray], n_groups: int
) -> list[np.ndarray]:
    """Not collective. ``joint-group``'s choice for the off-group nonzeros of one destination group.

    Args:
        member_rows, member_cols, member_source_groups: per member rank, its off-group nonzeros as
            global row, global column and group owning the column.
    Returns:
        per member, True where the nonzero is served row-based (its column is not in the cover).
    """
    rows, cols = np.concatenate(member_rows), np.concatenate(member_cols)
    row_based = cover_row_based(rows * n_groups + np.concatenate(member_source_groups), cols)
    return np.split(row_based, np.cumsum([r.size for r in member_rows])[:-1])
