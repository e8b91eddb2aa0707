"""Communication strategies: how each off-diagonal nonzero of A gets served.

Per off-diagonal block A(p, q) (rows owned by p, B rows owned by q), element size s, width k:

* ``block``   sparsity-oblivious (CAGNET / MGG-GCN): q sends all its B rows to every other
  rank; total ``s*k*m*(P-1)`` (CoLa eq. 5, SHIRO eq. 1).
* ``rowwise`` one B-row fetch per nonzero (MGG): ``s*k*nnz(offdiag)`` (CoLa eq. 6). Accounting only.
* ``column``  q sends each B row p needs once: ``s*k*|Cols(A(p,q))|`` (CoLa eq. 7/9, SHIRO eq. 2).
* ``row``     q multiplies A(p, q) (sent to it once at setup) and sends partial C rows:
  ``s*k*|Rows(A(p,q))|`` (SHIRO eq. 3).
* ``joint``   minimum vertex cover of the bipartite graph of A(p, q) (SHIRO sec. V): a nonzero whose
  column is in the cover is served column-based, any other (its row is in the cover) row-based;
  ``s*k*|cover|`` = ``s*k*maximum matching``.

Hierarchical strategies (need a :class:`~sparsewire.topology.model.Topology`; routing in
:mod:`sparsewire.plan.hierarchy`), with groups g, h of ranks:

* ``column-hier`` (CoLa sec. 4.2-4.3) every nonzero column-based; a B row that ranks of group h need
  from q outside h crosses the slow link once, to a proxy in h, which forwards it inside h (a row
  only one rank of h needs goes to it directly: no merge, so no relay).
  Inter-group bytes ``s*k*sum_q sum_{h != group(q)} |union_{p in h} Cols(A(p,q))|``.
* ``joint-hier`` (SHIRO sec. VI) the per-pair ``joint`` choice; its column part routed as in
  ``column-hier``, its row part summed inside the source group (one rank of g adds the partial C
  rows for the same output row; a row one rank of g computes goes directly) and sent across once.
* ``joint-group`` (ours) one minimum vertex cover per (destination group h, source group g) on the
  block A(rows of h, columns of g); routed as ``joint-hier``. Inter-group bytes
  ``s*k*sum_{h != g} tau(A(h, g))``, never more than ``joint-hier`` or ``column-hier`` (the union of
  their per-pair choices is a cover of A(h, g)).
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from sparsewire.errors import InputError
from sparsewire.plan.blocks import LocalBlocks
from sparsewire.plan.cover import unit_cover_of_edges

__all__ = ["Strategy", "parse_strategies", "choose_row_based", "rank_cover_row_based", "cover_row_based"]


class Strategy(str, Enum):
    """A named communication strategy (see the module docstring for the formulas)."""

    BLOCK = "block"
    ROWWISE = "rowwise"
    COLUMN = "column"
    ROW = "row"
    JOINT = "joint"
    COLUMN_HIER = "column-hier"
    JOINT_HIER = "joint-hier"
    JOINT_GROUP = "joint-group"

    @property
    def executable(self) -> bool:
        """Whether the executor can run it (``rowwise`` only models per-nonzero fetches)."""
        return self is not Strategy.ROWWISE

    @property
    def hierarchical(self) -> bool:
        """Whether it routes traffic between groups through proxies / aggregators (needs a topology)."""
        return self in (Strategy.COLUMN_HIER, Strategy.JOINT_HIER, Strategy.JOINT_GROUP)

    def __str__(self) -> str:
        return self.value


ALL_STRATEGIES = tuple(Strategy)
FLAT_STRATEGIES = tuple(s for s in Strategy if not s.hierarchical)
EXECUTABLE_STRATEGIES = tuple(s for s in Strategy if s.executable)
HIERARCHICAL_STRATEGIES = tuple(s for s in Strategy if s.hierarchical)


def parse_strategies(text: str, *, executable_only: bool = False, hierarchical: bool = False) -> list[Strategy]:
    """Not collective. Parse a comma-separated strategy list (``all`` means every one that applies).

    ``hierarchical``: whether a topology is given; without one, ``all`` means the flat strategies
    and naming a hierarchical one is an error.
    """
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError("no strategy given; choose from " + ", ".join(s.value for s in Strategy))
    if names == ["all"]:
        return [s for s in ALL_STRATEGIES if (s.executable or not executable_only) and (hierarchical or not s.hierarchical)]
    chosen = []
    for name in names:
        try:
            strategy = Strategy(name)
        except ValueError:
            raise InputError(f"unknown strategy {name!r}; choose from {', '.join(s.value for s in Strategy)} or all") from None
        if executable_only and not strategy.executable:
            raise InputError(
                "strategy 'rowwise' is accounting only (one B-row fetch per nonzero, as MGG does) and cannot be "
                "executed; run column, row, joint or block, or use 'sparsewire analyze' to see rowwise volumes"
            )
        if strategy.hierarchical and not hierarchical:
            raise InputError(
                f"strategy {strategy.value!r} routes traffic between groups of ranks and needs a topology; "
                "add --group-size G or --topology PRESET"
            )
        if strategy not in chosen:
            chosen.append(strategy)
    return chosen


def choose_row_based(strategy: Strategy, blocks: LocalBlocks, n_ranks: int) -> np.ndarray:
    """Not collective. For each off-diagonal nonzero of ``blocks``, True if it is served row-based (partial C row
    pushed by the B-row owner), False if column-based (B row fetched).

    ``joint`` (and ``joint-hier``, ``joint-group`` before the group-level step of
    :mod:`sparsewire.plan.hierarchy`) solves one minimum vertex cover on the union of the rank's
    off-diagonal blocks: row vertices are (local row, source rank) pairs and column vertices are
    global columns, so the blocks are disjoint components and the union's optimum is the sum of
    per-block optima.
    """
    n_offdiag = blocks.rows.size
    if strategy in (Strategy.BLOCK, Strategy.COLUMN, Strategy.ROWWISE, Strategy.COLUMN_HIER):
        return np.zeros(n_offdiag, bool)
    if strategy is Strategy.ROW:
        return np.ones(n_offdiag, bool)
    return rank_cover_row_based(blocks.rows, blocks.sources, blocks.cols, n_ranks)


def rank_cover_row_based(local_rows: np.ndarray, sources: np.ndarray, cols: np.ndarray, n_ranks: int) -> np.ndarray:
    """Not collective. ``joint``'s choice for one rank's off-diagonal nonzeros (local row, source rank, global
    column): the minimum vertex cover of :func:`cover_row_based` with (local row, source) row vertices and
    global-column vertices. The one definition of that graph, for plans and for counted volumes alike."""
    return cover_row_based(np.asarray(local_rows, np.int64) * n_ranks + sources, np.asarray(cols, np.int64))


def cover_row_based(row_keys: np.ndarray, col_keys: np.ndarray) -> np.ndarray:
    """Not collective. Serve each nonzero (row vertex ``row_keys[e]``, column vertex ``col_keys[e]``) row-based or
    column-based by a minimum vertex cover of the bipartite graph they form: True where the column
    is not in the cover (so the row is)."""
    if row_keys.size == 0:
        return np.zeros(0, bool)
    row_ids, row_vertex = np.unique(row_keys, return_inverse=True)
    col_ids, col_vertex = np.unique(col_keys, return_inverse=True)
    _, col_in_cover = unit_cover_of_edges(row_vertex, col_vertex, (row_ids.size, col_ids.size))
    # A nonzero whose column is in the cover goes column-based (also when its row is in it too).
    return ~col_in_cover[col_vertex]
