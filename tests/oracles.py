"""Independent references for the tests: volumes straight from the paper formulas, block by
block, and a pure-NumPy replay of a plan's messages."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_bipartite_matching


def formula_volumes(matrix, row_partition, col_partition, k: int, element_bytes: int) -> dict[str, int]:
    """Bytes per multiply of each strategy, from CoLa eq. 5-7 and SHIRO eq. 1-3 and sec. V,
    computed per off-diagonal block A(p, q) (the planner works per rank instead)."""
    coo = sp.coo_array(matrix)
    n_ranks = row_partition.n_parts
    p = np.searchsorted(row_partition.offsets, coo.row, side="right") - 1
    q = np.searchsorted(col_partition.offsets, coo.col, side="right") - 1
    off = p != q
    rows, cols, p, q = coo.row[off].astype(np.int64), coo.col[off].astype(np.int64), p[off], q[off]
    block_of = p * n_ranks + q  # one key per off-diagonal block A(p, q)
    unique_cols = np.unique(block_of * matrix.shape[1] + cols).size
    unique_rows = np.unique(block_of * matrix.shape[0] + rows).size
    matching = 0
    order = np.argsort(block_of, kind="stable")
    for in_block in np.split(order, np.flatnonzero(np.diff(block_of[order])) + 1) if rows.size else []:
        r, c = np.unique(rows[in_block], return_inverse=True)[1], np.unique(cols[in_block], return_inverse=True)[1]
        block = sp.csr_array((np.ones(r.size), (r, c)), shape=(r.max() + 1, c.max() + 1))
        matching += int(np.count_nonzero(maximum_bipartite_matching(block, perm_type="column") >= 0))
    unit = k * element_bytes
    return {
        "block": unit * matrix.shape[1] * (n_ranks - 1),
        "rowwise": unit * int(off.sum()),
        "column": unit * unique_cols,
        "row": unit * unique_rows,
        "joint": unit * matching,
    }


def replay_plan(plan, b_dense: np.ndarray) -> np.ndarray:
    """Run a global plan without MPI: exchange by exchange, every rank packs with its send matrix
    (over its B rows and the input exchange's receive buffer), the slices are delivered by
    (source, destination), and every rank adds its receive matrix times what it got. Returns C."""
    n_ranks = plan.n_ranks
    b_local = [b_dense[slice(*plan.col_partition.range(q))] for q in range(n_ranks)]
    received = [[] for _ in range(n_ranks)]
    results = [rank_plan.diagonal @ b_local[p] for p, rank_plan in enumerate(plan.ranks)]
    n_exchanges = len(plan.ranks[0].exchanges)
    for index in range(n_exchanges):
        sends = {}
        for q, rank_plan in enumerate(plan.ranks):
            exchange = rank_plan.exchanges[index]
            source = b_local[q]
            if exchange.input is not None:
                source = np.vstack([source, received[q][exchange.input]])
            buffer = exchange.send_matrix @ source
            bounds = np.concatenate(([0], np.cumsum(exchange.send_counts)))
            for position, destination in enumerate(exchange.send_ranks):
                sends[(q, int(destination))] = buffer[bounds[position] : bounds[position + 1]]
        for p, rank_plan in enumerate(plan.ranks):
            exchange = rank_plan.exchanges[index]
            pieces = [sends.pop((int(q), p)) for q in exchange.recv_ranks]
            for piece, rows in zip(pieces, exchange.recv_counts):
                assert piece.shape[0] == rows, "sender and receiver disagree on a message size"
            buffer = np.vstack(pieces) if pieces else np.zeros((0, b_dense.shape[1]))
            received[p].append(buffer)
            results[p] = results[p] + exchange.receive_matrix @ buffer
        assert not sends, f"messages nobody receives: {sorted(sends)}"
    return np.vstack(results)


def random_integer_matrix(rng, n_rows: int, n_cols: int, density: float) -> sp.csr_array:
    """Random sparse matrix with integer values in -9..9 (zeros dropped), empty rows and columns likely."""
    matrix = sp.random_array((n_rows, n_cols), density=density, rng=rng, format="csr")
    matrix.data = rng.integers(1, 10, matrix.nnz) * rng.choice([-1, 1], matrix.nnz)
    return sp.csr_array(matrix, dtype=np.float64)


def _matching(rows: np.ndarray, cols: np.ndarray) -> int:
    if rows.size == 0:
        return 0
    r, c = np.unique(rows, return_inverse=True)[1], np.unique(cols, return_inverse=True)[1]
    block = sp.csr_array((np.ones(r.size), (r, c)), shape=(r.max() + 1, c.max() + 1))
    return int(np.count_nonzero(maximum_bipartite_matching(block, perm_type="column") >= 0))


def inter_group_formulas(matrix, row_partition, col_partition, groups: np.ndarray, k: int, element_bytes: int) -> dict[str, int]:
    """Inter-group bytes of ``column-hier`` and ``joint-group`` straight from their formulas:
    column-hier = s k sum_q sum_{h != group(q)} |union_{p in h} Cols(A(p, q))|;
    joint-group = s k sum_{h != g} maximum matching of A(rows of h, columns of g)."""
    coo = sp.coo_array(matrix)
    p = np.searchsorted(row_partition.offsets, coo.row, side="right") - 1
    q = np.searchsorted(col_partition.offsets, coo.col, side="right") - 1
    h, g = groups[p], groups[q]
    off = h != g
    rows, cols, q, h, g = coo.row[off].astype(np.int64), coo.col[off].astype(np.int64), q[off], h[off], g[off]
    n_groups = int(groups.max()) + 1
    union_cols = np.unique((q * n_groups + h) * matrix.shape[1] + cols).size
    matching = sum(
        _matching(rows[(h == dst) & (g == src)], cols[(h == dst) & (g == src)]) for dst, src in set(zip(h.tolist(), g.tolist()))
    )
    unit = k * element_bytes
    return {"column-hier": unit * union_cols, "joint-group": unit * matching}


def entries_left_to_the_collector(action) -> tuple[object, int, int]:
    """``action()``'s result; how many python-graphblas matrices it made and dropped were still left to Python's cycle
    collector (each Matrix holds a cycle through its ``.ss``); and the entries they held when it came for them."""
    import gc

    import pytest

    from sparsewire.spgemm.graphblas_loader import graphblas as gb

    held, collecting = [], [False]
    finalize = gb.Matrix.__del__

    def recording(matrix):
        if collecting[0]:
            held.append(int(matrix.nvals))
        finalize(matrix)

    gc.collect()
    gc.disable()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gb.Matrix, "__del__", recording)
        try:
            result = action()
            collecting[0] = True
            gc.collect()
        finally:
            collecting[0] = False
            gc.enable()
    return result, len(held), sum(held)
