"""Planner: exact volumes per strategy on hand-made and random matrices, plan replay, stats."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from oracles import formula_volumes, random_integer_matrix, replay_plan
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.partition import RowPartition, even_rows, partition
from sparsewire.plan import block_stats, build_plan, plan_stats, rowwise_stats
from sparsewire.plan.blocks import split_local_rows
from sparsewire.plan.strategies import Strategy, choose_row_based, parse_strategies

EXECUTABLE = ["block", "column", "row", "joint"]


def volumes(matrix, rows, cols, k, element_bytes):
    result = {"rowwise": rowwise_stats(matrix, rows, cols, k, element_bytes)}
    for name in EXECUTABLE:
        result[name] = plan_stats(build_plan(matrix, rows, cols, name).ranks, k, element_bytes)
    return result


def shiro_figure_1d() -> sp.csr_array:
    """8 x 8, two ranks of 4 rows; A(0, 1) is SHIRO Fig. 1(d): b, c, d in row 0 (columns 5, 6, 7)
    and c, f, h in column 6 (rows 0, 1, 2); the diagonal blocks are full."""
    dense = np.zeros((8, 8))
    dense[:4, :4] = 1
    dense[4:, 4:] = 1
    for i, j in [(0, 5), (0, 6), (0, 7), (1, 6), (2, 6)]:
        dense[i, j] = 2
    return sp.csr_array(dense)


def test_shiro_figure_1d_volumes():
    matrix = shiro_figure_1d()
    rows = cols = even_rows(8, 2)
    k, s = 4, 4
    stats = volumes(matrix, rows, cols, k, s)
    assert stats["column"].total_bytes == 3 * k * s
    assert stats["row"].total_bytes == 3 * k * s
    assert stats["joint"].total_bytes == 2 * k * s  # b6 and c0 only
    assert stats["rowwise"].total_bytes == 5 * k * s and stats["rowwise"].messages == 5
    assert stats["block"].total_bytes == 8 * k * s  # 4 rows each way
    assert stats["block"].messages == 2
    for name in ("column", "row", "joint"):
        assert stats[name].messages == 1
        assert stats[name].send_bytes_per_rank.tolist() == [0, stats[name].total_bytes]
    # Setup: row-based entries, value + two 32-bit indices each.
    assert stats["row"].setup_bytes == 5 * (s + 8)
    assert stats["joint"].setup_bytes == 2 * (s + 8)  # (0, 5) and (0, 7) go row-based
    assert stats["column"].setup_bytes == 0


def test_hand_made_three_ranks_uneven():
    # 7 x 7 over 3 ranks: rows 0-1, 2-3, 4-6.
    entries = [(0, 4), (1, 4), (0, 5), (2, 0), (3, 6), (5, 1), (6, 1), (6, 2), (4, 3)]
    matrix = sp.csr_array((np.ones(len(entries)), tuple(zip(*entries))), shape=(7, 7))
    rows = cols = even_rows(7, 3)
    assert rows.offsets.tolist() == [0, 2, 4, 7]
    stats = volumes(matrix, rows, cols, 1, 8)
    # Blocks: A(0,2) = {(0,4),(1,4),(0,5)}: cols 2, rows 2, cover 2.  A(1,0) = {(2,0)}: 1/1/1.
    # A(1,2) = {(3,6)}: 1/1/1.  A(2,0) = {(5,1),(6,1)}: cols 1, rows 2, cover 1.
    # A(2,1) = {(6,2),(4,3)}: cols 2, rows 2, cover 2.
    assert stats["column"].total_bytes == 8 * (2 + 1 + 1 + 1 + 2)
    assert stats["row"].total_bytes == 8 * (2 + 1 + 1 + 2 + 2)
    assert stats["joint"].total_bytes == 8 * (2 + 1 + 1 + 1 + 2)
    assert stats["rowwise"].total_bytes == 8 * 9
    assert stats["block"].total_bytes == 8 * 7 * 2
    assert stats["joint"].messages == 5 and stats["block"].messages == 6


@pytest.mark.parametrize("trial", range(12))
def test_volumes_equal_formulas_on_random_matrices(rng, trial):
    n_rows, n_cols = rng.integers(1, 60, 2)
    if trial % 3 == 0:
        n_cols = n_rows
    matrix = random_integer_matrix(rng, n_rows, n_cols, rng.uniform(0.01, 0.3))
    n_ranks = int(rng.integers(1, 7))
    rows, cols = partition(matrix, n_ranks, ["even", "nnz"][trial % 2]).partitions
    k, s = int(rng.integers(1, 9)), int(rng.choice([4, 8]))
    expected = formula_volumes(matrix, rows, cols, k, s)
    stats = volumes(matrix, rows, cols, k, s)
    for name, value in expected.items():
        assert stats[name].total_bytes == value, name
    assert stats["joint"].total_bytes <= min(stats["row"].total_bytes, stats["column"].total_bytes)
    for stat in stats.values():
        assert stat.send_bytes_per_rank.sum() == stat.recv_bytes_per_rank.sum() == stat.total_bytes
        assert np.all(stat.pair_sources != stat.pair_destinations)


@pytest.mark.parametrize("trial", range(12))
def test_replayed_plans_give_exact_product(rng, trial):
    n_rows = int(rng.integers(1, 50))
    n_cols = n_rows if trial % 2 else int(rng.integers(1, 50))
    matrix = random_integer_matrix(rng, n_rows, n_cols, rng.uniform(0.0, 0.3))
    n_ranks = int(rng.integers(1, 8))  # often more ranks than rows: ranks without rows
    rows, cols = partition(matrix, n_ranks, "even").partitions
    k = int(rng.integers(1, 6))
    b_dense = rng.integers(-5, 6, (n_cols, k)).astype(np.float64)
    expected = matrix @ b_dense
    for name in EXECUTABLE:
        plan = build_plan(matrix, rows, cols, name)
        np.testing.assert_array_equal(replay_plan(plan, b_dense), expected, err_msg=name)


@pytest.mark.parametrize("trial", range(6))
def test_block_stats_equal_the_built_plan(rng, trial):
    n_rows, n_cols = (int(x) for x in rng.integers(1, 40, 2))
    matrix = random_integer_matrix(rng, n_rows, n_cols, 0.1)
    rows, cols = partition(matrix, int(rng.integers(1, 9)), "even").partitions
    direct = block_stats(cols, 3, 4)
    built = plan_stats(build_plan(matrix, rows, cols, "block").ranks, 3, 4)
    for field in ("pair_sources", "pair_destinations", "pair_bytes", "send_bytes_per_rank", "recv_bytes_per_rank"):
        np.testing.assert_array_equal(getattr(direct, field), getattr(built, field), err_msg=field)
    assert (direct.messages, direct.setup_bytes, direct.total_bytes) == (built.messages, 0, 12 * n_cols * (rows.n_parts - 1))


def test_joint_per_pair_never_exceeds_row_or_column(rng):
    matrix = random_integer_matrix(rng, 200, 200, 0.03)
    rows, cols = partition(matrix, 5).partitions
    per_pair = {}
    for name in ("row", "column", "joint"):
        stat = plan_stats(build_plan(matrix, rows, cols, name).ranks, 1, 1)
        per_pair[name] = dict(zip(zip(stat.pair_sources.tolist(), stat.pair_destinations.tolist()), stat.pair_bytes.tolist()))
    for pair, joint in per_pair["joint"].items():
        assert joint <= per_pair["row"].get(pair, 0) and joint <= per_pair["column"].get(pair, 0)


def test_joint_assignment_is_served_by_the_cover(rng):
    matrix = random_integer_matrix(rng, 80, 80, 0.08)
    rows, cols = partition(matrix, 4).partitions
    blocks = split_local_rows(1, matrix[slice(*rows.range(1))], cols)
    row_based = choose_row_based(Strategy.JOINT, blocks, 4)
    # Column-based nonzeros need their B row, row-based ones their C row: the union is a cover
    # and, being minimum, is never larger than the rows or the columns alone.
    needed_b = {(q, c) for q, c in zip(blocks.sources[~row_based], blocks.cols[~row_based])}
    needed_c = {(q, r) for q, r in zip(blocks.sources[row_based], blocks.rows[row_based])}
    all_rows = {(q, r) for q, r in zip(blocks.sources, blocks.rows)}
    all_cols = {(q, c) for q, c in zip(blocks.sources, blocks.cols)}
    assert len(needed_b) + len(needed_c) <= min(len(all_rows), len(all_cols))
    # No row-based nonzero has its column among the B rows sent anyway.
    assert not any((q, c) in needed_b for q, c in zip(blocks.sources[row_based], blocks.cols[row_based]))


def test_rank_without_rows_and_empty_matrix():
    matrix = sp.csr_array(np.array([[0.0, 3.0], [4.0, 0.0]]))
    rows = cols = even_rows(2, 4)  # ranks 0 and 2 own nothing
    for name in EXECUTABLE:
        plan = build_plan(matrix, rows, cols, name)
        np.testing.assert_array_equal(replay_plan(plan, np.array([[1.0], [2.0]])), [[6.0], [4.0]])
    empty = sp.csr_array((5, 5))
    stats = volumes(empty, even_rows(5, 3), even_rows(5, 3), 2, 4)
    assert all(stats[name].total_bytes == 0 for name in ("rowwise", "column", "row", "joint"))
    assert stats["block"].total_bytes == 5 * 2 * 4 * 2


def test_mismatched_partitions_are_rejected():
    matrix = sp.csr_array(np.eye(4))
    with pytest.raises(PlanMismatchError, match="partitions cover"):
        build_plan(matrix, even_rows(5, 2), even_rows(4, 2), "joint")
    with pytest.raises(PlanMismatchError, match="parts"):
        build_plan(matrix, even_rows(4, 2), even_rows(4, 3), "joint")
    with pytest.raises(InputError, match="accounting only"):
        build_plan(matrix, even_rows(4, 2), even_rows(4, 2), "rowwise")


def test_parse_strategies():
    assert parse_strategies("joint, column") == [Strategy.JOINT, Strategy.COLUMN]
    assert len(parse_strategies("all")) == 5 and len(parse_strategies("all", executable_only=True)) == 4
    with pytest.raises(InputError, match="unknown strategy 'vertex'"):
        parse_strategies("vertex")
    with pytest.raises(InputError, match="accounting only"):
        parse_strategies("rowwise", executable_only=True)


def test_plan_equality_detects_differences():
    matrix = shiro_figure_1d()
    rows = cols = even_rows(8, 2)
    first = build_plan(matrix, rows, cols, "joint").ranks[1]
    assert first.equals(build_plan(matrix, rows, cols, "joint").ranks[1])
    assert not first.equals(build_plan(matrix, rows, cols, "column").ranks[1])
    changed = matrix.copy()
    changed.data[changed.data == 2] = 3
    assert not first.equals(build_plan(changed, rows, cols, "joint").ranks[1])
    assert RowPartition(np.array([0, 4, 8])) == rows


def test_plan_keys_that_would_overflow_int64_are_refused():
    """6 P^2 n >= 2^63 made two records' keys collide (P = 2^20, n = 2^23)."""
    from sparsewire.plan.plan import check_key_space

    check_key_space(2**20, 2**20)  # 6 * 2^60 < 2^63
    with pytest.raises(InputError, match="beyond the planner's 64-bit record keys"):
        check_key_space(2**20, 2**23)
    with pytest.raises(InputError, match="6 P\\^2 n must stay below 2\\^63"):
        check_key_space(3 * 2**30, 2**3)


def test_record_keys_unpack_what_they_pack(rng):
    """The buffer order keys decode to the (peer, kind, key) they were made from, at the largest
    sizes the overflow check allows, and sort by peer, then kind, then key."""
    from sparsewire.plan.plan import RecordKeys, RecordKind

    for n_ranks, n_keys in ((1, 1), (3, 17), (2**20, 2**20), (5, 2**55)):
        keys = RecordKeys(n_ranks, n_keys)
        peer = rng.integers(0, n_ranks, 500)
        kind = rng.integers(0, len(RecordKind), 500)
        key = rng.integers(0, n_keys, 500)
        packed = keys.order(peer, kind, key)
        rows = keys.rows_of(packed)
        assert np.array_equal(rows.peer, peer) and np.array_equal(rows.kind, kind) and np.array_equal(rows.key, key)
        by_fields = np.lexsort((key, kind, peer))
        assert np.array_equal(packed[by_fields], np.sort(packed))
    assert [kind.hop for kind in RecordKind] == [1, 1, 1, 1, 2, 2]


def test_a_key_missing_from_a_buffer_order_is_an_error_not_a_neighbour():
    """np.searchsorted returns the neighbour's slot for a missing key: a silently wrong product."""
    from sparsewire.plan.records import positions_in as _positions

    order = np.array([3, 7, 9, 20])
    assert _positions(order, np.array([9, 3, 20]), "rows").tolist() == [2, 0, 3]
    for missing in ([8], [21], [0]):
        with pytest.raises(PlanMismatchError, match="the plan lost 1 rows"):
            _positions(order, np.array(missing), "rows")


@pytest.mark.parametrize("n_ranks", [1, 3, 7])
def test_serial_delivery_equals_the_all_to_all_of_every_ranks_boxes(rng, n_ranks):
    """outboxes (per rank) and deliver_all (one sort over every rank's records) hand each rank what the rule
    says, in source order and each box in its records' order: a record goes to its sender and to its receiver
    when that relays (neither the owner nor the sender), a term to its sender. A planted fault (one source's
    box dropped) is told apart."""
    from sparsewire.plan.records import Records, deliver_all, make_records, outboxes

    owned = {}
    for rank in range(n_ranks):
        n = int(rng.integers(0, 40))
        sender, receiver = rng.integers(0, n_ranks, n), rng.integers(0, n_ranks, n)
        term_sender = rng.choice(sender, int(rng.integers(0, 30))) if n else np.zeros(0, np.int64)
        m = term_sender.size
        terms = (rng.integers(0, 6, m), term_sender, rng.integers(0, n_ranks, m), rng.integers(0, 99, m), rng.integers(0, 99, m))
        kinds, rounds = rng.integers(0, 6, n), rng.integers(0, 3, n)
        owned[rank] = make_records(kinds, sender, receiver, rng.permutation(n), rounds, (*terms, rng.random(m)))

    def rule(source: int, target: int) -> Records:
        r = owned[source]
        to_target = (r.sender == target) | ((r.receiver == target) & (r.receiver != source) & (r.receiver != r.sender))
        return r.select(np.flatnonzero(to_target), np.flatnonzero(r.term_sender == target))

    def same(x: Records, y: Records) -> bool:
        return all(np.array_equal(a, b) for a, b in zip(x, y))

    boxes = {rank: outboxes(owned[rank], rank, n_ranks) for rank in range(n_ranks)}
    delivered = deliver_all(owned, n_ranks)
    for target in range(n_ranks):
        expected = Records.concat([owned[target]] + [rule(s, target) for s in range(n_ranks)])
        from_boxes = [boxes[s][target] for s in range(n_ranks) if boxes[s][target] is not None]
        assert same(Records.concat([owned[target]] + from_boxes), expected), target
        assert same(Records.concat([owned[target]] + delivered[target]), expected), target
        sources = [s for s in range(n_ranks) if rule(s, target).key.size]
        if sources:  # planted: one source's box left out
            short = Records.concat([owned[target]] + [rule(s, target) for s in range(n_ranks) if s != sources[0]])
            assert not same(Records.concat([owned[target]] + delivered[target]), short)


def test_build_plan_reports_each_rank_of_each_stage(capsys):
    from sparsewire.cli.common import stage_progress

    matrix = random_integer_matrix(np.random.default_rng(5), 60, 60, 0.1)
    parts = even_rows(60, 6)
    heard = []
    plain = build_plan(matrix, parts, parts, "joint")
    told = build_plan(matrix, parts, parts, "joint", progress=lambda *step: heard.append(step))
    assert heard == [("records", r, 6) for r in range(1, 7)] + [("assemble", r, 6) for r in range(1, 7)]
    assert plan_stats(told.ranks, 2, 8).total_bytes == plan_stats(plain.ranks, 2, 8).total_bytes
    report = stage_progress("planning joint", every=0.0)
    for step in heard:
        report(*step)
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"planning joint: records \[#-{9}\] 10% \(1/6 ranks\), about \d+ s left", lines[0]), lines[0]
    assert re.fullmatch(r"planning joint: assemble \[#{10}\] 100% \(6/6 ranks\), in \d+\.\d s", lines[-1]), lines[-1]
    assert len(lines) == 12  # each rank passes another tenth of six
