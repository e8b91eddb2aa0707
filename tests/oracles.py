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
    unique_cols = np.unique(np.stack([p, q, cols]), axis=1).shape[1] if rows.size else 0
    unique_rows = np.unique(np.stack([p, q, rows]), axis=1).shape[1] if rows.size else 0
    matching = 0
    for key in np.unique(p * n_ranks + q):
        in_block = (p * n_ranks + q) == key
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
    """Run a global plan without MPI: every rank packs with its send matrix, the slices are
    delivered by (source, destination), every rank computes its rows. Returns the global C."""
    sends = {}
    for q, rank_plan in enumerate(plan.ranks):
        start, stop = plan.col_partition.range(q)
        buffer = rank_plan.send_matrix @ b_dense[start:stop]
        bounds = np.concatenate(([0], np.cumsum(rank_plan.send_rows())))
        for index, destination in enumerate(rank_plan.send_ranks):
            sends[(q, int(destination))] = buffer[bounds[index] : bounds[index + 1]]
    blocks = []
    for p, rank_plan in enumerate(plan.ranks):
        start, stop = plan.col_partition.range(p)
        pieces = [sends.pop((int(q), p)) for q in rank_plan.recv_ranks]
        for piece, rows in zip(pieces, rank_plan.recv_rows()):
            assert piece.shape[0] == rows, "sender and receiver disagree on a message size"
        received = np.vstack(pieces) if pieces else np.zeros((0, b_dense.shape[1]))
        blocks.append(rank_plan.diagonal @ b_dense[start:stop] + rank_plan.receive_matrix @ received)
    assert not sends, f"messages nobody receives: {sorted(sends)}"
    return np.vstack(blocks)


def random_integer_matrix(rng, n_rows: int, n_cols: int, density: float) -> sp.csr_array:
    """Random sparse matrix with integer values in -9..9 (zeros dropped), empty rows and columns likely."""
    matrix = sp.random_array((n_rows, n_cols), density=density, rng=rng, format="csr")
    matrix.data = rng.integers(1, 10, matrix.nnz) * rng.choice([-1, 1], matrix.nnz)
    return sp.csr_array(matrix, dtype=np.float64)
