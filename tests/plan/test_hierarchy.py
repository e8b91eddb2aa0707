"""Topologies and group-aware plans: the issue's inter-group formulas, the ordering
joint-group <= joint-hier, column-hier, exact products for every layout, and the cost model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from oracles import inter_group_formulas, random_integer_matrix, replay_plan
from sparsewire.errors import InputError
from sparsewire.partition import even_rows, partition
from sparsewire.plan import build_plan, plan_stats, strategy_stats
from sparsewire.plan.hierarchy import aggregators, balanced_proxies, local_proxies, local_ranks
from sparsewire.plan.stats import predicted_seconds
from sparsewire.plan.strategies import HIERARCHICAL_STRATEGIES, parse_strategies
from sparsewire.plan.types import RECORD_KINDS
from sparsewire.topology.model import Level, LinkClass, Topology
from sparsewire.topology.presets import PRESETS, parse_topology

EXECUTABLE = ["block", "column", "row", "joint", "column-hier", "joint-hier", "joint-group"]


def test_presets_and_nodes_groups():
    assert parse_topology("nodes:3").groups(7).tolist() == [0, 0, 0, 1, 1, 1, 2]  # the last group is smaller
    assert parse_topology("flat").groups(5).tolist() == [0] * 5
    assert PRESETS["cola-a800"].topology.groups(17).tolist() == [0] * 8 + [1] * 8 + [2]
    assert (
        PRESETS["cola-a800"].topology.levels[0].link.bandwidth == 300e9
        and PRESETS["cola-a800"].topology.levels[1].link.bandwidth == 18e9
    )
    assert (
        PRESETS["shiro-h100"].topology.levels[0].group_size == 4
        and PRESETS["shiro-h100"].topology.levels[1].link.bandwidth == 25e9
    )
    assert (
        PRESETS["leafspine-16"].topology.levels[0].group_size == 16
        and PRESETS["leafspine-16"].topology.levels[0].link.bandwidth == 50e9
    )
    topology = Topology.nodes(2)
    assert topology.link_levels(np.array([0, 0, 3]), np.array([1, 2, 2]), 4).tolist() == [0, 1, 0]
    for bad in ("torus", "nodes:0", "nodes:x"):
        with pytest.raises(InputError, match="unknown topology"):
            parse_topology(bad)
    with pytest.raises(InputError, match="made for 3 ranks"):
        Topology("mpi-nodes", Topology.nodes(2).levels, (0, 0, 1)).groups(4)
    with pytest.raises(InputError, match="last level"):
        Topology("bad", (Level("node", 2, LinkClass("x", 1.0, 0.0, 0.0)),))


def test_proxies_and_aggregators_follow_local_ranks():
    groups = Topology.nodes(3).groups(7)  # {0,1,2} {3,4,5} {6}
    assert local_ranks(groups).tolist() == [0, 1, 2, 0, 1, 2, 0]
    # Group 1 receives from rank q at its member with q's local rank; group 2 has one member.
    assert local_proxies(groups, 1).tolist() == [3, 4, 5, -1, -1, -1, 3]
    assert local_proxies(groups, 2).tolist() == [6, 6, 6, 6, 6, 6, -1]
    assert aggregators(groups, 5).tolist() == [2, -1, 6]  # rank 5 has local rank 2
    balanced = balanced_proxies(groups, 0, np.array([0, 0, 0, 5, 1, 4, 3]))
    assert balanced.tolist() == [-1, -1, -1, 0, 2, 1, 2]  # 5 -> rank 0, 4 -> rank 1, 3 -> rank 2, 1 -> rank 2


def two_groups_example() -> sp.csr_array:
    """8 x 8 over 4 ranks of 2 rows, groups {0, 1} and {2, 3}. Rows 0-3 (group 0) use columns 4, 5
    (rank 2) and 6 (rank 3): column 4 by rows 0, 2 (ranks 0, 1), column 5 by row 0, column 6 by
    rows 1, 3. Group 1 uses nothing from group 0."""
    entries = [(0, 4), (2, 4), (0, 5), (1, 6), (3, 6)] + [(i, i) for i in range(8)]
    return sp.csr_array((np.ones(len(entries)), tuple(zip(*entries))), shape=(8, 8))


def test_hand_made_inter_group_volumes():
    matrix = two_groups_example()
    rows = cols = even_rows(8, 4)
    topology = Topology.nodes(2)
    stats = {
        name: strategy_stats(matrix, rows, cols, name, 1, 1, topology).class_totals()
        for name in ("column", "joint", "column-hier", "joint-hier", "joint-group")
    }
    # Flat column: pairs (0,2): {4,5}, (1,2): {4}, (0,3): {6}, (1,3): {6} -> 5 rows cross.
    assert stats["column"]["inter_group_bytes"] == 5
    # column-hier: from rank 2, union {4, 5}; from rank 3, {6} -> 3 rows cross once each.
    assert stats["column-hier"]["inter_group_bytes"] == 3
    # Proxies by local rank: rank 2 -> rank 0 (forwards 4 to rank 1), rank 3 -> rank 1 (forwards 6 to rank 0).
    assert stats["column-hier"]["intra_group_bytes"] == 2
    # Per-pair covers: every block is one row or one edge and König takes the rows (all matched),
    # so joint-hier sends rows 0, 2, 1, 3 across: 4. The cover of the whole group block
    # (rows 0-3 x columns 4-6; maximum matching 0-5, 2-4, 1-6) has 3 vertices: row 0, columns 4, 6.
    assert stats["joint-hier"]["inter_group_bytes"] == 4
    assert stats["joint-group"]["inter_group_bytes"] == 3
    for name in stats:
        assert stats[name]["max_rank_send_inter_group_bytes"] <= stats[name]["inter_group_bytes"]


def received_records(plan) -> set[tuple[int, str, int, int]]:
    """(receiver, kind name, key, sender) of every row every rank receives."""
    result = set()
    for rank_plan in plan.ranks:
        for exchange in rank_plan.exchanges:
            senders = np.repeat(exchange.recv_ranks, exchange.recv_counts)
            for kind, key, sender in zip(exchange.receive_kinds, exchange.receive_keys, senders):
                result.add((rank_plan.rank, RECORD_KINDS[int(kind)], int(key), int(sender)))
    return result


def test_a_row_only_one_member_needs_is_not_relayed():
    # The example plus row 1 (rank 0) using column 7 (rank 3), which no other rank of group 0 needs:
    # rank 3's proxy in group 0 is rank 1, but the row goes straight to rank 0 (one slow crossing
    # either way, no forwarding hop). Columns 4 and 6 are needed by both ranks of group 0 and relayed.
    matrix = sp.csr_array(two_groups_example() + sp.csr_array(([1.0], ([1], [7])), shape=(8, 8)))
    rows = cols = even_rows(8, 4)
    plan = build_plan(matrix, rows, cols, "column-hier", Topology.nodes(2))
    received = received_records(plan)
    assert (0, "DIRECT_B", 7, 3) in received and not any(r[2] == 7 and r[1] != "DIRECT_B" for r in received)
    assert {(0, "FETCH_B", 4, 2), (1, "FORWARD_B", 4, 0), (1, "FETCH_B", 6, 3), (0, "FORWARD_B", 6, 1)} <= received
    totals = strategy_stats(matrix, rows, cols, "column-hier", 1, 1, Topology.nodes(2)).class_totals()
    assert (totals["inter_group_bytes"], totals["intra_group_bytes"]) == (4, 2)


def test_a_partial_row_with_one_contributor_is_not_aggregated():
    # 12 x 12 over 4 ranks of 3 rows, groups {0, 1} and {2, 3}. Row 0 (rank 0) uses columns 6-8 (rank 2)
    # only: a star, its cover is the row, and rank 2 alone contributes, so it sends the row directly.
    # Row 1 uses columns 6-8 and 9-11 (rank 3): ranks 2 and 3 both contribute; rank 3's partial is
    # summed at the aggregator of (group 1, rank 0), rank 2, which sends one row across.
    entries = [(0, c) for c in (6, 7, 8)] + [(1, c) for c in range(6, 12)] + [(i, i) for i in range(12)]
    matrix = sp.csr_array((np.ones(len(entries)), tuple(zip(*entries))), shape=(12, 12))
    rows = cols = even_rows(12, 4)
    for name in ("joint-hier", "joint-group"):
        plan = build_plan(matrix, rows, cols, name, Topology.nodes(2))
        received = received_records(plan)
        assert {(0, "DIRECT_C", 0, 2), (2, "PARTIAL_C", 1, 3), (0, "AGGREGATE_C", 1, 2)} <= received, name
        assert not any(r[1] == "AGGREGATE_C" and r[2] == 0 for r in received), name
        totals = strategy_stats(matrix, rows, cols, name, 1, 1, Topology.nodes(2)).class_totals()
        assert (totals["inter_group_bytes"], totals["intra_group_bytes"]) == (2, 1), name
        np.testing.assert_array_equal(replay_plan(plan, np.arange(24.0).reshape(12, 2)), matrix @ np.arange(24.0).reshape(12, 2))


@pytest.mark.parametrize("trial", range(8))
def test_proxies_relay_exactly_the_rows_several_members_need(rng, trial):
    matrix = random_integer_matrix(rng, 80, 80, rng.uniform(0.02, 0.15))
    n_ranks = int(rng.integers(2, 9))
    topology = Topology.nodes(int(rng.integers(1, 4)))
    groups = topology.groups(n_ranks)
    rows, cols = partition(matrix, n_ranks, "even").partitions
    received = received_records(build_plan(matrix, rows, cols, "column-hier", topology, proxy=["local", "balanced"][trial % 2]))
    csr = sp.csr_array(matrix)
    for group in np.unique(groups):
        members = np.flatnonzero(groups == group)
        needs = {int(p): set(csr[slice(*rows.range(p))].indices.tolist()) for p in members}
        for j in set().union(*needs.values()):
            owner = int(cols.owner(np.array([j]))[0])
            if groups[owner] == group:
                continue
            needing = [p for p in members if j in needs[int(p)]]
            fetched = [r for r in received if r[1] == "FETCH_B" and r[2] == j and groups[r[0]] == group]
            if len(needing) == 1:
                assert (int(needing[0]), "DIRECT_B", j, owner) in received and not fetched
            else:
                assert len(fetched) == 1 and fetched[0][3] == owner


@pytest.mark.parametrize("trial", range(16))
def test_inter_group_bytes_equal_formulas_and_ordering(rng, trial):
    n_rows = int(rng.integers(1, 90))
    n_cols = n_rows if trial % 2 else int(rng.integers(1, 90))
    matrix = random_integer_matrix(rng, n_rows, n_cols, rng.uniform(0.01, 0.25))
    n_ranks, group_size = int(rng.integers(1, 10)), int(rng.integers(1, 5))
    topology = Topology.nodes(group_size)
    rows, cols = partition(matrix, n_ranks, ["even", "nnz"][trial % 2]).partitions
    k, s = int(rng.integers(1, 5)), int(rng.choice([4, 8]))
    expected = inter_group_formulas(matrix, rows, cols, topology.groups(n_ranks), k, s)
    proxy = ["local", "balanced"][trial % 2]
    inter = {}
    for name in ("column", "joint", "column-hier", "joint-hier", "joint-group"):
        stats = strategy_stats(matrix, rows, cols, name, k, s, topology, proxy=proxy)
        totals = stats.class_totals()
        assert totals["intra_group_bytes"] + totals["inter_group_bytes"] == stats.total_bytes
        inter[name] = totals["inter_group_bytes"]
    assert inter["column-hier"] == expected["column-hier"]
    assert inter["joint-group"] == expected["joint-group"]
    assert inter["joint-group"] <= inter["joint-hier"] <= inter["joint"]
    assert inter["joint-group"] <= inter["column-hier"] <= inter["column"]


@pytest.mark.parametrize("trial", range(10))
def test_every_layout_and_proxy_gives_the_exact_product(rng, trial):
    n_rows = int(rng.integers(1, 50))
    n_cols = n_rows if trial % 2 else int(rng.integers(1, 50))
    matrix = random_integer_matrix(rng, n_rows, n_cols, rng.uniform(0.0, 0.3))
    n_ranks = int(rng.integers(1, 9))
    rows, cols = partition(matrix, n_ranks, "even").partitions
    b_dense = rng.integers(-5, 6, (n_cols, int(rng.integers(1, 4)))).astype(np.float64)
    expected = matrix @ b_dense
    topology = Topology.nodes(int(rng.integers(1, 4)))
    for name in EXECUTABLE:
        for layout in ("merged", "pipelined"):
            for proxy in ("local", "balanced"):
                plan = build_plan(matrix, rows, cols, name, topology, layout=layout, proxy=proxy)
                got = replay_plan(plan, b_dense)
                np.testing.assert_array_equal(got, expected, err_msg=f"{name}/{layout}/{proxy}")


def test_pipelined_layout_has_one_stage_per_remote_group(rng):
    matrix = random_integer_matrix(rng, 60, 60, 0.2)
    rows, cols = partition(matrix, 6).partitions
    topology = Topology.nodes(2)  # three groups
    merged = build_plan(matrix, rows, cols, "column-hier", topology)
    pipelined = build_plan(matrix, rows, cols, "column-hier", topology, layout="pipelined")
    assert [(e.step, e.input, e.receive_slot) for e in merged.ranks[0].exchanges] == [(0, None, None), (1, 0, None)]
    # Round 0 (inside groups), then per remote round d: inter-group hop (step d-1, buffer d % 2)
    # and the distribution inside the group (step d, reading that buffer).
    assert [(e.step, e.input, e.receive_slot) for e in pipelined.ranks[0].exchanges] == [
        (0, None, None),
        (0, None, 1),
        (1, 1, None),
        (1, None, 0),
        (2, 3, None),
    ]
    # Same bytes per pair, only split into stages.
    a, b = plan_stats(merged.ranks, 2, 4, topology=topology), plan_stats(pipelined.ranks, 2, 4, topology=topology)
    np.testing.assert_array_equal(a.pair_bytes, b.pair_bytes)
    # Inter-group messages of round d only go from group g + d to g.
    groups = topology.groups(6)
    for rank_plan in pipelined.ranks:
        for d in (1, 2):
            exchange = rank_plan.exchanges[2 * d - 1]
            assert np.all((groups[rank_plan.rank] - groups[exchange.send_ranks]) % 3 == d)


def test_predicted_seconds_by_hand():
    link_inside = LinkClass("fast", 100.0, 0.5, 0.5)
    link_between = LinkClass("slow", 10.0, 1.0, 1.0)
    topology = Topology("test", (Level("node", 2, link_inside), Level("cluster", None, link_between)))
    matrix = two_groups_example()
    rows = cols = even_rows(8, 4)
    # column-hier, k = 1, s = 1. Step 0: rank 2 -> 0 rows {4, 5} (2 bytes), rank 3 -> 1 row {6}:
    # slowest rank 2 or 0: 1 message * 2 s + 2 bytes / 10 = 2.2 s. Step 1: rank 0 -> 1 row 4, rank 1 -> 0 row 6:
    # 1 * 1 + 1/100 = 1.01 s.
    stats = strategy_stats(matrix, rows, cols, "column-hier", 1, 1, topology)
    assert predicted_seconds(stats) == pytest.approx(2.2 + 1.01)
    # Flat column in one step: rank 0 receives 2 messages (3 bytes) over the slow class: 4 + 0.3.
    flat = strategy_stats(matrix, rows, cols, "column", 1, 1, topology)
    assert predicted_seconds(flat) == pytest.approx(4.3)
    assert flat.as_dict()["predicted_seconds"] == pytest.approx(4.3)
    # The slow link shared by each group (a node's one card): column-hier's step-0 rows cross it
    # together, group 1 -> 0 sends 3 bytes in 1 message per rank: 1 * 2 + 3 / 10 = 2.3 s; the
    # forwarding hop inside the group (1.01 s) is shorter, so T = 2.3 s.
    shared = Topology("test", (Level("node", 2, link_inside), Level("cluster", None, replace(link_between, shared=True))))
    shared_stats = strategy_stats(matrix, rows, cols, "column-hier", 1, 1, shared)
    assert predicted_seconds(shared_stats) == pytest.approx(2.3)
    # A mode whose steps follow each other on the link (partitioned): the steps add up, 2.3 + 1.01 s; a mode that
    # keeps two in flight (overlap, pipelined, early) has both of this plan's steps on the link together.
    assert predicted_seconds(shared_stats, steps_in_flight=1) == pytest.approx(3.31)
    assert predicted_seconds(shared_stats, steps_in_flight=2) == pytest.approx(2.3)


@pytest.mark.parametrize("strategy", ["column-hier", "joint-group"])
def test_steps_in_flight_against_the_plans_steps(rng, strategy):
    # Pipelined plans on 6 ranks: 2 groups of 3 -> 2 steps, 3 groups of 2 -> 3 steps. Two in flight price a
    # two-step plan as every step together and a three-step plan step after step.
    matrix = random_integer_matrix(rng, 90, 90, 0.15)
    rows, cols = partition(matrix, 6).partitions
    link = LinkClass("slow", 1e6, 1e-5, 1e-6, shared=True)
    for size, n_steps in ((3, 2), (2, 3)):
        topology = Topology("t", (Level("node", size, LinkClass("fast", 1e9, 1e-6, 1e-7)), Level("cluster", None, link)))
        plan = build_plan(matrix, rows, cols, strategy, topology, layout="pipelined")
        stats = plan_stats(plan.ranks, 4, 8, topology=topology)
        assert len(np.unique(stats.steps)) == n_steps
        together, apart = predicted_seconds(stats), predicted_seconds(stats, steps_in_flight=1)
        assert together <= apart * (1 + 1e-12)  # steps together never take longer than one after the other
        assert predicted_seconds(stats, steps_in_flight=2) == (together if n_steps == 2 else apart)


def test_hierarchical_strategies_need_a_topology():
    with pytest.raises(InputError, match="--group-size"):
        parse_strategies("column-hier")
    assert parse_strategies("all") == parse_strategies("block,rowwise,column,row,joint")
    assert set(HIERARCHICAL_STRATEGIES) <= set(parse_strategies("all", hierarchical=True))
    with pytest.raises(InputError, match="needs a topology"):
        build_plan(two_groups_example(), even_rows(8, 2), even_rows(8, 2), "joint-group")
