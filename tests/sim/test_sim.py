"""Simulation: networks, the max-min flow solver (exact contention cases, SimGrid golden files),
plan simulation, and the NetSparse characterization and mechanisms."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import run_cli
from sparsewire.errors import InputError
from sparsewire.partition import even_rows
from sparsewire.plan.stats import PlanStats
from sparsewire.plan.strategies import Strategy
from sparsewire.sim.flows import solve_max_min
from sparsewire.sim.netsparse import request_streams
from sparsewire.sim.netsparse import simulator as ns
from sparsewire.sim.network import GIGABIT
from sparsewire.sim.network_builders import build_network, dragonfly, hyperx, leaf_spine, network_presets
from sparsewire.sim.plan_timing import simulate_plan, wire_bytes
from sparsewire.topology.presets import PRESETS, parse_topology

GOLDEN = Path(__file__).resolve().parent / "golden"
MB50 = 50e6


@pytest.fixture(scope="module")
def cluster():
    return build_network("netsparse-leafspine")


def solve_pairs(network, pairs, sizes):
    sources = np.array([p[0] for p in pairs])
    destinations = np.array([p[1] for p in pairs])
    offsets, links = network.route_lists(sources, destinations)
    return solve_max_min(offsets, links, np.asarray(sizes, float), network.capacities)


# --- networks ---------------------------------------------------------------------------------


def test_netsparse_cluster_matches_table5(cluster):
    assert cluster.n_hosts == 128 and int(cluster.host_groups.max()) + 1 == 8
    assert np.all(cluster.capacities == 400 * GIGABIT) and cluster.mtu == 1500
    latency = cluster.path_latency(np.array([0, 0]), np.array([15, 16]))
    assert latency == pytest.approx([1.2e-6, 2.7e-6], rel=1e-12)  # RTT 2.4 / 5.4 us


@pytest.mark.parametrize("preset", [p for p in network_presets() if p.startswith("netsparse")])
def test_every_route_leaves_by_the_source_nic_and_enters_by_the_destination_nic(preset):
    network = build_network(preset)
    up, down = network.host_uplinks(), network.host_downlinks()
    n = network.n_hosts
    for source in range(n):
        for destination in range(n):
            route = network.route(source, destination)
            if source == destination:
                assert route.size == 0
                continue
            assert route[0] == up[source] and route[-1] == down[destination]
            assert len(set(route.tolist())) == route.size


@pytest.mark.parametrize("preset", network_presets())
def test_one_preset_table_the_planner_and_the_simulator_agree(preset):
    """The planner's topology of a named machine (``analyze --topology``) is the one the
    simulator reads off the modelled network (``simulate --topology``): group sizes, bandwidths
    and latencies of both levels, and the per-message overhead between groups (a modelled network
    has one overhead for every message: the GPU clusters take InfiniBand's)."""
    machine = PRESETS[preset]
    hosts = machine.hosts or 4 * machine.topology.levels[0].group_size
    derived = build_network(preset, hosts).planner_topology()
    assert parse_topology(preset) is machine.topology and len(derived.levels) == len(machine.topology.levels) == 2
    for level, (ours, theirs) in enumerate(zip(machine.topology.levels, derived.levels)):
        assert ours.group_size == theirs.group_size, preset
        for field in ("bandwidth", "latency") + (("overhead",) if level == 1 else ()):
            assert getattr(ours.link, field) == pytest.approx(getattr(theirs.link, field), rel=1e-12), (preset, field)


def test_planner_only_presets_are_refused_by_the_simulator_with_the_choices():
    planner_only = [name for name, machine in PRESETS.items() if machine.network is None]
    assert planner_only and set(planner_only).isdisjoint(network_presets())
    for name in planner_only:
        with pytest.raises(InputError, match="planner topology the simulator does not model.*netsparse-leafspine"):
            build_network(name, 16)
    with pytest.raises(InputError, match="unknown network preset"):
        build_network("nowhere", 16)


@pytest.mark.parametrize("preset, gpus", [("cola-a800", 8), ("shiro-h100", 4)])
def test_gpu_nodes_use_nvlink_inside_and_infiniband_between(preset, gpus):
    network = build_network(preset, 2 * gpus)
    inside = [network.kind_of(link) for link in network.route(0, gpus - 1)]
    between = [network.kind_of(link) for link in network.route(0, gpus)]
    assert inside == ["nvlink-up", "nvlink-down"] and between == ["nic-up", "core", "nic-down"]
    topology = network.planner_topology()
    assert topology.levels[0].group_size == gpus and topology.levels[1].link.bandwidth < topology.levels[0].link.bandwidth


def test_d_mod_k_routing_shares_a_leaf_uplink():
    network = leaf_spine(64, rack_size=16, spines=16)
    # destinations 16 and 32 are equal mod 16: both flows from rack 0 use leaf 0 -> spine 0
    assert network.route(0, 16)[1] == network.route(1, 32)[1]
    assert network.route(0, 16)[1] != network.route(1, 33)[1]


def test_dragonfly_and_hyperx_shapes():
    fly = dragonfly(128)
    assert int(fly.host_groups.max()) + 1 == 4 and int(fly.first_switches().max()) + 1 == 32
    grid = hyperx(128)
    assert int(grid.first_switches().max()) + 1 == 32
    assert max(grid.route(s, d).size for s in range(0, 128, 7) for d in range(128)) <= 5  # 3 dimension hops


def test_unknown_preset_and_too_many_hosts():
    with pytest.raises(InputError, match="unknown network preset"):
        build_network("torus")
    with pytest.raises(InputError, match="has 128 hosts"):
        build_network("netsparse-leafspine", 200)
    with pytest.raises(InputError, match="needs a host"):
        build_network("cola-a800")


# --- max-min solver ---------------------------------------------------------------------------


def test_contention_cases_are_exact(cluster):
    """The cases of ../shared/research/simulation.md (50 MB at 50 GB/s = 1000 us alone)."""
    assert solve_pairs(cluster, [(0, 16)], [MB50]).finish * 1e6 == pytest.approx([1000.0], rel=1e-12)
    shared_uplink = solve_pairs(cluster, [(0, 16), (1, 32)], [MB50, MB50])
    assert shared_uplink.finish * 1e6 == pytest.approx([2000.0, 2000.0], rel=1e-12)
    incast = solve_pairs(cluster, [(0, 5), (1, 5), (2, 5)], [MB50] * 3)
    assert incast.finish * 1e6 == pytest.approx([3000.0] * 3, rel=1e-12)
    duplex = solve_pairs(cluster, [(0, 1), (1, 0)], [MB50, MB50])
    assert duplex.finish * 1e6 == pytest.approx([1000.0, 1000.0], rel=1e-12)
    two_sizes = solve_pairs(cluster, [(0, 1), (0, 1)], [5e6, MB50])
    assert two_sizes.finish * 1e6 == pytest.approx([200.0, 1100.0], rel=1e-12)
    assert two_sizes.lower_bound * 1e6 == pytest.approx(1100.0)


def test_one_byte_messages_cost_the_path_latency(cluster):
    stats = PlanStats(
        Strategy.COLUMN,
        128,
        1,
        1,
        np.array([0, 0]),
        np.array([15, 16]),
        np.zeros(2, np.int64),
        np.array([1, 1]),
        np.ones(2, np.int64),
        0,
    )
    timing = simulate_plan(stats, cluster)
    wire = float(wire_bytes(np.array([1]), cluster)[0])
    assert wire == 51.0  # one packet header
    # both leave host 0 (two messages of overhead) and share its NIC: each at half the line rate
    assert timing.communication_seconds == pytest.approx(
        cluster.message_overhead * 2 + 2 * wire / (400 * GIGABIT) + 2.7e-6, rel=1e-12
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_link_is_processor_sharing(seed):
    """n flows on one link of capacity C: flow i (sizes ascending) ends at
    t_i = t_(i-1) + (s_i - s_(i-1)) * (n - i) / C."""
    rng = np.random.default_rng(seed)
    sizes = np.sort(rng.integers(1, 10**6, 12).astype(float))
    result = solve_max_min(np.arange(13), np.zeros(12, np.int64), sizes, np.array([1e9]))
    expected = np.cumsum(np.diff(np.concatenate([[0.0], sizes])) * (12 - np.arange(12)) / 1e9)
    assert result.finish == pytest.approx(expected, rel=1e-9)
    assert result.makespan == pytest.approx(sizes.sum() / 1e9, rel=1e-12) == pytest.approx(result.lower_bound, rel=1e-12)


def test_makespan_never_beats_the_lower_bound(cluster):
    rng = np.random.default_rng(7)
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, 128, (300, 2)) if a != b]
    result = solve_pairs(cluster, pairs, rng.integers(1, 10**7, len(pairs)))
    assert result.makespan >= result.lower_bound * (1 - 1e-12)


def test_bad_flows_are_rejected():
    with pytest.raises(InputError, match="finite"):
        solve_max_min(np.array([0, 1]), np.array([0]), np.array([np.nan]), np.array([1.0]))
    with pytest.raises(InputError, match="no links"):
        solve_max_min(np.array([0, 0]), np.zeros(0, np.int64), np.array([5.0]), np.array([1.0]))


@pytest.mark.parametrize("name", ["leafspine16_alltoall", "dragonfly32_random", "leafspine128_column_plan"])
def test_agrees_with_simgrid_golden_files(name):
    """Within 1% of SimGrid (zero-latency CM02) per flow; the files come from
    tests/golden/make_instances.py + simgrid_run.py."""
    instance = json.loads((GOLDEN / f"{name}.json").read_text())
    flows = instance["flows"]
    offsets = np.cumsum([0] + [len(f["route"]) for f in flows])
    links = np.concatenate([f["route"] for f in flows]).astype(np.int64)
    result = solve_max_min(offsets, links, np.array([f["bytes"] for f in flows], float), np.array(instance["capacities"]))
    golden = np.array(instance["simgrid"]["finish_seconds"])
    assert np.max(np.abs(result.finish - golden) / golden) < 0.01


# --- NetSparse characterization ---------------------------------------------------------------


def test_table3_header_share_exact():
    shares = [round(ns.header_share_percent(k), 1) for k in ns.TABLE3_K]
    assert shares == [97.6, 95.2, 90.9, 83.3, 71.4, 55.6, 38.5, 23.8, 13.5]


def hand_matrix():
    """8 x 8 over 4 nodes (2 rows each). Node 0 (rows 0, 1) reads columns 2, 2, 4, 6, 0;
    node 1 (rows 2, 3) reads 0, 1; node 2 (rows 4, 5) reads 4 only; node 3 (rows 6, 7) reads 2, 6."""
    entries = [(0, 2), (0, 4), (1, 2), (1, 6), (1, 0), (2, 0), (3, 1), (4, 4), (6, 2), (7, 6)]
    rows, cols = zip(*entries)
    return sp.csr_array((np.ones(len(entries)), (rows, cols)), shape=(8, 8))


def test_characterization_of_a_hand_made_matrix():
    workload = ns.Workload.from_matrix(hand_matrix(), 4)
    c = ns.characterize(workload, group_size=2, window=2)
    # useful: node 0 {2, 4, 6}, node 1 {0, 1}, node 2 {}, node 3 {2} -> 6; SU: 4 * (8 - 2) = 24; SA: 4 + 2 + 0 + 1 = 7
    assert (c["useful_transfers"], c["su_transfers"], c["sa_transfers"]) == (6, 24, 7)
    assert c["su_redundant_per_useful"] == pytest.approx(18 / 6)
    assert c["sa_redundant_per_useful"] == pytest.approx(1 / 6)
    # windows of 2 remote PRs: node 0 owners [1, 2, 1, 3] -> 2 + 2; node 1 [0, 0] -> 1; node 3 [1] -> 1
    assert c["unique_destinations_per_64"] == pytest.approx(6 / 4)
    # groups {0, 1}, {2, 3}: no property is needed twice in a group
    assert c["group_shared_percent"] == 0.0
    c4 = ns.characterize(workload, group_size=4)
    assert c4["group_shared_percent"] == pytest.approx(100 * 2 / 6)  # column 2 by nodes 0 and 3


def test_su_opt_is_the_busiest_receiver_at_line_rate(cluster):
    workload = ns.Workload.from_matrix(hand_matrix(), 4)
    su = ns.su_opt(workload, cluster, 16)
    assert su.tail_traffic_bytes == 6 * 64
    assert su.seconds == pytest.approx(6 * 64 / (400 * GIGABIT))


def sa_reference(matrix, nodes, cores, read_cap, response_cap, payload):
    """SAOpt's reads counted with Python sets: per node, per core (a contiguous share of the node's nonzeros),
    the distinct remote columns; returns (requests, packets, largest reads of a core, bytes each node receives)."""
    n = matrix.shape[0]
    owner = np.asarray(even_rows(n, nodes).owner(np.arange(n)))  # of rows and of columns (square)
    requests = packets = most = 0
    received = np.zeros(nodes, np.int64)
    for node in range(nodes):
        rows = np.flatnonzero(owner == node)
        cols = np.concatenate([matrix.indices[matrix.indptr[r] : matrix.indptr[r + 1]] for r in rows]) if rows.size else []
        per_core = [set() for _ in range(cores)]
        for e, col in enumerate(cols):
            if owner[col] != node:
                per_core[e * cores // len(cols)].add(int(col))
        for columns in per_core:
            most = max(most, len(columns))
            for destination in range(nodes):
                count = sum(1 for col in columns if owner[col] == destination)
                if count:
                    requests += 2 * count
                    packets += -(-count // read_cap) + -(-count // response_cap)
                    received[destination] += -(-count // read_cap) * ns.PACKET_HEADER_BYTES + count * ns.REQUEST_HEADER_BYTES
                    received[node] += -(-count // response_cap) * ns.PACKET_HEADER_BYTES + count * (
                        ns.REQUEST_HEADER_BYTES + payload
                    )
    return requests, packets, most, received


def test_sa_opt_by_hand(cluster):
    """hand_matrix: node 0's nonzeros are columns 2, 4, 0, 2, 6 in CSR order; with 2 cores the first three go to
    core 0 (reads 2, 4) and the last two to core 1 (reads 2 and 6: a core dedups only its own); node 1 reads 0
    and 1 on one core each, node 3 reads 2: 7 reads, each its own (core, owner) packet both ways."""
    workload = ns.Workload.from_matrix(hand_matrix(), 4)
    two = ns.sa_opt(workload, cluster, 16, cores=2, overhead_seconds=1e-6)
    assert (two.requests, two.packets, two.extra["software_seconds"]) == (14, 14, pytest.approx(2e-6))
    one = ns.sa_opt(workload, cluster, 16, cores=1, overhead_seconds=1e-6)
    # one core per node: node 0 reads {2, 4, 6}; node 1 reads 0 and 1 from node 0 in one packet each way
    assert (one.requests, one.packets, one.extra["software_seconds"]) == (12, 10, pytest.approx(3e-6))


@pytest.mark.parametrize("seed", range(4))
def test_sa_opt_counts_every_cores_reads(cluster, seed):
    rng = np.random.default_rng(seed)
    n, nodes, cores, k = 96, int(rng.integers(2, 9)), int(rng.integers(1, 6)), int(rng.choice([1, 16, 64]))
    dense = rng.random((n, n)) < rng.uniform(0.02, 0.3)
    dense[rng.integers(0, n, 10)] = False  # some empty rows
    matrix = sp.csr_array(dense.astype(float))
    workload = ns.Workload.from_matrix(matrix, nodes)
    result = ns.sa_opt(workload, cluster, k, cores=cores, overhead_seconds=1e-6)
    payload = ns.ELEMENT_BYTES * k
    caps = ns.requests_per_packet(0, cluster.mtu), ns.requests_per_packet(payload, cluster.mtu)
    requests, packets, most, received = sa_reference(matrix, nodes, cores, *caps, payload)
    assert (result.requests, result.packets) == (requests, packets)
    assert result.extra["software_seconds"] == pytest.approx(most * 1e-6)
    assert result.tail_traffic_bytes == received[result.tail_node]


# --- per-request pipeline ---------------------------------------------------------------------


def issue(cols, owner, node=0, rtt=10, batch=100, units=1, pending=256, use_filter=True, use_coalesce=True, command=0):
    cols = np.asarray(cols, np.int32)
    n_cols = len(owner)
    scratch = (request_streams.new_column_state(n_cols),)
    out = (np.zeros(cols.size, np.int32), np.zeros(cols.size, np.int32), np.zeros(cols.size, np.int64))
    rtts = np.full(8, rtt, np.int64)
    counts = request_streams.issue_requests(
        cols, np.asarray(owner, np.int32), node, rtts, batch, units, pending, use_filter, use_coalesce, command, *scratch, *out
    )
    issued = counts[0]
    return counts, out[0][:issued].tolist(), out[2][:issued].tolist()


def test_filter_and_coalesce_by_hand():
    owner = [1, 1, 1, 0]
    stream = [0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # column 3 is local
    # One PR per cycle; the response of the PR at cycle 0 is back at cycle 10: duplicates at cycles
    # 1..9 are pending (coalesced), those from cycle 10 on are filtered.
    counts, cols, times = issue(stream, owner)
    assert counts[:3] == (1, 5, 8) and cols == [0] and times == [0]
    counts, cols, times = issue(stream, owner, use_coalesce=False)
    assert counts[:3] == (9, 5, 0) and times == [0, 1, 3, 4, 5, 6, 7, 8, 9]
    counts, cols, times = issue(stream, owner, use_filter=False, use_coalesce=False)
    assert counts[:3] == (14, 0, 0)


def test_pending_table_limits_outstanding_requests():
    owner = [1] * 6
    counts, cols, times = issue(list(range(6)), owner, rtt=100, pending=2)
    assert times == [0, 1, 100, 101, 200, 201] and counts[3] == 301


def test_coalescing_needs_the_same_unit():
    owner = [1, 1]
    # two batches of one nonzero on two units, both at cycle 0: neither can coalesce the other
    counts, cols, times = issue([0, 0], owner, batch=1, units=2)
    assert counts[:3] == (2, 0, 0)
    counts, cols, times = issue([0, 0], owner, batch=2, units=2)
    assert counts[:3] == (1, 0, 1)


def test_concatenation_by_hand(rng):
    points = np.array([0, 0, 0, 0, 0, 1, 1])
    destinations = np.array([1, 1, 2, 1, 1, 0, 0])
    times = np.array([0, 3, 4, 9, 10, 0, 1])
    in_order = np.arange(points.size)
    packets = request_streams.concatenate(in_order, points, destinations, times, 2, 3, 5, 10)
    # node 0 -> 1: [0, 3] then 9 (opened 0, 9 - 0 > 5) with 10 -> 2 packets; 0 -> 2: 1; 1 -> 0: 1
    assert packets.tolist() == [[0, 2, 1], [1, 0, 0]]
    assert request_streams.concatenate(in_order, points, destinations, times, 2, 3, 100, 2).tolist() == [[0, 2, 1], [1, 0, 0]]
    assert request_streams.concatenate(in_order, points, destinations, times, 2, 3, 100, 1).tolist() == [[0, 4, 1], [2, 0, 0]]
    # stored shuffled and taken in order_by's order: the same packets
    shuffle = rng.permutation(points.size)
    order = request_streams.order_by(points[shuffle], times[shuffle])
    shuffled = request_streams.concatenate(order, points[shuffle], destinations[shuffle], times[shuffle], 2, 3, 5, 10)
    assert shuffled.tolist() == packets.tolist()


def test_property_cache_lru_by_hand(rng):
    # one set of two ways; fills arrive 1 cycle after each miss
    cols = np.array([5, 5, 7, 5, 9, 7, 5])
    times = np.array([0, 2, 3, 6, 8, 10, 12])
    switches, fills, in_order = np.zeros(7, np.int64), np.ones(7, np.int64), np.arange(7)
    hits = request_streams.property_cache(in_order, switches, cols, times, fills, 1, 2, False, 10)
    # 5 miss, 5 hit, 7 miss, 5 hit (5 most recent), 9 miss evicts 7 (LRU), 7 miss, 5 miss (evicted by 7)
    assert hits.tolist() == [False, True, False, True, False, False, False]
    unbounded = request_streams.property_cache(in_order, switches, cols, times, fills, 1, 2, True, 10)
    assert unbounded.tolist() == [False, True, False, True, False, True, True]
    # the same reads stored shuffled: taken in `order`, each answer lands at its read's own place
    shuffle = rng.permutation(7)
    order = np.argsort(shuffle)
    shuffled = request_streams.property_cache(order, switches, cols[shuffle], times[shuffle], fills, 1, 2, False, 10)
    assert shuffled.tolist() == hits[shuffle].tolist()


def test_a_cache_of_a_set_per_column_holds_every_column(rng):
    # set = column mod sets: with as many sets as columns nothing is ever evicted, as with an unbounded cache
    n_cols, reads = 50, 400
    cols = rng.integers(0, n_cols, reads)
    times = np.sort(rng.integers(0, 1000, reads))
    switches = rng.integers(0, 3, reads)
    fills = rng.integers(0, 5, reads)
    order = request_streams.order_by(switches, times)
    unbounded = request_streams.property_cache(order, switches, cols, times, fills, 1, 2, True, n_cols)
    for ways in (1, 4):
        per_column = request_streams.property_cache(order, switches, cols, times, fills, n_cols, ways, False, n_cols)
        assert per_column.tolist() == unbounded.tolist()
    # so a switch cache of more bytes than its sets can use runs as the unbounded one (8e12 MB had tried to
    # allocate 3.6 EiB of sets)
    matrix = sp.random_array((512, 512), density=0.02, format="csr", rng=np.random.default_rng(int(rng.integers(1 << 30))))
    workload = ns.Workload.from_matrix(matrix, 8)
    simulator = ns.NetSparseSimulator(workload, leaf_spine(8, rack_size=4, spines=2), 8)
    huge = simulator.run(ns.Mechanisms(), ns.Hardware(batch=256, cache_bytes=1 << 62))
    unbounded = simulator.run(ns.Mechanisms(), ns.Hardware(batch=256, cache_bytes=None))
    assert huge.seconds == unbounded.seconds and huge.tail_traffic_bytes == unbounded.tail_traffic_bytes


def test_mechanisms_cut_requests_and_bytes_on_a_random_matrix():
    matrix = sp.random_array((2048, 2048), density=0.01, format="csr", rng=np.random.default_rng(5))
    workload = ns.Workload.from_matrix(matrix, 16)
    network = leaf_spine(16, rack_size=4, spines=4)
    su = ns.su_opt(workload, network, 16)
    simulator = ns.NetSparseSimulator(workload, network, 16)
    rows = ns.ablation(simulator, su, ns.Hardware(batch=1024))
    issued = [r["issued_requests"] for r in rows]
    assert issued[0] == int(workload.remote.sum())
    assert issued == sorted(issued, reverse=True)
    assert issued[2] >= int(workload.useful().sum())  # every node still fetches each property it needs
    assert rows[0]["requests_per_packet"] == 1.0 and rows[3]["requests_per_packet"] > 1.0
    assert rows[3]["tail_traffic_bytes"] < rows[2]["tail_traffic_bytes"]
    assert all(r["seconds"] >= r["lower_bound_seconds"] * (1 - 1e-9) for r in rows)


@pytest.mark.parametrize("capacity", [0.0, -1.0, np.nan, np.inf])
def test_a_link_without_a_finite_positive_capacity_is_refused(capacity):
    """A flow over such a link was reported as finished at t = 0."""
    with pytest.raises(InputError, match="link 1 has capacity"):
        solve_max_min(np.array([0, 2]), np.array([0, 1]), np.array([100.0]), np.array([10.0, capacity]))
    assert solve_max_min(np.array([0, 2]), np.array([0, 1]), np.array([100.0]), np.array([10.0, 5.0])).makespan == pytest.approx(
        20.0
    )


def test_nodes_that_own_only_empty_rows_are_simulated(rng):
    """np.add.reduceat at the array's length raised IndexError when the last nodes' rows were empty."""
    dense = (rng.random((64, 64)) < 0.1).astype(float)
    dense[40:] = 0.0  # nodes 5..7 of 8 own only empty rows
    dense[8:16] = 0.0  # and node 1 too
    matrix = sp.csr_array(dense)
    workload = ns.Workload.from_matrix(matrix, 8)
    simulator = ns.NetSparseSimulator(workload, leaf_spine(8, rack_size=4, spines=2), 4)
    rows = ns.ablation(simulator, ns.su_opt(workload, leaf_spine(8, rack_size=4, spines=2), 4), ns.Hardware(batch=64))
    assert rows[0]["issued_requests"] == int(workload.remote.sum()) > 0
    owner = np.arange(64) // 8
    rows_of, cols_of = matrix.nonzero()
    assert rows[0]["issued_requests"] == int(np.sum(owner[rows_of] != owner[cols_of]))  # counted independently


def test_nodes_issued_in_threads_give_the_serial_reads(monkeypatch):
    """The RIG stage runs nodes in threads, each with its own scratch; one thread and three give the same reads,
    counts and last cycles, node by node."""
    from sparsewire.sim.netsparse import rig as netsparse_issue

    matrix = sp.random_array((3000, 3000), density=0.004, format="csr", rng=np.random.default_rng(11))
    workload = ns.Workload.from_matrix(matrix, 12)
    network = leaf_spine(12, rack_size=4, spines=2)
    found = []
    for cores in (1, 3):
        monkeypatch.setattr(netsparse_issue, "node_cores", lambda cores=cores: cores)
        found.append(ns.NetSparseSimulator(workload, network, 8).issue(ns.Hardware(batch=64), ns.Mechanisms()))
    serial, threaded = found
    assert serial.nodes.size > 1000 and (serial.filtered, serial.coalesced) == (threaded.filtered, threaded.coalesced)
    for field in ("nodes", "cols", "destinations", "times", "last_cycle"):
        assert np.array_equal(getattr(serial, field), getattr(threaded, field)), field


def test_netsparse_refuses_ids_beyond_32_bits():
    huge = sp.csr_array((np.ones(1), (np.array([0]), np.array([2**31]))), shape=(4, 2**31 + 1))
    with pytest.raises(InputError, match="32 bits"):
        ns.Workload.from_matrix(huge, 2)


# --- CLI --------------------------------------------------------------------------------------


def test_cli_netsparse_json_fields(tmp_path):
    plot = tmp_path / "compare.png"
    result = run_cli(
        [
            "netsparse",
            "rmat:10:8:1",
            "--nodes",
            "16",
            "--rack",
            "4",
            "--k",
            "16",
            "--ablation",
            "--compare-plans",
            "--plot",
            str(plot),
            "--sweep",
            "cache",
            "--json",
        ]
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    c = report["characterization"]
    assert c["header_share_percent"] == {
        "1": 97.6,
        "2": 95.2,
        "4": 90.9,
        "8": 83.3,
        "16": 71.4,
        "32": 55.6,
        "64": 38.5,
        "128": 23.8,
        "256": 13.5,
    }
    for key in ("su_redundant_per_useful", "sa_redundant_per_useful", "unique_destinations_per_64", "group_shared_percent"):
        assert isinstance(c[key], float)
    assert [r["mechanisms"] for r in report["ablation"]] == ["RIG", "+filter", "+coalesce", "+NIC concatenation", "+switch"]
    for row in report["ablation"]:
        assert {"speedup_vs_su", "traffic_reduction_vs_su", "goodput_percent", "line_utilization_percent"} <= row.keys()
    names = [r["mechanisms"] for r in report["comparison"]]
    assert names[:3] == ["SUOpt", "SAOpt", "NetSparse"] and "software column" in names and "software joint-group" in names
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(report["sweeps"][0]["points"]) == len(ns.SWEEPS["cache"][1])


def test_cli_simulate_and_calibrate(tmp_path):
    calibration = tmp_path / "calibration.json"
    result = run_cli(["calibrate", "--output", str(calibration), "--repeat", "1"])
    assert result.returncode == 0, result.stderr
    rate = json.loads(calibration.read_text())["compute_rate"]
    assert rate > 0
    result = run_cli(
        [
            "simulate",
            "rmat:10:8:1",
            "--ranks",
            "16",
            "--topology",
            "shiro-h100",
            "--k",
            "8",
            "--calibration",
            str(calibration),
            "--json",
        ]
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    names = [s["name"] for s in report["strategies"]]
    assert names == ["column", "joint", "column-hier", "joint-hier", "joint-group"]
    for entry in report["strategies"]:
        assert entry["total_seconds"] >= entry["communication_seconds"] >= entry["lower_bound_seconds"] > 0
        assert entry["compute_seconds"] > 0 and sum(s["seconds"] for s in entry["steps"]) == pytest.approx(
            entry["communication_seconds"]
        )


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["simulate", "rmat:8:4", "--ranks", "200", "--topology", "netsparse-leafspine"], "has 128 hosts"),
        (["simulate", "rmat:8:4", "--ranks", "4", "--topology", "mesh"], "unknown network preset"),
        (["simulate", "rmat:8:4", "--ranks", "4", "--topology", "flat-x", "--compute-rate", "1e9"], "unknown network preset"),
        (["simulate", "rmat:8:4", "--ranks", "4", "--topology", "cola-a800", "--compute-rate=-1"], "must be greater than 0"),
        (["simulate", "rmat:8:4", "--ranks", "4", "--topology", "cola-a800", "--compute-rate", "nan"], "must be a finite number"),
        (["netsparse", "rmat:8:4", "--nodes", "8", "--sweep", "speed"], "unknown sweep"),
        (["netsparse", "uniform:50x60:3", "--nodes", "4"], "square"),
        (["netsparse", "rmat:4:2", "--nodes", "64"], "use at most 16 nodes"),
    ],
)
def test_cli_bad_input(arguments, message):
    result = run_cli(arguments)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_order_by_group_then_time_is_lexsorts_order(rng):
    """The simulator's combined-key sort against np.lexsort: ties kept in order, negative times, spans whose
    key leaves no room for the positions (stable argsort taken) and spans too wide for one 63-bit key (lexsort)."""
    from sparsewire.sim.netsparse.request_streams import order_by as _order_by

    for high in (1, 5, 10**6, 2**50, 2**61):  # 2**50: the position bits do not fit, a stable argsort is taken
        groups = rng.integers(0, 9, 3000)
        times = rng.integers(-(high // 2), high, 3000)  # few distinct values at high = 5: many ties
        assert np.array_equal(_order_by(groups, times), np.lexsort((times, groups))), high
    assert _order_by(np.zeros(0, np.int64), np.zeros(0, np.int64)).size == 0
    # keys mostly in order already (grouped, times rising with a few late ones and ties): the run-adaptive sort
    for late in (0.0, 0.05, 0.3, 0.6):
        groups = np.repeat(np.arange(6), rng.integers(0, 800, 6))
        times = np.arange(groups.size) // 3 + rng.integers(0, 50, groups.size) * (rng.random(groups.size) < late)
        assert np.array_equal(_order_by(groups, times), np.lexsort((times, groups))), late
