"""The NetSparse simulator's stages that run in threads give what one thread gives, and the in-place counts
that replaced gathered copies give what the copies gave."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.sim.netsparse import baselines as netsparse_baselines
from sparsewire.sim.netsparse import request_streams
from sparsewire.sim.netsparse import simulator as ns
from sparsewire.sim.network_builders import leaf_spine


def _random_workload(rng, n: int = 600, nodes: int = 12) -> ns.Workload:
    matrix = sp.random_array((n, n), density=float(rng.uniform(0.005, 0.03)), format="csr", rng=rng)
    return ns.Workload.from_matrix(matrix, nodes)


def test_property_caches_of_several_switches_in_threads_equal_one_thread(monkeypatch, rng):
    """Reads of five switches interleaved in storage: each switch's cache is its own, whether the switches go to
    one thread or three, bounded (two sets, two ways) and unbounded."""
    n = 4000
    switches = rng.integers(0, 5, n)
    cols = rng.integers(0, 40, n)
    times = rng.integers(0, 3000, n)
    fills = rng.integers(1, 50, n)
    order = request_streams.order_by(switches, times)
    for unbounded in (False, True):
        found = []
        for cores in (1, 3):
            monkeypatch.setattr(request_streams, "node_cores", lambda cores=cores: cores)
            found.append(request_streams.property_cache(order, switches, cols, times, fills, 2, 2, unbounded, 40))
        assert np.array_equal(found[0], found[1]) and 0 < found[0].sum() < n, unbounded
        # one switch at a time, alone: the same hits (no state crosses from one switch to the next)
        for switch in range(5):
            mine = np.flatnonzero(switches == switch)
            alone = request_streams.property_cache(
                np.arange(mine.size)[np.argsort(order_positions(order, mine), kind="stable")],
                switches[mine],
                cols[mine],
                times[mine],
                fills[mine],
                2,
                2,
                unbounded,
                40,
            )
            assert np.array_equal(alone, found[0][mine]), (unbounded, switch)


def order_positions(order: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Where each of ``members`` stands in ``order``."""
    position = np.empty(order.size, np.int64)
    position[order] = np.arange(order.size)
    return position[members]


def test_sa_opt_with_three_threads_equals_one(monkeypatch, rng, cluster_of_twelve):
    workload = _random_workload(rng)
    results = []
    for cores in (1, 3):
        monkeypatch.setattr(netsparse_baselines, "node_cores", lambda cores=cores: cores)
        result = ns.sa_opt(workload, cluster_of_twelve, 16, cores=5, overhead_seconds=1e-6)
        results.append((result.seconds, result.requests, result.packets, result.tail_traffic_bytes))
    assert results[0] == results[1] and results[0][1] > 0


@pytest.fixture
def cluster_of_twelve():
    return leaf_spine(12, rack_size=4, spines=2)


def test_windows_of_destinations_counted_in_place_equal_the_gathered_stream(rng):
    """unique_destinations_per_window reads owners in place; against the definition on the gathered stream of
    each node's remote owners (full windows only, or the one short window of a node with fewer PRs)."""
    for trial in range(8):
        workload = _random_workload(rng, n=int(rng.integers(50, 400)), nodes=int(rng.integers(1, 9)))
        window = int(rng.integers(1, 20))
        total = windows = 0
        for node in range(workload.nodes):
            begin, end = workload.node_starts[node], workload.node_starts[node + 1]
            stream = workload.col_owner[workload.indices[begin:end][workload.remote[begin:end]]]
            full = stream.size // window
            for w in range(full if full else (1 if stream.size else 0)):
                total += len(set(stream[w * window : (w + 1) * window].tolist()))
                windows += 1
        found = request_streams.unique_destinations_per_window(
            workload.node_starts, workload.indices, workload.remote, workload.col_owner, window
        )
        assert found == (total, windows), trial


def test_headline_equals_its_parts_one_after_the_other(rng):
    """The characterization and SAOpt, run in a thread beside NetSparse, give what they give alone (on a second
    workload of the same matrix, so that no lazily made columns are shared)."""
    matrix = sp.random_array((800, 800), density=0.02, format="csr", rng=rng)
    network = leaf_spine(8, rack_size=4, spines=2)
    hardware = ns.Hardware(batch=256)
    workload = ns.Workload.from_matrix(matrix, 8)
    characterization, su, sa, full = ns.headline(ns.NetSparseSimulator(workload, network, 8), hardware, 4, 6, 1e-6)
    fresh = ns.Workload.from_matrix(matrix, 8)
    assert characterization == ns.characterize(fresh, group_size=4)
    assert su.row(su) == ns.su_opt(fresh, network, 8).row(su)
    assert sa.row(su) == ns.sa_opt(fresh, network, 8, 6, 1e-6).row(su)
    assert full.row(su) == ns.NetSparseSimulator(fresh, network, 8).run(ns.Mechanisms(), hardware, "NetSparse").row(su)
    assert full.requests > 0 and sa.requests > 0
