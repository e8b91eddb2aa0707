"""Counted volumes of the flat strategies (sparsewire.plan.counted) against the volumes of their built plans:
equal field by field on hand-made and random inputs (uneven and empty ranks, duplicate entries, explicit
zeros, rectangular matrices), with and without a topology."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from oracles import random_integer_matrix
from sparsewire._lib.distinct import distinct
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.partition import RowPartition, even_rows
from sparsewire.plan import build_plan, plan_stats, strategy_stats
from sparsewire.plan.counted import counted_sends
from sparsewire.topology.model import Topology

FIELDS = ("sources", "destinations", "steps", "message_bytes", "message_counts")


def assert_same_volumes(counted, planned) -> None:
    for field in FIELDS:
        assert np.array_equal(getattr(counted, field), getattr(planned, field)), field
    assert counted.setup_bytes == planned.setup_bytes
    assert np.array_equal(counted.rank_entries, planned.rank_entries)
    assert np.array_equal(counted.rank_diagonal_entries, planned.rank_diagonal_entries)
    assert np.array_equal(counted.rank_inter_group_entries, planned.rank_inter_group_entries)
    assert counted.as_dict() == planned.as_dict()


def random_partition(rng, n: int, parts: int) -> RowPartition:
    """Contiguous parts of random sizes, some of them empty."""
    cuts = np.sort(rng.integers(0, n + 1, parts - 1))
    return RowPartition(np.concatenate([[0], cuts, [n]]).astype(np.int64))


def test_hand_made_counts_are_exact():
    # 6 x 6, ranks own rows/columns 0-1, 2-3, 4-5. Off-diagonal: rank 0 needs columns 2, 3 (rank 1) and 4 (rank 2);
    # rank 2 needs column 0 (rank 0) from rows 4 and 5.
    entries = [(0, 2), (1, 2), (0, 3), (1, 4), (4, 0), (5, 0), (2, 2), (5, 5)]
    matrix = sp.csr_array((np.arange(1.0, 9.0), tuple(zip(*entries))), shape=(6, 6))
    parts = even_rows(6, 3)
    column = counted_sends(matrix, parts, parts, "column")
    assert [a.tolist() for a in column[:3]] == [[0, 1, 2], [2, 0, 0], [1, 2, 1]] and column[3] == 0
    row = counted_sends(matrix, parts, parts, "row")  # partial C rows (i, q): (0, 1), (1, 1), (1, 2); (4, 0), (5, 0)
    assert [a.tolist() for a in row[:3]] == [[0, 1, 2], [2, 0, 0], [2, 2, 1]] and row[3] == 6  # six off-diagonal entries
    # Operator entries per rank. column: its rows' nonzeros (4, 1, 3) + the B rows it copies out (1, 2, 1).
    # row: 0 - 4 + 2 (it computes (4, 0), (5, 0)) + 3 partial rows it adds; 1 + 3; 3 - 2 + 1 + 2.
    assert column[4].tolist() == [5, 3, 4] and row[4].tolist() == [5, 4, 4]
    # Diagonal blocks: rank 0 owns none of its entries' columns, rank 1 has (2, 2), rank 2 has (5, 5); any strategy.
    assert column[5].tolist() == row[5].tolist() == [0, 1, 1]
    # joint: rank 0's graph has a matching of three, so a cover of three; rank 2's is column 0 (serves rows 4 and 5)
    joint = counted_sends(matrix, parts, parts, "joint")
    assert joint[2].sum() == 4 and [a.tolist() for a in joint[:2]] == [[0, 1, 2], [2, 0, 0]] and joint[5].tolist() == [0, 1, 1]
    # Ranks 0 and 1 in one group, rank 2 in another: (1, 4), (4, 0) and (5, 0) cross. column: rank 0 applies (1, 4)
    # and copies B row 0 out, rank 2 applies two and copies B row 4 out. row: rank 0 computes (4, 0), (5, 0) and
    # adds partial row (1, 2); rank 2 computes (1, 4) and adds (4, 0), (5, 0). Without groups, none.
    groups = np.array([0, 0, 1])
    assert column[6].tolist() == row[6].tolist() == [0, 0, 0]
    assert counted_sends(matrix, parts, parts, "column", groups=groups)[6].tolist() == [2, 0, 3]
    assert counted_sends(matrix, parts, parts, "row", groups=groups)[6].tolist() == [3, 0, 3]
    for strategy in ("column", "row", "joint"):
        planned = plan_stats(
            build_plan(matrix, parts, parts, strategy, Topology.nodes(2)).ranks, 4, 8, topology=Topology.nodes(2)
        )
        assert (
            counted_sends(matrix, parts, parts, strategy, groups=groups)[6].tolist() == planned.rank_inter_group_entries.tolist()
        )


@pytest.mark.parametrize("strategy", ["column", "row", "joint"])
def test_counted_volumes_equal_the_built_plans_volumes_on_random_inputs(rng, strategy):
    for trial in range(12):
        n_rows, n_cols = int(rng.integers(1, 60)), int(rng.integers(1, 60))
        if trial % 2:
            n_cols = n_rows
        parts = int(rng.integers(1, 8))
        matrix = random_integer_matrix(rng, n_rows, n_cols, float(rng.uniform(0.02, 0.4)))
        rows = random_partition(rng, n_rows, parts) if trial % 3 else even_rows(n_rows, min(parts, n_rows))
        cols = random_partition(rng, n_cols, rows.n_parts)
        topology = Topology.nodes(int(rng.integers(1, 4))) if trial % 2 else None
        k, element_bytes = int(rng.integers(1, 40)), int(rng.choice([4, 8]))
        counted = strategy_stats(matrix, rows, cols, strategy, k, element_bytes, topology)
        planned = plan_stats(build_plan(matrix, rows, cols, strategy, topology).ranks, k, element_bytes, topology=topology)
        assert_same_volumes(counted, planned)


def test_duplicates_and_explicit_zeros_count_as_the_plan_counts_them(rng):
    """A COO input with repeated (i, j) and stored zeros: one nonzero each, as split_local_rows sums them; the
    caller's matrix is left as it was."""
    n = 40
    rows_, cols_ = rng.integers(0, n, 300), rng.integers(0, n, 300)
    values = rng.integers(-2, 3, 300).astype(float)  # a fifth of them stored zeros
    coo = sp.coo_array((values, (rows_, cols_)), shape=(n, n))
    parts = random_partition(rng, n, 5)
    for strategy in ("column", "row", "joint"):
        counted = strategy_stats(coo, parts, parts, strategy, 8, 4)
        planned = plan_stats(build_plan(coo, parts, parts, strategy).ranks, 8, 4)
        assert_same_volumes(counted, planned)
    assert coo.nnz == 300 and np.array_equal(coo.row, rows_)  # not summed in place


def test_a_planted_miscount_is_caught(rng, monkeypatch):
    """The comparison can fail: counting B rows once per (p, j) pair is what the plan sends; counting them once
    per nonzero (a missing deduplication) must differ on a matrix where two rows of a rank share a column."""
    import sparsewire.plan.counted as counted

    matrix = sp.csr_array(np.array([[0, 0, 1, 0], [0, 0, 1, 0], [0, 0, 1, 1], [0, 0, 0, 1]], float))
    parts = even_rows(4, 2)
    planned = plan_stats(build_plan(matrix, parts, parts, "column").ranks, 4, 4)
    monkeypatch.setattr(counted, "distinct", lambda keys: np.sort(keys))
    wrong = strategy_stats(matrix, parts, parts, "column", 4, 4)
    with pytest.raises(AssertionError):
        assert_same_volumes(wrong, planned)
    monkeypatch.setattr(counted, "distinct", distinct)
    assert_same_volumes(strategy_stats(matrix, parts, parts, "column", 4, 4), planned)


def test_counted_sends_refuses_what_it_cannot_count():
    matrix = sp.csr_array(np.eye(4))
    parts = even_rows(4, 2)
    with pytest.raises(InputError, match="not counted without its plan"):
        counted_sends(matrix, parts, parts, "joint-hier")
    with pytest.raises(PlanMismatchError, match="partitions cover 5 rows"):
        counted_sends(matrix, even_rows(5, 2), parts, "column")
    with pytest.raises(PlanMismatchError, match="one rank count"):
        counted_sends(matrix, parts, even_rows(4, 3), "column")


def test_distinct_values_and_counts_equal_numpys_unique(rng):
    from sparsewire._lib.distinct import distinct_counts

    for size in (0, 1, 2, 17, 5000):
        values = rng.integers(-50, 50, size) * int(rng.integers(1, 2**40))
        expected, expected_counts = np.unique(values, return_counts=True)
        assert np.array_equal(distinct(values), expected)
        found, counts = distinct_counts(values.reshape(-1, 1))
        assert np.array_equal(found, expected) and np.array_equal(counts, expected_counts)
        own = values.copy()
        assert np.array_equal(distinct(own, in_place=True), expected) and np.array_equal(own, np.sort(values))


def test_block_closed_forms_equal_its_messages_and_its_plan(rng):
    """BlockStats' totals and per-rank bytes (closed forms) against sums over the messages it makes, and all of
    it against the built block plan, on partitions with empty ranks, with and without a topology."""
    from sparsewire.plan import PlanStats, block_stats

    for trial in range(6):
        n = int(rng.integers(1, 30))
        matrix = random_integer_matrix(rng, n, n, 0.2)
        parts = random_partition(rng, n, int(rng.integers(1, 9)))
        topology = Topology.nodes(2) if trial % 2 else None
        closed = block_stats(parts, 5, 8, topology)
        messages = PlanStats(closed.strategy, closed.n_ranks, 5, 8, *(np.array(getattr(closed, f)) for f in FIELDS), 0, topology)
        assert (closed.messages, closed.total_bytes) == (messages.messages, messages.total_bytes)
        assert np.array_equal(closed.send_bytes_per_rank, messages.send_bytes_per_rank)
        assert np.array_equal(closed.recv_bytes_per_rank, messages.recv_bytes_per_rank)
        assert closed.as_dict() == messages.as_dict()
        planned = plan_stats(build_plan(matrix, parts, parts, "block", topology).ranks, 5, 8, topology=topology)
        assert closed.as_dict() == planned.as_dict()
        assert np.array_equal(strategy_stats(matrix, parts, parts, "block", 5, 8).rank_entries, planned.rank_entries)
        assert np.array_equal(closed.pair_bytes, planned.pair_bytes)


def test_packed_boxes_round_trip_exactly(rng):
    """The planner's all-to-all sends a rank's boxes as one int64 buffer: every box's words in target order, each
    target's count, and unpacking every received buffer gives back the boxes' records, values bit for bit."""
    from sparsewire.plan.records import Records, make_records, outboxes, packed_outboxes, unpack_all

    n_ranks, owner = 7, 3
    for n, m in ((0, 0), (1, 0), (60, 25), (300, 0)):
        senders = rng.integers(0, n_ranks, n)
        terms = (
            rng.integers(0, 6, m),
            rng.choice(senders, m) if n else np.zeros(0, np.int64),  # a term goes to a rank that gets records
            rng.integers(0, n_ranks, m),
            rng.integers(-(2**40), 2**40, m),
            rng.integers(0, 99, m),
            rng.standard_normal(m) * 10.0 ** rng.integers(-300, 300, m),
        )
        mine = make_records(rng.integers(0, 6, n), senders, rng.integers(0, n_ranks, n), rng.integers(0, 2**50, n), 2, terms)
        boxes = outboxes(mine, owner, n_ranks)
        buffer, sizes = packed_outboxes(mine, owner, n_ranks)
        for target, box in enumerate(boxes):  # the format, by hand: header, five record fields, terms
            start, words = int(sizes[:target].sum()), int(sizes[target])
            if box is None:
                assert words == 0
                continue
            k, t = box.key.size, box.term_key.size
            assert words == 2 + 5 * k + 6 * t and buffer[start : start + 2].tolist() == [k, t]
            assert np.array_equal(buffer[start + 2 + 3 * k : start + 2 + 4 * k], box.key)
        present = [box for box in boxes if box is not None]
        back = unpack_all(buffer, sizes)
        expected = Records.concat(present) if present else mine.select(slice(0, 0), slice(0, 0))
        for field, (a, b) in enumerate(zip(expected, back)):
            assert np.array_equal(a, b) and a.dtype == b.dtype, field
    with pytest.raises(PlanMismatchError, match="disagree with their headers"):
        unpack_all(buffer[:-1], sizes - np.eye(1, sizes.size, int(np.flatnonzero(sizes)[-1]), dtype=np.int64)[0])
