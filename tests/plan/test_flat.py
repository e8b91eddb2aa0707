"""The flat planner (``plan/flat.py``: each rank's plan from its own rows, the send side written by the
exchange into the plan's arrays) through the stand-in communicator of ``bench/planner/rank_planning.py`` (what
every other rank sends a rank, made by the same function on those ranks' rows): exact plans on a
hand-made matrix, and plans equal to the records planner's (``build_plan``) on random ones, with the
chunked passes cut small so that every pass boundary is crossed. Real MPI: ``tests/exec/mpi_driver.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import sparsewire.plan.flat as flat
from oracles import random_integer_matrix
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition, even_rows
from sparsewire.plan.plan import build_plan, build_rank_plan_collective
from sparsewire.plan.strategies import Strategy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "planner"))
from rank_planning import SliceComm, incoming_parts  # noqa: E402

FLAT = ["column", "row", "joint"]


def rank_plans(matrix, rows: RowPartition, cols: RowPartition, strategy: str, layout: str = "merged") -> list:
    csr, csc = sp.csr_array(matrix), sp.csc_array(matrix)
    plans = []
    for rank in range(rows.n_parts):
        incoming = incoming_parts(csr, csc, rows, cols, rank, strategy)
        comm = SliceComm(rank, rows.n_parts, incoming)
        plans.append(build_rank_plan_collective(comm, csr[slice(*rows.range(rank))], rows, cols, strategy, layout=layout))
    return plans


def hand_made() -> sp.csr_array:
    # 7 x 7 over ranks of rows 0-1, 2-3, 4-6; values 1..9 so that every entry is told apart.
    entries = [(0, 4), (1, 4), (0, 5), (2, 0), (3, 6), (5, 1), (6, 1), (6, 2), (4, 3)]
    rows, cols = zip(*entries)
    return sp.csr_array((np.arange(1.0, 10.0), (rows, cols)), shape=(7, 7))


def test_hand_made_column_plan():
    parts = even_rows(7, 3)
    plans = rank_plans(hand_made(), parts, parts, "column")
    first = plans[0].exchanges[0]
    # Rank 0 needs B rows 4 and 5 from rank 2: row 0 reads both (values 1, 3), row 1 row 4 (value 2).
    assert first.recv_ranks.tolist() == [2] and first.recv_counts.tolist() == [2]
    assert first.receive_keys.tolist() == [4, 5] and first.receive_kinds.tolist() == [0, 0]
    assert first.receive_matrix.toarray().tolist() == [[1, 3], [2, 0]]
    last = plans[2].exchanges[0]
    # Rank 2 sends rank 0 its rows 4 and 5 and rank 1 its row 6: local rows 0, 1, 2 selected.
    assert last.send_ranks.tolist() == [0, 1] and last.send_counts.tolist() == [2, 1]
    assert last.send_matrix.toarray().tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert plans[2].setup_entries == 0


def test_hand_made_row_plan():
    parts = even_rows(7, 3)
    plans = rank_plans(hand_made(), parts, parts, "row")
    last = plans[2].exchanges[0]
    # Rank 2 computes rank 0's rows 0 (A entries 1, 3 on its B rows 4, 5) and 1 (2 on row 4), rank 1's row 3
    # (5 on row 6): partial C rows, kind DIRECT_C, in (receiver, row) order.
    assert last.send_ranks.tolist() == [0, 1] and last.send_counts.tolist() == [2, 1]
    assert last.send_matrix.toarray().tolist() == [[1, 3, 0], [2, 0, 0], [0, 0, 5]]
    assert last.send_kinds.tolist() == [1, 1, 1] and plans[2].setup_entries == 4
    first = plans[0].exchanges[0]
    assert first.receive_keys.tolist() == [0, 1] and first.receive_kinds.tolist() == [1, 1]
    assert first.receive_matrix.toarray().tolist() == [[1, 0], [0, 1]]


def test_hand_made_joint_mixes_both_kinds():
    parts = even_rows(7, 3)
    plans = rank_plans(hand_made(), parts, parts, "joint")
    # A(2, 0) = {(5, 1), (6, 1)}: one column covers both, so rank 0 sends B row 1 (not two partial rows);
    # A(2, 1) = {(6, 2), (4, 3)}: cover 2. Every plan equals the records planner's.
    records = build_plan(hand_made(), parts, parts, "joint")
    assert all(plan.equals(expected) for plan, expected in zip(plans, records.ranks))
    received = plans[2].exchanges[0]
    assert received.recv_ranks.tolist() == [0, 1] and 1 in received.receive_keys[received.receive_kinds == 0].tolist()


def random_partition(rng, n: int, parts: int) -> RowPartition:
    cuts = np.sort(rng.integers(0, n + 1, parts - 1))
    return RowPartition(np.concatenate([[0], cuts, [n]]).astype(np.int64))


@pytest.mark.parametrize("trial", range(10))
def test_random_plans_equal_the_records_planner(rng, trial, monkeypatch):
    monkeypatch.setattr(flat, "_MIN_CHUNK", int(rng.integers(1, 6)))  # many passes, boundaries inside rows
    n_rows, n_cols = (int(v) for v in rng.integers(1, 50, 2))
    matrix = random_integer_matrix(rng, n_rows, n_cols, rng.uniform(0.02, 0.4))
    if trial % 3 == 1:  # stored zeros and duplicates stay entries of their own, as the records planner keeps them
        coo = sp.coo_array(matrix)
        doubled = np.concatenate([np.arange(coo.nnz), rng.integers(0, max(coo.nnz, 1), coo.nnz // 3)])
        values = coo.data[doubled] * (rng.random(doubled.size) < 0.8)
        matrix = sp.csr_array((values, (coo.row[doubled], coo.col[doubled])), shape=matrix.shape)
    if trial % 3 == 2:
        matrix = sp.csr_array(matrix.astype(np.int64))
    n_ranks = int(rng.integers(1, 9))
    rows, cols = random_partition(rng, n_rows, n_ranks), random_partition(rng, n_cols, n_ranks)
    for strategy in FLAT:
        for layout in ("merged", "pipelined"):
            records = build_plan(matrix, rows, cols, strategy, layout=layout)
            plans = rank_plans(matrix, rows, cols, strategy, layout)
            for rank, plan in enumerate(plans):
                assert plan.equals(records.ranks[rank]), (strategy, layout, rank)
                assert plan.setup_entries == records.ranks[rank].setup_entries


def test_flat_planner_takes_only_what_it_builds():
    assert flat.plans_flat(Strategy.JOINT, "merged", 4, False)
    assert flat.plans_flat(Strategy.ROW, "pipelined", 1, False)
    assert not flat.plans_flat(Strategy.COLUMN, "pipelined", 2, False)  # rounds over groups: records planner
    assert not flat.plans_flat(Strategy.BLOCK, "merged", 1, False)
    assert not flat.plans_flat(Strategy.JOINT_HIER, "merged", 2, False)
    assert not flat.plans_flat(Strategy.COLUMN, "merged", 1, True)  # the bit-packed setup exchange


def test_exchange_beyond_mpi_counts_is_refused_by_every_rank(monkeypatch):
    # MPI's counts are C ints: a share of 2^31 entries would wrap. Here the limit is cut to 3 entries: the
    # hand-made matrix's ranks send and receive more, and each refuses before any Alltoallv.
    monkeypatch.setattr(flat, "_MPI_COUNT_LIMIT", 3)
    parts = even_rows(7, 3)
    with pytest.raises(InputError, match="beyond MPI's int counts.*more ranks"):
        rank_plans(hand_made(), parts, parts, "row")
