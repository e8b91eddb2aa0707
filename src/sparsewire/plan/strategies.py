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
"""

from __future__ import annotations

from enum import Enum

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.plan.blocks import LocalBlocks
from sparsewire.plan.cover import minimum_vertex_cover

__all__ = ["Strategy", "parse_strategies", "choose_row_based"]


class Strategy(str, Enum):
    """A named communication strategy (see the module docstring for the formulas)."""

    BLOCK = "block"
    ROWWISE = "rowwise"
    COLUMN = "column"
    ROW = "row"
    JOINT = "joint"

    @property
    def executable(self) -> bool:
        """Whether the executor can run it (``rowwise`` only models per-nonzero fetches)."""
        return self is not Strategy.ROWWISE

    def __str__(self) -> str:
        return self.value


ALL_STRATEGIES = tuple(Strategy)
EXECUTABLE_STRATEGIES = tuple(s for s in Strategy if s.executable)


def parse_strategies(text: str, *, executable_only: bool = False) -> list[Strategy]:
    """Parse a comma-separated strategy list (``all`` means every one that applies)."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError("no strategy given; choose from " + ", ".join(s.value for s in Strategy))
    if names == ["all"]:
        return list(EXECUTABLE_STRATEGIES if executable_only else ALL_STRATEGIES)
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
        if strategy not in chosen:
            chosen.append(strategy)
    return chosen


def choose_row_based(strategy: Strategy, blocks: LocalBlocks, n_ranks: int) -> np.ndarray:
    """For each off-diagonal nonzero of ``blocks``, True if it is served row-based (partial C row
    pushed by the B-row owner), False if column-based (B row fetched).

    ``joint`` solves one minimum vertex cover on the union of the rank's off-diagonal blocks:
    row vertices are (local row, source rank) pairs and column vertices are global columns, so
    the blocks are disjoint components and the union's optimum is the sum of per-block optima.
    """
    n_offdiag = blocks.rows.size
    if strategy in (Strategy.BLOCK, Strategy.COLUMN, Strategy.ROWWISE):
        return np.zeros(n_offdiag, bool)
    if strategy is Strategy.ROW:
        return np.ones(n_offdiag, bool)
    if n_offdiag == 0:
        return np.zeros(0, bool)
    row_keys, row_vertex = np.unique(blocks.rows * n_ranks + blocks.sources, return_inverse=True)
    col_keys, col_vertex = np.unique(blocks.cols, return_inverse=True)
    graph = sp.csr_array(
        (np.ones(n_offdiag, np.int8), (row_vertex, col_vertex)), shape=(row_keys.size, col_keys.size)
    )
    _, col_in_cover = minimum_vertex_cover(graph)
    # A nonzero whose column is in the cover goes column-based (also when its row is in it too).
    return ~col_in_cover[col_vertex]
