"""The network calibration (issue 40): a measured record reloads as a topology that drives the
planner (hand-made record, exact figures), a damaged one is refused, and on the emulated cluster
the inter-node bandwidth is the configured rate less TCP/IP headers (within 10%) at 1 and 5 Gbit/s,
with the intra-node bandwidth at least 5x it at 1 Gbit/s."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import CHILD_ENV
from sparsewire.calibration.store import stamp
from sparsewire.emulation.cluster import EmulatedCluster, unavailable_reason
from sparsewire.errors import InputError
from sparsewire.io import load_matrix
from sparsewire.partition import partition
from sparsewire.plan.stats import predicted_seconds, strategy_stats
from sparsewire.topology import parse_topology

TCP_PAYLOAD = 0.956  # the share of a link's bits that is TCP payload at MTU 1500 (shared/research/emulated-cluster)


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
    # groups that are not consecutive blocks are kept as they are (and fix the rank count)
    path.write_text(json.dumps(_record([0, 1, 0, 1])))
    assert parse_topology(str(path)).groups(4).tolist() == [0, 1, 0, 1]
    with pytest.raises(InputError, match="made for 4 ranks, not 8"):
        parse_topology(str(path)).groups(8)


def test_a_damaged_or_foreign_record_is_refused_with_the_command_that_writes_one(tmp_path):
    path = tmp_path / "net.json"
    broken = _record([0, 0, 1, 1])
    del broken["links"]["inter_node"]["latency_seconds"]
    path.write_text(json.dumps(broken))
    with pytest.raises(InputError, match="lacks 'latency_seconds'.*calibrate --network"):
        parse_topology(str(path))
    for field, bad in (("single_pair_bandwidth", float("nan")), ("single_pair_bandwidth", True), ("latency_seconds", -1e-6)):
        damaged = _record([0, 0, 1, 1])
        damaged["links"]["inter_node"][field] = bad
        path.write_text(json.dumps(damaged))  # NaN is written as the token NaN, as Python's json reads it
        with pytest.raises(InputError, match=f"has inter_node.{field} = {bad!r}, not a finite number"):
            parse_topology(str(path))
    path.write_text(json.dumps({**_record([0, 0]), "kind": "compute"}))
    with pytest.raises(InputError, match="not a network calibration.*calibrate --network"):
        parse_topology(str(path))
    with pytest.raises(InputError, match="does not exist"):
        parse_topology(str(tmp_path / "missing.json"))


@pytest.mark.mpi
@pytest.mark.skipif(unavailable_reason() is not None, reason=f"no emulated cluster: {unavailable_reason()}")
@pytest.mark.parametrize("rate, bits", [("1gbit", 1e9), ("5gbit", 5e9)])
def test_calibration_measures_the_configured_rate_on_the_emulated_cluster(rate, bits, tmp_path):
    path = tmp_path / "net.json"
    with EmulatedCluster(2, rate) as cluster:
        command = [sys.executable, "-m", "sparsewire", "calibrate", "--network", "--output", str(path), "--repeat", "10"]
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
