"""The network calibration: a measured record reloads as a topology that drives the
planner (hand-made record, exact figures), a damaged one is refused, and on the emulated cluster
the inter-node bandwidth is the configured rate less TCP/IP headers (within 10%) at 1 and 5 Gbit/s,
with the intra-node bandwidth at least 5x it at 1 Gbit/s."""

from __future__ import annotations

import dataclasses
import json
import re
import sys

import numpy as np
import pytest

from conftest import CHILD_ENV
from sparsewire.calibration.overlap import hidden_fraction
from sparsewire.calibration.relay import relay_price, relay_ranks
from sparsewire.errors import InputError
from sparsewire.io.readers import load_matrix
from sparsewire.partition import partition
from sparsewire.plan import PlanStats, build_plan, plan_stats
from sparsewire.plan.cost import predicted_relay_seconds
from sparsewire.plan.stats import (
    predicted_communication_seconds,
    predicted_local_seconds,
    predicted_seconds,
    relays,
    strategy_stats,
)
from sparsewire.testing.emulation.cluster import EmulatedCluster, bucket_bytes, unavailable_reason
from sparsewire.topology.model import Topology
from sparsewire.topology.presets import parse_topology
from sparsewire.topology.records import stamp

TCP_PAYLOAD = 0.956  # the share of a link's bits that is TCP payload at MTU 1500 (shared/research/emulated-cluster)

#: The calibration on the emulated cluster times its links: nothing runs beside them (conftest).
pytestmark = pytest.mark.alone


def _record(groups, intra=(4e9, 3e-6), inter=(6e7, 9e-6), node_link=1.2e8) -> dict:
    record = stamp("network")
    record.update(
        {
            "ranks": len(groups),
            "rank_groups": groups,
            "group_size": max(groups.count(g) for g in set(groups)),
            "links": {
                "intra_node": {"bandwidth_bytes_per_second": intra[0], "latency_seconds": intra[1]},
                "inter_node": {
                    "bandwidth_bytes_per_second": inter[0],
                    "latency_seconds": inter[1],
                    "single_pair_bandwidth": node_link,
                },
            },
        }
    )
    return record


def test_a_measured_record_reloads_as_the_topology_that_prices_the_plan(tmp_path):
    path = tmp_path / "net.json"
    path.write_text(json.dumps(_record([0, 0, 1, 1])))
    topology = parse_topology(str(path))
    assert topology.groups(4).tolist() == [0, 0, 1, 1] and topology.groups(8).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    node, cluster = topology.levels
    assert (node.link.bandwidth, node.link.latency, node.link.shared) == (4e9, 3e-6, False)
    assert (cluster.link.bandwidth, cluster.link.latency, cluster.link.shared) == (1.2e8, 9e-6, True)
    matrix = load_matrix("rmat:10:8:1")
    parts = partition(matrix, 4)
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, topology)
    # block, one step: every rank sends its 256 rows x 8 x 4 bytes to each other rank, 2 messages
    # over the node's one measured link (which both ranks of the node share: 4 x 8192 bytes queue
    # on it) and 1 inside the node; the step lasts as its slowest class
    inter = 2 * 9e-6 + 4 * 8192 / 1.2e8
    intra = 1 * 3e-6 + 8192 / 4e9
    assert predicted_seconds(stats) == pytest.approx(max(inter, intra), rel=1e-12)
    # a measured burst comes off each node's bytes once: 10000 of its 4 x 8192 pass at once after idle
    bursting = _record([0, 0, 1, 1])
    bursting["links"]["inter_node"]["burst_bytes"] = 10000
    path.write_text(json.dumps(bursting))
    assert parse_topology(str(path)).levels[1].link.burst == 10000
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, parse_topology(str(path)))
    inter = 2 * 9e-6 + (4 * 8192 - 10000) / 1.2e8
    assert predicted_seconds(stats) == pytest.approx(max(inter, intra), rel=1e-12)
    bursting["links"]["inter_node"]["burst_bytes"] = 10**9  # larger than everything: latency and intra are left
    path.write_text(json.dumps(bursting))
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, parse_topology(str(path)))
    assert predicted_seconds(stats) == pytest.approx(max(2 * 9e-6, intra), rel=1e-12)
    # where all nodes' links together carry less than the sum of their rates, every node's bytes also queue on
    # that: the two nodes' 4 x 8192 each at 1.2e8 together
    capped = _record([0, 0, 1, 1])
    capped["links"]["inter_node"]["aggregate_bandwidth_bytes_per_second"] = 1.2e8
    path.write_text(json.dumps(capped))
    assert parse_topology(str(path)).levels[1].link.aggregate == 1.2e8
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, parse_topology(str(path)))
    assert predicted_seconds(stats) == pytest.approx(2 * 9e-6 + 2 * 4 * 8192 / 1.2e8, rel=1e-12)
    capped["links"]["inter_node"]["aggregate_bandwidth_bytes_per_second"] = 2.4e8  # the sum of the two: no cap
    path.write_text(json.dumps(capped))
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, parse_topology(str(path)))
    assert predicted_seconds(stats) == pytest.approx(2 * 9e-6 + 4 * 8192 / 1.2e8, rel=1e-12)
    # each link's burst comes off its node's bytes; the aggregate's own burst (every node at once) off the bytes
    # on the aggregate: none measured, every node's bytes cross it whole
    capped["links"]["inter_node"]["aggregate_bandwidth_bytes_per_second"] = 1.6e8  # two thirds of the links' 2.4e8
    capped["links"]["inter_node"]["burst_bytes"] = 10000
    path.write_text(json.dumps(capped))
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, parse_topology(str(path)))
    assert parse_topology(str(path)).levels[1].link.aggregate_burst == 0.0  # absent in records before it
    assert predicted_seconds(stats) == pytest.approx(2 * 9e-6 + 2 * 4 * 8192 / 1.6e8, rel=1e-12)
    capped["links"]["inter_node"]["aggregate_burst_bytes"] = 20000  # both links' bursts: the links' time again
    path.write_text(json.dumps(capped))
    assert parse_topology(str(path)).levels[1].link.aggregate_burst == 20000
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, parse_topology(str(path)))
    both = 2 * 9e-6 + max((4 * 8192 - 10000) / 1.2e8, (2 * 4 * 8192 - 20000) / 1.6e8)
    assert predicted_seconds(stats) == pytest.approx(both, rel=1e-12)
    capped["links"]["inter_node"]["aggregate_burst_bytes"] = 4000  # a common path that passes less after idle
    path.write_text(json.dumps(capped))
    stats = strategy_stats(matrix, parts.rows, parts.cols, "block", 8, 4, parse_topology(str(path)))
    assert predicted_seconds(stats) == pytest.approx(2 * 9e-6 + (2 * 4 * 8192 - 4000) / 1.6e8, rel=1e-12)
    for bad in (-1, float("nan"), "much"):
        capped["links"]["inter_node"]["aggregate_burst_bytes"] = bad
        path.write_text(json.dumps(capped))
        with pytest.raises(InputError, match="aggregate_burst_bytes"):
            parse_topology(str(path))
    path.write_text(json.dumps(_record([0, 0, 1, 1])))
    # groups that are not consecutive blocks are kept as they are (and fix the rank count)
    path.write_text(json.dumps(_record([0, 1, 0, 1])))
    assert parse_topology(str(path)).groups(4).tolist() == [0, 1, 0, 1]
    with pytest.raises(InputError, match="made for 4 ranks, not 8"):
        parse_topology(str(path)).groups(8)


def test_all_nodes_at_once_cap_the_shared_links_together(rng):
    import dataclasses

    from sparsewire.calibration.network import _crossing_flows, _outgoing_flows, _ring_flows
    from sparsewire.partition import even_rows

    # every rank to its partner on the next node, the last node to the first; uneven nodes wrap their partners
    assert _ring_flows(np.array([0, 0, 1, 1])) == [(0, 2), (1, 3), (2, 0), (3, 1)]
    assert _ring_flows(np.array([0, 1, 2, 3])) == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert _ring_flows(np.array([5, 5, 5, 2])) == [(0, 3), (1, 3), (2, 3), (3, 0)]
    # the aggregate's flows: every rank to every rank of the other nodes
    assert _crossing_flows(np.array([0, 0, 1, 1])) == [(0, 2), (0, 3), (1, 2), (1, 3), (2, 0), (2, 1), (3, 0), (3, 1)]
    assert _crossing_flows(np.array([0, 1, 2])) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert _crossing_flows(np.array([7, 7])) == []
    groups = rng.integers(0, 3, int(rng.integers(2, 9)))
    crossing = _crossing_flows(groups)
    assert len(crossing) == len(groups) ** 2 - int(np.sum(np.bincount(groups) ** 2))
    assert all(groups[a] != groups[b] for a, b in crossing) and len(set(crossing)) == len(crossing)
    # the burst's flows: those that leave rank 0's node
    assert _outgoing_flows(np.array([0, 0, 1, 1])) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert _outgoing_flows(np.array([0, 1, 2, 3])) == [(0, 1), (0, 2), (0, 3)]
    assert _outgoing_flows(np.array([4, 2, 4, 9])) == [(0, 1), (0, 3), (2, 1), (2, 3)]
    outgoing = _outgoing_flows(groups)
    assert outgoing == [(a, b) for a, b in crossing if groups[a] == groups[0]]
    assert len(outgoing) == int(np.sum(groups == groups[0]) * np.sum(groups != groups[0]))
    # random inputs: an aggregate of every node's rate together changes nothing; one node's rate makes every
    # node's bytes queue on it; below that the time only grows, never past the bytes at the aggregate's rate
    nodes = int(rng.integers(2, 5))
    ranks = nodes * int(rng.integers(1, 3))
    record = _record([rank * nodes // ranks for rank in range(ranks)])
    free = Topology.from_record(record)
    matrix = load_matrix(f"rmat:9:8:{int(rng.integers(1, 1000))}")
    parts = even_rows(matrix.shape[0], ranks)
    strategy = str(rng.choice(["column", "joint", "joint-hier"]))
    link = free.levels[1].link
    times = []
    for aggregate in (None, nodes * link.bandwidth, link.bandwidth, link.bandwidth / 2):
        levels = (free.levels[0], dataclasses.replace(free.levels[1], link=dataclasses.replace(link, aggregate=aggregate)))
        topology = dataclasses.replace(free, levels=levels)
        stats = strategy_stats(matrix, parts, parts, strategy, 8, 8, topology)
        times.append(predicted_communication_seconds(stats, topology))
    assert times[1] == pytest.approx(times[0], rel=1e-12), times
    assert times[0] <= times[2] <= times[3], times
    crossing = int(stats.message_bytes[topology.link_levels(stats.sources, stats.destinations, ranks) == 1].sum())
    assert times[3] >= crossing / (link.bandwidth / 2), (times, crossing)
    # bursts: the links' own leave a common cap (half a link) whole, so the time is the one without; the aggregate's
    # shortens it, never below its bytes less that burst at the aggregate's rate, and one of every byte leaves the
    # links' time
    burst = float(rng.uniform(0.1, 0.9)) * crossing / nodes
    aggregate_burst = float(rng.uniform(0.1, 0.9)) * crossing
    bursting = []
    for aggregate, both in ((link.bandwidth / 2, 0.0), (link.bandwidth / 2, aggregate_burst), (link.bandwidth / 2, 2 * crossing)):
        changed = dataclasses.replace(link, aggregate=aggregate, burst=burst, aggregate_burst=both)
        topology = dataclasses.replace(free, levels=(free.levels[0], dataclasses.replace(free.levels[1], link=changed)))
        bursting.append(predicted_communication_seconds(strategy_stats(matrix, parts, parts, strategy, 8, 8, topology), topology))
    assert bursting[0] == pytest.approx(times[3], rel=1e-12), (bursting, times)
    assert (crossing - aggregate_burst) / (link.bandwidth / 2) <= bursting[1] < bursting[0], (bursting, crossing)
    unlimited = dataclasses.replace(
        free, levels=(free.levels[0], dataclasses.replace(free.levels[1], link=dataclasses.replace(link, burst=burst)))
    )
    alone = predicted_communication_seconds(strategy_stats(matrix, parts, parts, strategy, 8, 8, unlimited), unlimited)
    assert bursting[2] == pytest.approx(alone, rel=1e-12), (bursting, alone)


def test_a_measured_relay_prices_every_step_after_the_first(rng):
    """``relay_seconds + relay_seconds_per_byte * (bytes of the step's busiest sender)`` per step after the first,
    on top of the hops' time; a plan of one step, or a record without the price, pays nothing."""
    record = _record([0, 0, 1, 1])
    plain = Topology.from_record(record)
    record["links"]["inter_node"].update(relay_seconds=1e-4, relay_seconds_per_byte=1e-9)
    priced = Topology.from_record(record)
    link = priced.levels[1].link
    assert (link.relay_seconds, link.relay_seconds_per_byte) == (1e-4, 1e-9)
    assert (plain.levels[1].link.relay_seconds, priced.levels[0].link.relay_seconds_per_byte) == (0.0, 0.0)

    def stats(sources, destinations, steps, nbytes):
        n = len(sources)
        arrays = [np.asarray(v, np.int64) for v in (sources, destinations, steps, nbytes)]
        return PlanStats("joint-group", 4, 8, 8, *arrays, np.ones(n, np.int64), 0, topology=priced)

    # Hand-made: step 0 crosses the link (ranks 0 -> 2, 1 -> 3); step 1 the proxies forward inside their node: rank
    # 2 sends 3000 bytes in two messages (to 3), rank 0 1000 (to 1); step 2 rank 3 sends 500 back to rank 2.
    two = stats([0, 1, 2, 2, 0], [2, 3, 3, 3, 1], [0, 0, 1, 1, 1], [8000, 4000, 1000, 2000, 1000])
    assert predicted_relay_seconds(two) == pytest.approx(1e-4 + 1e-9 * 3000, rel=1e-12)
    assert predicted_communication_seconds(two) == pytest.approx(
        predicted_communication_seconds(two, plain) + 1e-4 + 3e-6, rel=1e-12
    )
    three = stats([0, 1, 2, 2, 0, 3], [2, 3, 3, 3, 1, 2], [0, 0, 1, 1, 1, 2], [8000, 4000, 1000, 2000, 1000, 500])
    assert predicted_relay_seconds(three) == pytest.approx(2e-4 + 1e-9 * 3500, rel=1e-12)
    one = stats([0, 1, 2], [2, 3, 3], [0, 0, 0], [8000, 4000, 3000])
    assert predicted_relay_seconds(one) == 0.0
    assert predicted_relay_seconds(two, plain) == 0.0
    # On random inputs: flat plans (one step) pay nothing; the two-level plans pay at least the fixed part once, at
    # most once per later step with every byte, and the per-byte part in proportion to its price.
    matrix = load_matrix(f"rmat:9:8:{int(rng.integers(1, 1000))}")
    split = partition(matrix, 4)
    fixed, per_byte = float(rng.uniform(1e-5, 1e-3)), float(rng.uniform(1e-10, 1e-8))
    record["links"]["inter_node"].update(relay_seconds=fixed, relay_seconds_per_byte=per_byte)
    random_price = Topology.from_record(record)
    record["links"]["inter_node"].update(relay_seconds=0.0, relay_seconds_per_byte=2 * per_byte)
    doubled = Topology.from_record(record)
    record["links"]["inter_node"]["relay_seconds_per_byte"] = per_byte
    bytes_only = Topology.from_record(record)
    for strategy in ("joint", "column", "column-hier", "joint-hier", "joint-group"):
        counted = strategy_stats(matrix, split.rows, split.cols, strategy, 16, 8, random_price)
        added = predicted_communication_seconds(counted) - predicted_communication_seconds(counted, plain)
        later = int(np.unique(counted.steps).size) - 1
        assert added == pytest.approx(predicted_relay_seconds(counted), rel=1e-9, abs=1e-15), strategy
        if later == 0:
            assert added == 0.0, strategy
            continue
        assert fixed * later <= added <= later * (fixed + per_byte * counted.total_bytes), (strategy, added)
        by_bytes = predicted_relay_seconds(counted, bytes_only)
        assert by_bytes > 0 and predicted_relay_seconds(counted, doubled) == pytest.approx(2 * by_bytes, rel=1e-12), strategy


def test_the_relay_price_is_the_line_through_the_measured_extras():
    # hand-made: (1000, 2 us) and (3000, 6 us) lie on 2 ns a byte through 0; a slower small message adds a fixed part
    assert relay_price([1000, 3000], [2e-6, 6e-6]) == pytest.approx((0.0, 2e-9), abs=1e-18)
    fixed, per_byte = relay_price([1000, 3000], [5e-6, 6e-6])
    assert per_byte == pytest.approx(5e-10, rel=1e-12) and fixed == pytest.approx(4.5e-6, rel=1e-12)
    # a relay never saves time: a falling line is flat at the small size's extra, a negative one 0
    assert relay_price([1000, 3000], [5e-6, 1e-6]) == (5e-6, 0.0)
    assert relay_price([1000, 3000], [-5e-6, -1e-6]) == pytest.approx((0.0, 2e-9), abs=1e-18)
    assert relay_price([1000, 3000], [-5e-6, -6e-6]) == (0.0, 0.0)
    # who relays: a node of two ranks holds the proxy and the receiver, the sender is on another node
    assert relay_ranks(np.array([0, 0, 2, 2])) == (2, 0, 1)
    assert relay_ranks(np.array([0, 1, 1])) == (0, 1, 2)
    assert relay_ranks(np.array([0, 0, 0, 3])) == (3, 0, 1)
    assert relay_ranks(np.array([0, 1, 2, 3])) is None and relay_ranks(np.array([0, 0])) is None


def test_contention_lets_the_busiest_rank_run_at_its_rate_alone(rng):
    import scipy.sparse as sp

    from sparsewire.partition import even_rows
    from sparsewire.plan.cost import local_parts

    record = _record([0, 1])  # two nodes: the hand-made plan's messages cross, copied twice at each end
    record["local"] = {"nonzero_columns_per_second": 2e9, "copy_bytes_per_second": 4e9}
    shared = Topology.from_record(record)
    record["local"]["alone_nonzero_columns_per_second"] = 4e9  # a = 2: two ranks per core
    contended = Topology.from_record(record)
    assert (shared.local_rate_alone, contended.local_rate_alone) == (None, 4e9)
    # Hand-made, k = 8, column: rank 0 (rows 0-3) uses columns 4-7 of every row (16 entries, no diagonal block),
    # rank 1 (rows 4-7) its diagonal (4). Rank 0 receives 4 B rows, rank 1 copies them out: 4 x 64 bytes each way.
    # w_0 = 16 * 8 / 2e9 + 2 * 256 / 4e9 = 19.2e-8, w_1 = 4 * 8 / 2e9 + 2 * 256 / 4e9 = 14.4e-8, mean 16.8e-8;
    # a = 2: w_0 -> max(9.6e-8, 16.8e-8), w_1 -> max(7.2e-8, 14.4e-8); d = (0, 1.6e-8).
    entries = [(i, j) for i in range(4) for j in range(4, 8)] + [(i, i) for i in range(4, 8)]
    matrix = sp.csr_array((np.ones(len(entries)), tuple(zip(*entries))), shape=(8, 8))
    parts = even_rows(8, 2)
    stats = strategy_stats(matrix, parts, parts, "column", 8, 8, shared)
    diagonal, rest = local_parts(stats, shared)
    np.testing.assert_allclose(diagonal, [0, 1.6e-8], rtol=1e-12)
    np.testing.assert_allclose(rest, [19.2e-8, 14.4e-8], rtol=1e-12)
    np.testing.assert_allclose(local_parts(stats, contended)[1], [16.8e-8, 14.4e-8], rtol=1e-12)
    assert predicted_local_seconds(stats, shared) == pytest.approx(19.2e-8, rel=1e-12)
    assert predicted_local_seconds(stats, contended) == pytest.approx(16.8e-8, rel=1e-12)
    # The copies' own rate alone: rank 0's products at the shared rate (6.4e-8) and its copies at 4.5e9 (512 / 4.5e9)
    # come above the mean; the kernel's alone rate unknown.
    del record["local"]["alone_nonzero_columns_per_second"]
    record["local"]["alone_copy_bytes_per_second"] = 4.5e9
    copying = Topology.from_record(record)
    assert (copying.local_rate_alone, copying.copy_rate_alone) == (None, 4.5e9)
    np.testing.assert_allclose(local_parts(stats, copying)[1], [6.4e-8 + 512 / 4.5e9, 14.4e-8], rtol=1e-12)
    del record["local"]["alone_copy_bytes_per_second"]
    # On random inputs: rates alone equal to the shared ones change nothing; above, a rank's rest lies between its own
    # at the rates alone and at the shared rates, and the busiest is never below the mean.
    matrix = load_matrix(f"rmat:9:8:{int(rng.integers(1, 1000))}")
    split = partition(matrix, 4)
    for strategy in ("column", "row", "joint"):
        counted = strategy_stats(matrix, split.rows, split.cols, strategy, 16, 8, shared)
        _, plain = local_parts(counted, shared)
        record["local"].update(alone_nonzero_columns_per_second=2e9, alone_copy_bytes_per_second=4e9)  # a = c = 1
        assert np.array_equal(local_parts(counted, Topology.from_record(record))[1], plain), strategy
        for a, c in ((1.5, 1.0), (2.0, 3.0), (4.0, 1.5), (1.0, 2.0)):
            record["local"]["alone_nonzero_columns_per_second"] = 2e9 * a
            record["local"]["alone_copy_bytes_per_second"] = 4e9 * c
            _, spread = local_parts(counted, Topology.from_record(record))
            assert (plain / max(a, c) <= spread * (1 + 1e-12)).all() and (spread <= plain * (1 + 1e-12)).all(), strategy
            assert spread.max() >= plain.mean() * (1 - 1e-12), strategy


def test_measured_local_rates_add_the_busiest_ranks_work_to_the_prediction(tmp_path, rng):
    path = tmp_path / "net.json"
    path.write_text(json.dumps(_record([0, 1])))
    without = parse_topology(str(path))
    record = _record([0, 1])  # two nodes: the hand-made plan's messages cross, copied twice at each end
    record["local"] = {"nonzero_columns_per_second": 2e9, "copy_bytes_per_second": 4e9}
    path.write_text(json.dumps(record))
    topology = parse_topology(str(path))
    assert (topology.local_rate, topology.copy_rate, without.local_rate, without.copy_rate) == (2e9, 4e9, None, None)
    # Hand-made: ranks own rows/columns 0-1 and 2-3 of a 4 x 4 with 5 nonzeros, a rank per node.
    #   rank 0: rows (0, 0), (0, 2), (1, 3); rank 1: rows (2, 2), (3, 0). column: rank 0 needs B rows 2 and 3
    #   (2 rows in), rank 1 needs row 0 (1 row in). Operator entries: rank 0 3 + 1 copied out = 4, rank 1 2 + 2 = 4.
    import scipy.sparse as sp

    from sparsewire.partition import even_rows

    matrix = sp.csr_array(([1.0, 2.0, 3.0, 4.0, 5.0], ([0, 0, 1, 2, 3], [0, 2, 3, 2, 0])), shape=(4, 4))
    parts = even_rows(4, 2)
    stats = strategy_stats(matrix, parts, parts, "column", 8, 8, topology)
    assert stats.rank_entries.tolist() == [4, 4]
    # rank 0 sends 1 row and receives 2 (x 8 columns x 8 bytes): (1 + 2) * 64 bytes, copied twice each
    expected = 4 * 8 / 2e9 + 2 * 3 * 64 / 4e9
    assert predicted_local_seconds(stats) == pytest.approx(expected, rel=1e-12)
    assert predicted_seconds(stats) == pytest.approx(predicted_communication_seconds(stats) + expected, rel=1e-12)
    assert predicted_local_seconds(stats, without) == 0.0 and predicted_seconds(
        stats, without
    ) == predicted_communication_seconds(stats)
    # Both ranks on one node: the same messages move through shared memory, copied once at each end.
    one_node = Topology.from_record({**record, "ranks": 2, "rank_groups": [0, 0], "group_size": 2})
    one_node_stats = strategy_stats(matrix, parts, parts, "column", 8, 8, one_node)
    assert predicted_local_seconds(one_node_stats) == pytest.approx(4 * 8 / 2e9 + 3 * 64 / 4e9, rel=1e-12)
    # Where the mode multiplies the diagonal block while messages are in flight, that block (one nonzero per rank:
    # (0, 0) and (2, 2)) hides behind the communication, the rest follows it; bulk adds everything.
    assert stats.rank_diagonal_entries.tolist() == [1, 1]
    communication, diagonal, rest = predicted_communication_seconds(stats), 1 * 8 / 2e9, 3 * 8 / 2e9 + 2 * 3 * 64 / 4e9
    assert diagonal < communication
    assert predicted_seconds(stats, overlaps_diagonal=True) == pytest.approx(communication + rest, rel=1e-12)
    record["local"] = {"nonzero_columns_per_second": 1e3, "copy_bytes_per_second": 4e9}  # a diagonal slower than the link
    path.write_text(json.dumps(record))
    slow = parse_topology(str(path))
    assert predicted_seconds(stats, slow, overlaps_diagonal=True) == pytest.approx(8 / 1e3 + 3 * 8 / 1e3 + 2 * 3 * 64 / 4e9)
    assert predicted_seconds(stats, slow) == pytest.approx(communication + 4 * 8 / 1e3 + 2 * 3 * 64 / 4e9, rel=1e-12)
    # On random inputs, two nodes of two ranks: the counted and the built plan's work agree, and the term grows with
    # the busiest rank's work; its copies from the plan's rank pairs (twice at each end between nodes, once inside).
    record = _record([0, 0, 1, 1])
    record["local"] = {"nonzero_columns_per_second": 2e9, "copy_bytes_per_second": 4e9}
    topology = Topology.from_record(record)
    nodes = np.array([0, 0, 1, 1])
    matrix = load_matrix(f"rmat:9:8:{int(rng.integers(1, 1000))}")
    parts = partition(matrix, 4)
    for strategy in ("column", "row", "joint"):
        counted = strategy_stats(matrix, parts.rows, parts.cols, strategy, 16, 8, topology)
        planned = plan_stats(build_plan(matrix, parts.rows, parts.cols, strategy, topology).ranks, 16, 8, topology=topology)
        assert counted.rank_entries.tolist() == planned.rank_entries.tolist()
        assert counted.rank_diagonal_entries.tolist() == planned.rank_diagonal_entries.tolist()
        assert ((0 < counted.rank_diagonal_entries) & (counted.rank_diagonal_entries <= counted.rank_entries)).all()
        moved = np.zeros(4)
        for source, destination, nbytes in zip(planned.pair_sources, planned.pair_destinations, planned.pair_bytes):
            ends = nbytes * (1.0 if nodes[source] != nodes[destination] else 0.5)  # 2 moved / 4e9 below: 2 or 1 copies
            moved[source] += ends
            moved[destination] += ends
        assert 0 < moved.sum() < (counted.send_bytes_per_rank + counted.recv_bytes_per_rank).sum(), strategy
        busiest = (counted.rank_entries * 16 / 2e9 + 2 * moved / 4e9).max()
        assert busiest > 0 and predicted_local_seconds(counted) == pytest.approx(busiest, rel=1e-12)
        communication = predicted_communication_seconds(counted)
        hidden = counted.rank_diagonal_entries * 16 / 2e9
        overlapped = (np.maximum(communication, hidden) + counted.rank_entries * 16 / 2e9 - hidden + 2 * moved / 4e9).max()
        assert predicted_seconds(counted, overlaps_diagonal=True) == pytest.approx(overlapped, rel=1e-12)
        assert communication < overlapped < predicted_seconds(counted) == pytest.approx(communication + busiest, rel=1e-12)


def test_a_measured_overlap_hides_that_share_of_the_diagonal_block(tmp_path, rng):
    """The overlapping modes' ``T = max_r (T_comm + d_r - h min(T_comm, d_r) + w_r)``: h = 1 (or none measured) the
    diagonal block hides whole, h = 0 the bulk form's sum, between them that share of the shorter."""
    import scipy.sparse as sp

    from sparsewire.partition import even_rows

    # the fraction from the three times: exact cases, clipped to [0, 1]
    assert hidden_fraction(10.0, 4.0, 10.0) == 1.0 and hidden_fraction(4.0, 10.0, 14.0) == 0.0
    assert hidden_fraction(10.0, 4.0, 12.0) == pytest.approx(0.5, rel=1e-12)
    assert hidden_fraction(10.0, 4.0, 9.0) == 1.0 and hidden_fraction(10.0, 4.0, 20.0) == 0.0
    with pytest.raises(InputError, match="positive length"):
        hidden_fraction(0.0, 4.0, 4.0)
    record = _record([0, 1])  # two nodes: the hand-made plan's messages cross, copied twice at each end
    record["local"] = {"nonzero_columns_per_second": 1e3, "copy_bytes_per_second": 4e9}  # a diagonal slower than the link
    # the hand-made plan of the local-rates test: one diagonal nonzero per rank (d = 8 / 1e3), rest 3 * 8 / 1e3 + copies
    matrix = sp.csr_array(([1.0, 2.0, 3.0, 4.0, 5.0], ([0, 0, 1, 2, 3], [0, 2, 3, 2, 0])), shape=(4, 4))
    parts = even_rows(4, 2)
    times = {}
    for fraction in (None, 1.0, 0.5, 0.0):
        if fraction is not None:
            record["links"]["inter_node"]["overlap"] = {"fraction": fraction}
        path = tmp_path / "net.json"
        path.write_text(json.dumps(record))
        topology = parse_topology(str(path))
        assert topology.overlap == fraction
        stats = strategy_stats(matrix, parts, parts, "column", 8, 8, topology)
        times[fraction] = predicted_seconds(stats, topology, overlaps_diagonal=True)
    communication, diagonal, rest = predicted_communication_seconds(stats), 8 / 1e3, 3 * 8 / 1e3 + 2 * 3 * 64 / 4e9
    assert communication < diagonal
    assert times[None] == times[1.0] == pytest.approx(diagonal + rest, rel=1e-12)
    assert times[0.5] == pytest.approx(diagonal + rest + 0.5 * communication, rel=1e-12)
    assert times[0.0] == pytest.approx(predicted_seconds(stats, topology), rel=1e-12)  # bulk's sum
    # damaged fractions are refused with the command that writes a good one
    for bad in (1.5, -0.1, float("nan"), "most"):
        record["links"]["inter_node"]["overlap"] = {"fraction": bad}
        path.write_text(json.dumps(record))
        with pytest.raises(InputError, match="inter_node.overlap.fraction.*calibrate --network"):
            parse_topology(str(path))
    with pytest.raises(InputError, match="overlap must be a fraction within"):
        dataclasses.replace(Topology.from_record(_record([0, 1])), overlap=2.0)
    # random inputs: h = 0 is bulk's sum, h = 1 the whole block hidden, and the time falls as h grows
    matrix = load_matrix(f"rmat:9:8:{int(rng.integers(1, 1000))}")
    split = partition(matrix, 4)
    record["local"] = {"nonzero_columns_per_second": float(rng.uniform(1e6, 1e9)), "copy_bytes_per_second": 4e9}
    del record["links"]["inter_node"]["overlap"]
    base = Topology.from_record(record)
    for strategy in ("column", "joint", "joint-hier"):
        stats = strategy_stats(matrix, split.rows, split.cols, strategy, 16, 8, base)
        fractions = sorted(rng.uniform(0, 1, 3).tolist()) + [0.0, 1.0]
        priced = {h: predicted_seconds(stats, dataclasses.replace(base, overlap=h), overlaps_diagonal=True) for h in fractions}
        assert priced[0.0] == pytest.approx(predicted_seconds(stats, base), rel=1e-12), strategy
        assert priced[1.0] == pytest.approx(predicted_seconds(stats, base, overlaps_diagonal=True), rel=1e-12), strategy
        ordered = [priced[h] for h in sorted(fractions)]
        assert all(a >= b * (1 - 1e-12) for a, b in zip(ordered, ordered[1:])), (strategy, priced)


def test_the_work_on_messages_between_groups_runs_beside_the_stream_as_the_diagonal_block_does(rng):
    """Where the overlap schedule works on the messages between groups while others cross (:func:`cuts_messages`:
    in pieces on a flat plan, a step's whole messages while the next step's cross on a relaying one), that work
    (``p_r``: the send rows to and the receive columns from another group in the exchanges that read B alone, and
    those messages' copies) runs while the stream left after the diagonal block crosses, the stream taking (1 - h_p)
    of the cores: ``T = max_r (d_r + max(S_r, (1 - h_p) S_r + p_r) + w_r - p_r)``, ``S_r = T_comm - h min(T_comm,
    d_r)``. Its entries are counted from the plan and, for ``column``, from the matrix alone; a relay's forwarded
    rows are not among them, and without a measured h_p the work is priced after the link."""
    import scipy.sparse as sp

    from sparsewire.exec.options import ExecOptions, cuts_messages
    from sparsewire.partition import even_rows
    from sparsewire.plan.cost import beside_parts, local_parts

    # hand-made: one diagonal nonzero per rank; the rest (send rows, receive columns) crosses between two nodes
    matrix = sp.csr_array(([1.0, 2.0, 3.0, 4.0, 5.0], ([0, 0, 1, 2, 3], [0, 2, 3, 2, 0])), shape=(4, 4))
    parts = even_rows(4, 2)
    for strategy in ("row", "column", "joint"):
        apart = plan_stats(build_plan(matrix, parts, parts, strategy, Topology.nodes(1)).ranks, 8, 8, topology=Topology.nodes(1))
        together = plan_stats(
            build_plan(matrix, parts, parts, strategy, Topology.nodes(2)).ranks, 8, 8, topology=Topology.nodes(2)
        )
        assert apart.rank_inter_group_entries.tolist() == [3, 3], strategy
        assert together.rank_inter_group_entries.tolist() == [0, 0], strategy
    # hand-made, two nodes of two ranks: B row 0 goes to ranks 2 and 3. `column` sends it twice across (rank 0 packs
    # two rows, ranks 2 and 3 apply one each); `column-hier` once, to rank 2, which forwards it to rank 3 inside the
    # node: the forward reads a received row, not B, and rank 3's copy comes from its own node
    matrix = sp.csr_array(([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], ([0, 1, 2, 2, 3, 3], [0, 1, 2, 0, 3, 0])), shape=(4, 4))
    ranks = even_rows(4, 4)
    for strategy, expected in (("column", [2, 0, 1, 1]), ("column-hier", [1, 0, 1, 0])):
        stats = plan_stats(build_plan(matrix, ranks, ranks, strategy, Topology.nodes(2)).ranks, 8, 8, topology=Topology.nodes(2))
        assert stats.rank_inter_group_entries.tolist() == expected, strategy
    # row 4 (rank 2) reads columns 0-3 (ranks 0 and 1): `joint` sends a partial C row from each across (two entries
    # packed at each end, one applied per message at rank 2); `joint-hier` sums them at rank 0 first, and the summed
    # row it sends across reads a received partial, not B, as does rank 2's step that applies it
    rows, columns = [0, 1, 2, 3, 4, 5, 6, 7, 4, 4, 4, 4], [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]
    matrix = sp.csr_array((np.arange(1.0, 13.0), (rows, columns)), shape=(8, 8))
    ranks = even_rows(8, 4)
    for strategy, expected in (("joint", [2, 2, 2, 0]), ("joint-hier", [0, 0, 0, 0])):
        stats = plan_stats(build_plan(matrix, ranks, ranks, strategy, Topology.nodes(2)).ranks, 8, 8, topology=Topology.nodes(2))
        assert stats.rank_inter_group_entries.tolist() == expected, strategy
    # random: four nodes of one rank (every message crosses) and two of two, priced under measured rates and h
    matrix = load_matrix(f"rmat:9:8:{int(rng.integers(1, 1000))}")
    split = partition(matrix, 4)
    h, h_p = rng.uniform(0.05, 0.95, 2).tolist()
    record = _record([0, 1, 2, 3])
    local = {"nonzero_columns_per_second": float(rng.uniform(1e7, 1e9)), "copy_bytes_per_second": 4e9}
    record["local"] = local
    record["links"]["inter_node"]["overlap"] = {"fraction": h}
    record["links"]["inter_node"]["piece_overlap"] = {"fraction": h_p}
    apart = Topology.from_record(record)
    assert (apart.overlap, apart.piece_overlap) == (h, h_p)
    record = _record([0, 0, 1, 1])
    record["local"] = local
    record["links"]["inter_node"]["overlap"] = {"fraction": h}
    record["links"]["inter_node"]["piece_overlap"] = {"fraction": h_p}
    two = Topology.from_record(record)
    csr, owners = sp.csr_array(split.permute(matrix)), split.cols.owner(np.arange(matrix.shape[1]))
    for strategy in ("column", "row", "joint"):
        stats = plan_stats(build_plan(csr, split.rows, split.cols, strategy, apart).ranks, 16, 8, topology=apart)
        assert stats.rank_inter_group_entries.tolist() == (stats.rank_entries - stats.rank_diagonal_entries).tolist()
        communication = predicted_communication_seconds(stats)
        diagonal, rest = local_parts(stats)
        assert beside_parts(stats) == pytest.approx(rest, rel=1e-12)  # all of w_r is on the pieces
        whole = predicted_seconds(stats, overlaps_diagonal=True)
        cut = predicted_seconds(stats, overlaps_diagonal=True, beside_stream=True)
        stream = communication - h * np.minimum(communication, diagonal)
        assert whole == pytest.approx((diagonal + stream + rest).max(), rel=1e-12)
        assert cut == pytest.approx((diagonal + np.maximum(stream, (1 - h_p) * stream + rest)).max(), rel=1e-12)
        assert communication <= cut <= whole, strategy
        unmeasured = dataclasses.replace(apart, piece_overlap=None)
        assert predicted_seconds(stats, unmeasured, overlaps_diagonal=True, beside_stream=True) == whole
        assert predicted_seconds(stats, beside_stream=True) == predicted_seconds(stats)  # bulk: the work after the link
        stats = plan_stats(build_plan(csr, split.rows, split.cols, strategy, two).ranks, 16, 8, topology=two)
        crossing = stats.rank_inter_group_entries
        assert (0 < crossing).all() and (crossing < stats.rank_entries - stats.rank_diagonal_entries).all(), strategy
        if strategy == "column":  # from the matrix: A's entries in columns of the other node, and B rows sent there
            groups = two.groups(4)
            expected = np.zeros(4, np.int64)
            for rank in range(4):
                start, stop = split.rows.range(rank)
                columns = csr[start:stop].indices
                expected[rank] += np.count_nonzero(groups[owners[columns]] != groups[rank])
                for other in np.flatnonzero(groups != groups[rank]):
                    needed = np.unique(csr[slice(*split.rows.range(other))].indices)
                    expected[rank] += np.count_nonzero(owners[needed] == rank)
            assert crossing.tolist() == expected.tolist()
    for strategy in ("column-hier", "joint-group"):  # relaying: the same form, without the forwarded rows
        plan = build_plan(csr, split.rows, split.cols, strategy, two)
        relaying = plan_stats(plan.ranks, 16, 8, topology=two)
        assert any(relays(rank_plan) for rank_plan in plan.ranks), strategy
        forwarded = np.array(
            [sum(e.send_matrix.nnz + e.receive_matrix.nnz for e in p.exchanges if e.input is not None) for p in plan.ranks]
        )
        work = relaying.rank_entries - relaying.rank_diagonal_entries
        assert (0 < relaying.rank_inter_group_entries).all() and (relaying.rank_inter_group_entries <= work - forwarded).all()
        communication = predicted_communication_seconds(relaying)
        diagonal, rest = local_parts(relaying)
        parts = beside_parts(relaying)
        assert (0 < parts).all() and (parts < rest).all(), strategy
        stream = communication - h * np.minimum(communication, diagonal)
        beside = predicted_seconds(relaying, overlaps_diagonal=True, beside_stream=True)
        expected = (diagonal + np.maximum(stream, (1 - h_p) * stream + parts) + rest - parts).max()
        assert beside == pytest.approx(expected, rel=1e-12)
        assert beside < predicted_seconds(relaying, overlaps_diagonal=True), strategy
    # damaged fractions are refused with the command that writes a good one
    for bad in (1.5, -0.1, float("nan")):
        record["links"]["inter_node"]["piece_overlap"] = {"fraction": bad}
        with pytest.raises(InputError, match="inter_node.piece_overlap.fraction.*calibrate --network"):
            Topology.from_record(record)
    with pytest.raises(InputError, match="piece_overlap must be a fraction within"):
        dataclasses.replace(two, piece_overlap=2.0)
    # the executor's rule: the overlap schedule's modes over MPI on the CPU, without a codec or the ordered combine
    plain = ExecOptions()
    assert [cuts_messages(plain, mode) for mode in ("bulk", "overlap", "pipelined", "early", "partitioned")] == [
        False, True, True, False, False,
    ]  # fmt: skip
    for changed in ({"deterministic": True}, {"compress": "bf16"}, {"transport": "torch"}):
        assert not cuts_messages(plain.replace(**changed), "overlap"), changed


def test_the_piece_overlap_multiplies_a_row_range_after_each_piece(monkeypatch):
    """``piece_overlap`` on one rank sending to itself, each row of its kernel made to last a known time (the whole
    matrix 20 ms): the stream is cut into pieces of ``PIECE_BYTES``, each run of the work covers every row once in
    as many ranges as there are pieces (one range while sizing), and the fraction is its medians'
    :func:`hidden_fraction`."""
    import time

    from mpi4py import MPI

    from sparsewire.calibration.overlap import piece_overlap
    from sparsewire.exec.message_rows import PIECE_BYTES
    from sparsewire.kernels import compiled

    pause, ranges = 0.02, []
    rows = compiled.multiply_rows

    def multiply_rows(operand, b, out, start, stop):
        ranges.append((start, stop))
        time.sleep(pause * (stop - start) / operand.shape[0])
        rows(operand, b, out, start, stop)

    monkeypatch.setattr(compiled, "multiply_rows", multiply_rows)
    repeat = 4
    measured = piece_overlap(MPI.COMM_SELF, [(0, 0)], 1e9, 1, repeat)
    pieces = measured["pieces"]
    assert pieces == -(-measured["message_bytes"] // PIECE_BYTES) and pieces >= 1, measured
    assert pause <= measured["message_bytes"] / 1e9 < 10 * pause, measured  # sized to cross in the work's time
    n_rows = max(stop for _, stop in ranges)
    sizing, timed = ranges[:4], ranges[4:]
    assert sizing == [(0, n_rows)] * 4 and len(timed) == 2 * repeat * pieces, (len(timed), pieces, repeat)
    for run in range(2 * repeat):  # each run: contiguous ranges from 0 to the last row
        bounds = timed[run * pieces : (run + 1) * pieces]
        assert bounds[0][0] == 0 and bounds[-1][1] == n_rows and all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert pause <= measured["work_seconds"] < 10 * pause and measured["repeat"] == repeat, measured
    expected = hidden_fraction(measured["stream_seconds"], measured["work_seconds"], measured["together_seconds"])
    assert measured["fraction"] == expected and 0 <= expected <= 1


def test_the_overlap_is_timed_on_the_stream_and_the_kernel_it_names(monkeypatch):
    """``stream_overlap`` on one rank sending to itself, its kernel made to last a known time: each call of the executor's
    kernel (whole or in row pieces) also sleeps 20 ms, so the work it records lasts at least that, whatever else
    runs on the machine (a second clock beside the real kernel alone failed whenever the fast tier's background
    processes shared the cores). The kernel is called once to warm up, three times to size the message, then once
    per repeat alone and once beside the stream; the message is sized to cross in the work's time at the rate given,
    and the fraction is the three medians' :func:`hidden_fraction`."""
    import time

    from mpi4py import MPI

    from sparsewire.calibration.overlap import stream_overlap
    from sparsewire.kernels import compiled

    pause, calls = 0.02, []
    whole, rows = compiled.multiply, compiled.multiply_rows

    def multiply(operand, b, out):
        calls.append(operand.shape[0])
        time.sleep(pause)
        whole(operand, b, out)

    def multiply_rows(operand, b, out, start, stop):
        calls.append(stop - start)
        time.sleep(pause * (stop - start) / operand.shape[0])
        rows(operand, b, out, start, stop)

    monkeypatch.setattr(compiled, "multiply", multiply)
    monkeypatch.setattr(compiled, "multiply_rows", multiply_rows)
    repeat = 5
    measured = stream_overlap(MPI.COMM_SELF, [(0, 0)], 1e9, 1, repeat)
    # every row of the benchmark matrix multiplied once per call of the work: warm-up, 3 to size, 2 per repeat
    rows_total = sum(calls)
    assert rows_total % (1 + 3 + 2 * repeat) == 0 and rows_total // (1 + 3 + 2 * repeat) > 0, calls
    assert pause <= measured["work_seconds"] < 10 * pause, measured
    # sized from the first three samples of the work: at least the pause's crossing at 1 GB/s
    sized_for = measured["message_bytes"] / 1e9
    assert pause <= sized_for < 10 * pause, measured
    assert measured["stream_seconds"] > 0 and measured["together_seconds"] >= pause and measured["repeat"] == repeat
    expected = hidden_fraction(measured["stream_seconds"], measured["work_seconds"], measured["together_seconds"])
    assert measured["fraction"] == expected and 0 <= expected <= 1


def test_the_matrix_own_rate_takes_the_calibrated_rates_place():
    import scipy.sparse as sp

    from sparsewire.partition import even_rows
    from sparsewire.plan.cost import local_parts

    record = _record([0, 1])  # two nodes: the hand-made plan's messages cross, copied twice at each end
    assert Topology.from_record(record).local_rate_matrix is None
    with pytest.raises(InputError, match="no local rate; measure one with 'sparsewire calibrate --network'"):
        Topology.from_record(record).with_local_rate(1e9, "a.mtx")
    record["local"] = {
        "nonzero_columns_per_second": 2e9,
        "copy_bytes_per_second": 4e9,
        "alone_nonzero_columns_per_second": 3e9,
        "alone_copy_bytes_per_second": 6e9,
        "matrix": "rmat:16:8:1",
    }
    calibrated = Topology.from_record(record)
    assert calibrated.local_rate_matrix == "rmat:16:8:1"
    own = calibrated.with_local_rate(5e9, "a.mtx")
    # the matrix's rate in place of R-MAT's, the contention ratio a = 1.5 kept, the copy rate and links unchanged
    assert (own.local_rate, own.local_rate_alone, own.local_rate_matrix) == (5e9, 7.5e9, "a.mtx")
    assert (own.copy_rate, own.copy_rate_alone) == (4e9, 6e9)
    assert own.levels == calibrated.levels and own.groups(4).tolist() == calibrated.groups(4).tolist()
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "fast"):
        with pytest.raises(InputError, match="a local rate must be a positive number"):
            calibrated.with_local_rate(bad, "a.mtx")
    # The hand-made column plan of the contention test: the diagonal block (rank 1's 4 entries x k = 8) at 5e9,
    # the rest (entries at 5e9, copies at 4e9: 16 * 8 / 5e9 + 512 / 4e9 = 15.36e-8 and 4 * 8 / 5e9 + 512 / 4e9 =
    # 13.44e-8, mean 14.4e-8; alone rank 0's 16 * 8 / 7.5e9 + 512 / 6e9 = 10.24e-8, so the mean).
    entries = [(i, j) for i in range(4) for j in range(4, 8)] + [(i, i) for i in range(4, 8)]
    matrix = sp.csr_array((np.ones(len(entries)), tuple(zip(*entries))), shape=(8, 8))
    parts = even_rows(8, 2)
    diagonal, rest = local_parts(strategy_stats(matrix, parts, parts, "column", 8, 8, own), own)
    np.testing.assert_allclose(diagonal, [0, 0.64e-8], rtol=1e-12)
    np.testing.assert_allclose(rest, [14.4e-8, 13.44e-8], rtol=1e-12)


def test_the_rows_rate_is_the_kernels_own_timing(rng, monkeypatch):
    """measure_rows_rate with the executor's kernel made to last a known time (each call also sleeps 5 ms): the
    rate is at most the rows' nonzeros x k per pause and not far below it, whatever else runs on the machine (a
    rate that forgot k would be 32x off); the kernel multiplies the rows exactly, their columns renumbered, so rows
    with column indices near 10^9 need no B of 10^9 rows; no nonzeros: None."""
    import time

    import scipy.sparse as sp
    from mpi4py import MPI

    from sparsewire.calibration.compute import measure_rows_rate
    from sparsewire.kernels import compiled

    pause, k, products = 0.005, 32, []
    whole = compiled.multiply

    def multiply(operand, b, out):
        time.sleep(pause)
        whole(operand, b, out)
        products.append((np.array(b), out.copy()))

    monkeypatch.setattr(compiled, "multiply", multiply)
    rows = load_matrix(f"rmat:12:8:{int(rng.integers(1, 1000))}").tocsr()[:2000]
    measured = measure_rows_rate(MPI.COMM_SELF, rows, k, threads=1, ranks_on_node=1, windows=3, window=0.1)
    ceiling = rows.nnz * k / pause
    assert ceiling / 10 < measured <= ceiling, (measured, ceiling)
    # the kernel timed is the rows' own product, their columns renumbered to the ones they hold, in order
    used, columns = np.unique(rows.indices, return_inverse=True)
    compact = sp.csr_array((rows.data, columns.reshape(-1), rows.indptr), shape=(rows.shape[0], len(used)))
    b, out = products[-1]
    assert b.shape == (len(used), k)
    np.testing.assert_allclose(out, compact @ b, rtol=1e-12)
    far = sp.csr_array((np.ones(3), ([0, 1, 1], [10**9 - 1, 5, 10**9 - 7])), shape=(2, 10**9))
    assert measure_rows_rate(MPI.COMM_SELF, far, 4, threads=1, ranks_on_node=1, windows=1, window=0.02) > 0
    empty = sp.csr_array((3, 10))
    assert measure_rows_rate(MPI.COMM_SELF, empty, 4, threads=1, ranks_on_node=1, windows=1, window=0.02) is None


def test_spmm_prices_local_work_at_the_matrix_own_rate(tmp_path):
    """One rank, no messages: the predicted time is the local work e * k / rate, e the matrix's nonzeros, at the
    rate measured on its rows by default and at the file's with --local-rate topology."""
    record = stamp("network")
    record.update(
        {
            "ranks": 1,
            "rank_groups": [0],
            "group_size": 1,
            "links": {"intra_node": {"bandwidth_bytes_per_second": 4e9, "latency_seconds": 3e-6}},
            "local": {"nonzero_columns_per_second": 1e3, "copy_bytes_per_second": 4e9, "matrix": "rmat:16:8:1"},
        }
    )
    path = tmp_path / "net.json"
    path.write_text(json.dumps(record))
    from conftest import run_cli

    args = ["spmm", "rmat:9:8:1", "--topology", str(path), "--strategy", "joint", "--k", "4", "--repeat", "1", "--json"]
    nonzeros = load_matrix("rmat:9:8:1").nnz
    reports = {}
    for choice in ("matrix", "topology"):
        completed = run_cli([*args, "--local-rate", choice])
        assert completed.returncode == 0, completed.stderr
        run = json.loads(completed.stdout)  # one run: the object itself
        assert run["predicted_seconds"] == pytest.approx(nonzeros * 4 / run["local_rate"], rel=1e-9)
        reports[choice] = run
    assert (reports["topology"]["local_rate"], reports["topology"]["local_rate_matrix"]) == (1e3, "rmat:16:8:1")
    # measured, not the file's 1e3: above 1e6 nonzero columns a second alone, 0.86e6 once beside other jobs
    assert reports["matrix"]["local_rate_matrix"] == "rmat:9:8:1" and reports["matrix"]["local_rate"] > 1e4


def test_a_damaged_or_foreign_record_is_refused_with_the_command_that_writes_one(tmp_path):
    path = tmp_path / "net.json"
    broken = _record([0, 0, 1, 1])
    del broken["links"]["inter_node"]["latency_seconds"]
    path.write_text(json.dumps(broken))
    with pytest.raises(InputError, match="lacks 'latency_seconds'.*calibrate --network"):
        parse_topology(str(path))
    for field, bad in (
        ("single_pair_bandwidth", float("nan")),
        ("single_pair_bandwidth", True),
        ("latency_seconds", -1e-6),
        ("burst_bytes", -1.0),
        ("aggregate_bandwidth_bytes_per_second", 0.0),
        ("aggregate_bandwidth_bytes_per_second", float("inf")),
        ("relay_seconds_per_byte", -1e-9),
    ):
        damaged = _record([0, 0, 1, 1])
        damaged["links"]["inter_node"][field] = bad
        path.write_text(json.dumps(damaged))  # NaN is written as the token NaN, as Python's json reads it
        with pytest.raises(InputError, match=f"has inter_node.{field} = {bad!r}, not a finite number"):
            parse_topology(str(path))
    for field, bad in (("nonzero_columns_per_second", 0), ("copy_bytes_per_second", "fast")):
        damaged = _record([0, 0, 1, 1])
        damaged["local"] = {"nonzero_columns_per_second": 1e9, "copy_bytes_per_second": 1e9, field: bad}
        path.write_text(json.dumps(damaged))
        with pytest.raises(InputError, match=f"has local.{field} = {bad!r}, not a finite number > 0.*calibrate --network"):
            parse_topology(str(path))
    path.write_text(json.dumps({**_record([0, 0]), "kind": "compute"}))
    with pytest.raises(InputError, match="not a network calibration.*calibrate --network"):
        parse_topology(str(path))
    with pytest.raises(InputError, match="does not exist"):
        parse_topology(str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"group_size": 0}, "group_size = 0, not a whole number >= 1"),
        ({"group_size": 1.5}, "group_size = 1.5, not a whole number >= 1"),
        ({"group_size": True}, "group_size = True, not a whole number >= 1"),
        ({"group_size": 1}, "with a group larger than group_size = 1"),
        ({"rank_groups": [0, 0, 2, 2]}, "not numbered 0, 1, ... without a gap"),
        ({"rank_groups": [0, 0, -1, -1]}, "not a list of group numbers >= 0"),
        ({"rank_groups": [0, 0, 1.0, 1]}, "not a list of group numbers >= 0"),
        ({"rank_groups": []}, "not a list of group numbers >= 0"),
        ({"rank_groups": "0011"}, "not a list of group numbers >= 0"),
        ({"links": {}}, "which measures neither intra_node nor inter_node"),
        ({"links": {"intranode": {}}}, "which measures neither intra_node nor inter_node"),
        ({"links": []}, "which measures neither intra_node nor inter_node"),
    ],
    ids=str,
)
def test_a_hand_edited_network_record_is_refused_with_the_field_and_the_rule(tmp_path, change, problem):
    path = tmp_path / "net.json"
    path.write_text(json.dumps({**_record([0, 0, 1, 1]), **change}))
    with pytest.raises(InputError, match=f"{re.escape(problem)}.*calibrate --network"):
        parse_topology(str(path))
    path.write_text(json.dumps(_record([0, 0, 1, 1])))
    assert parse_topology(str(path)).groups(4).tolist() == [0, 0, 1, 1]  # the record as written loads


def _full_record() -> dict:
    """A network record with every field the reader takes, each valid."""
    record = _record([0, 0, 1, 1])
    inter = record["links"]["inter_node"]
    inter.update(burst_bytes=262144.0, aggregate_bandwidth_bytes_per_second=2.4e8, aggregate_burst_bytes=524288.0)
    inter["overlap"] = {"fraction": 0.5}
    inter.update(relay_seconds=5e-5, relay_seconds_per_byte=4e-10)
    record["local"] = {
        "nonzero_columns_per_second": 1e9,
        "copy_bytes_per_second": 4e9,
        "alone_nonzero_columns_per_second": 2e9,
        "alone_copy_bytes_per_second": 6e9,
    }
    return record


#: Every number the reader takes: (path in the record, a valid value may be 0). (The aggregate and the local rates
#: may also be null: unknown, as in records made before they were measured.)
NUMBER_FIELDS = [
    (("links", "intra_node", "bandwidth_bytes_per_second"), False),
    (("links", "intra_node", "latency_seconds"), True),
    (("links", "inter_node", "single_pair_bandwidth"), False),
    (("links", "inter_node", "latency_seconds"), True),
    (("links", "inter_node", "burst_bytes"), True),
    (("links", "inter_node", "aggregate_bandwidth_bytes_per_second"), False),
    (("links", "inter_node", "aggregate_burst_bytes"), True),
    (("links", "inter_node", "overlap", "fraction"), True),
    (("links", "inter_node", "relay_seconds"), True),
    (("links", "inter_node", "relay_seconds_per_byte"), True),
    (("local", "nonzero_columns_per_second"), False),
    (("local", "copy_bytes_per_second"), False),
    (("local", "alone_nonzero_columns_per_second"), False),
    (("local", "alone_copy_bytes_per_second"), False),
    (("group_size",), False),
]


def test_hand_edited_network_records_from_hypothesis_are_refused_in_one_line_naming_the_field(tmp_path):
    """Hypothesis picks a field of a full record and a value of the wrong type or out of its range (negative, 0 where
    a rate must be positive, NaN, infinity, true, text, a list, null): the reader refuses it with one InputError
    naming the file, the field and the command that writes a good record, never another exception; the record as
    written loads."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    path = tmp_path / "net.json"
    path.write_text(json.dumps(_full_record()))
    assert parse_topology(str(path)).levels[1].link.aggregate == 2.4e8

    def bad_values(zero_allowed: bool):
        wrong = st.sampled_from([float("nan"), float("inf"), True, "fast", [1.0], None, {"value": 1}])
        negative = st.floats(max_value=-1e-12, allow_nan=False, allow_infinity=False)
        return st.one_of(wrong, negative) if zero_allowed else st.one_of(wrong, negative, st.just(0.0))

    @settings(max_examples=80, deadline=None)
    @given(st.data())
    def check(data):
        where, zero_allowed = data.draw(st.sampled_from(NUMBER_FIELDS))
        unknown_allowed = where[0] == "local" or where[-1] == "aggregate_bandwidth_bytes_per_second"
        bad = data.draw(bad_values(zero_allowed).filter(lambda value: value is not None or not unknown_allowed))
        if where == ("group_size",) and isinstance(bad, float) and bad.is_integer() and bad < 0:
            bad = int(bad)
        record = _full_record()
        entry = record
        for key in where[:-1]:
            entry = entry[key]
        entry[where[-1]] = bad
        path.write_text(json.dumps(record))
        with pytest.raises(InputError) as caught:
            parse_topology(str(path))
        message = str(caught.value)
        assert path.name in message and "calibrate --network" in message and "\n" not in message, message
        assert where[-1] in message or ".".join(where[-2:]) in message, (where, message)

    check()


#: The calibration's repetitions and streamed message size here: half its defaults' (10, 4 MiB), a quarter of the bytes
#: through the links (half a message is still more than the token bucket passes at once at 5 Gbit/s).
REPEAT = 5
SMALL_CALIBRATION = ["--repeat", str(REPEAT), "--message-bytes", str(2 << 20)]


@pytest.mark.mpi
@pytest.mark.skipif(unavailable_reason() is not None, reason=f"no emulated cluster: {unavailable_reason()}")
@pytest.mark.parametrize("rate, bits", [("1gbit", 1e9), ("5gbit", 5e9)])
def test_calibration_measures_the_configured_rate_on_the_emulated_cluster(rate, bits, tmp_path):
    path = tmp_path / "net.json"
    with EmulatedCluster(2, rate) as cluster:
        command = [sys.executable, "-m", "sparsewire", "calibrate", "--network", "--output", str(path), *SMALL_CALIBRATION]
        result = cluster.run(2, command, timeout=300, env=CHILD_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(path.read_text())
    assert record["rank_groups"] == [0, 0, 1, 1]
    inter, intra = record["links"]["inter_node"], record["links"]["intra_node"]
    payload_rate = bits / 8 * TCP_PAYLOAD
    assert inter["single_pair_bandwidth"] == pytest.approx(payload_rate, rel=0.10), inter
    # two ranks of a node share its link: each gets about half
    assert inter["bandwidth_bytes_per_second"] == pytest.approx(payload_rate / 2, rel=0.15), inter
    if bits == 1e9:
        assert intra["bandwidth_bytes_per_second"] >= 5 * inter["single_pair_bandwidth"], (intra, inter)
    topology = parse_topology(str(path))
    assert topology.groups(4).tolist() == [0, 0, 1, 1]
    assert topology.levels[1].link.bandwidth == inter["single_pair_bandwidth"] and topology.levels[1].link.shared
    # the local rates, measured on all ranks at once: what a core does (a product of 1 to 100 ns per
    # nonzero-column, a copy of 0.1 to 10 GB/s), read back into the topology
    # the burst the tbf bucket passes at once (256 KiB at 1 Gbit/s, 1 ms of the rate at 5), over the flows out of
    # rank 0's node, after idle against right after: measured 0.60-0.75 of the bucket at 1 Gbit/s (ranks that slept
    # through the idle instead of spinning: 0-0.6); without the idle 0.04-0.07. At 5 Gbit/s the bucket drains in 1 ms,
    # inside the jitter of two busy cores: measured 0-0.6, so only the upper bound holds there
    burst = inter["burst"]
    assert burst["flows"] == [[0, 2], [0, 3], [1, 2], [1, 3]] and burst["repeat"] == 4 * REPEAT, burst
    lowest = 0.1 if bits == 1e9 else 0.0
    assert lowest * bucket_bytes(rate) <= inter["burst_bytes"] <= 1.4 * bucket_bytes(rate), inter
    if bits == 1e9:
        assert burst["idle_seconds"] < burst["busy_seconds"], burst
    assert topology.levels[1].link.burst == inter["burst_bytes"]
    # every node at once after idle: at most both links' buckets (the links set the aggregate here); at 5 Gbit/s a
    # bucket is 1 ms of the rate, and the jitter of two busy cores adds about as much (2.47 MB measured once in the
    # full suite, against 1.75 MB of buckets): 2 ms of both links' rate more there
    jitter = 0.0 if bits == 1e9 else 2 * 0.002 * bits / 8
    assert 0 <= inter["aggregate_burst_bytes"] <= 1.4 * 2 * bucket_bytes(rate) + jitter, inter
    assert inter["aggregate_burst"]["repeat"] == 4 * REPEAT
    assert topology.levels[1].link.aggregate_burst == inter["aggregate_burst_bytes"]
    # every rank to every rank of the other node at once, both ways: at 1 Gbit/s the link's rate each way (the
    # cores keep up), at 5 Gbit/s no more than that (measured 0.87-0.99 GB/s of the 1.2 both ways on this 2-core VM)
    assert inter["aggregate_flows"] == [[0, 2], [0, 3], [1, 2], [1, 3], [2, 0], [2, 1], [3, 0], [3, 1]]
    together = inter["aggregate_bandwidth_bytes_per_second"]
    assert topology.levels[1].link.aggregate == together
    if bits == 1e9:
        assert together == pytest.approx(2 * payload_rate, rel=0.10), inter
    else:
        assert 0.5 * payload_rate <= together <= 1.1 * 2 * payload_rate, inter
    local = record["local"]
    assert local["windows"] == 6  # three before the links, three after
    # plausible rates of one core (the copy every rank at once has measured 6.3-11.8 GB/s here)
    assert 1e7 <= local["nonzero_columns_per_second"] <= 1e11 and 1e8 <= local["copy_bytes_per_second"] <= 1e11, local
    assert (topology.local_rate, topology.copy_rate) == (local["nonzero_columns_per_second"], local["copy_bytes_per_second"])
    # the kernel and the copy on rank 0 while the others wait, one window each after each half
    assert (
        1e7 <= local["alone_nonzero_columns_per_second"] <= 1e11
        and topology.local_rate_alone == local["alone_nonzero_columns_per_second"]
    ), local
    assert (
        1e8 <= local["alone_copy_bytes_per_second"] <= 1e11 and topology.copy_rate_alone == local["alone_copy_bytes_per_second"]
    )
    # how much of a stream every node sends at once hides behind the kernel: a fraction, from its three medians
    # and of a stream in pieces with the kernel run between them
    for field in ("overlap", "piece_overlap"):
        overlap = inter[field]
        assert 0 <= overlap["fraction"] <= 1 and getattr(topology, field) == overlap["fraction"], overlap
        assert overlap["repeat"] == 2 * REPEAT and overlap["message_bytes"] >= 1 << 16, overlap
        times = (overlap["stream_seconds"], overlap["work_seconds"], overlap["together_seconds"])
        assert overlap["fraction"] == hidden_fraction(*times) and min(times) > 0, overlap
    assert inter["piece_overlap"]["pieces"] >= 1
    # a relay from node 1 through rank 0 to rank 1, at a 64th and half the message: the hop inside the node alone takes
    # less than both hops; the price is the line through the extras. (Whether two hops take longer than one over the
    # link is the machine's to say, not a test's: it has measured at or below the one hop, docs/design-decisions.md.)
    relay = inter["relay"]
    assert relay["ranks"] == [2, 0, 1] and relay["sizes"] == [(2 << 20) // 64, 1 << 20] and relay["repeat"] == 4 * REPEAT
    for direct, relayed, inside in zip(relay["direct"], relay["relayed"], relay["inside"]):
        assert direct > 0 and 0 < inside < relayed, relay
    assert (inter["relay_seconds"], inter["relay_seconds_per_byte"]) == relay_price(relay["sizes"], relay["extra"])
    assert (link := topology.levels[1].link).relay_seconds == inter["relay_seconds"]
    assert link.relay_seconds_per_byte == inter["relay_seconds_per_byte"]
