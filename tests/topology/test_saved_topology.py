"""Topologies as JSON values and back (sparsewire.topology.saved), as plan files keep them: every preset, a measured
topology and random user-built ones read back equal; a record with any one field out of its range or of the wrong
type (Hypothesis draws which field and what value) is one InputError naming the field."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsewire.errors import InputError
from sparsewire.topology import PRESETS, Level, LinkClass, Topology
from sparsewire.topology.records import stamp
from sparsewire.topology.saved import topology_from_record, topology_record


def _measured() -> Topology:
    record = stamp("network")
    record.update(ranks=4, rank_groups=[0, 0, 1, 1], group_size=2)
    record["local"] = {"nonzero_columns_per_second": 1e7, "copy_bytes_per_second": 1e9}
    record["links"] = {
        "intra_node": {"bandwidth_bytes_per_second": 4e9, "latency_seconds": 3e-6},
        "inter_node": {
            "bandwidth_bytes_per_second": 6e7,
            "latency_seconds": 1e-5,
            "single_pair_bandwidth": 1.2e8,
            "relay_seconds": 7e-5,
            "relay_seconds_per_byte": 4e-10,
        },
    }
    return Topology.from_record(record, "measured:net.json")


def _user_built(rng) -> Topology:
    sizes = sorted(int(s) for s in rng.integers(1, 9, int(rng.integers(0, 3))))
    levels = []
    for i, size in enumerate([*sizes, None]):
        aggregate = None if rng.integers(2) else float(rng.uniform(1e8, 1e10))
        numbers = (float(rng.uniform(1e8, 1e11)), float(rng.uniform(0, 1e-5)), float(rng.uniform(0, 1e-5)))
        flags = (bool(rng.integers(2)), bool(rng.integers(2)))
        relay = {"relay_seconds": float(rng.uniform(0, 1e-4)), "relay_seconds_per_byte": float(rng.uniform(0, 1e-9))}
        link = LinkClass(f"link{i}", *numbers, *flags, float(rng.uniform(0, 1e6)), aggregate, **relay)
        levels.append(Level(f"level{i}", size, link))
    fractions = {"overlap": float(rng.uniform(0, 1)), "piece_overlap": float(rng.uniform(0, 1))}
    return Topology("mine", tuple(levels), **fractions, local_rate=float(rng.uniform(1e6, 1e9)))


def test_presets_measured_and_user_built_topologies_read_back_equal(rng):
    for topology in [*(machine.topology for machine in PRESETS.values()), Topology.nodes(3), _measured()]:
        record = json.loads(json.dumps(topology_record(topology)))  # through JSON, as in a plan file
        assert topology_from_record(record, "plan.npz") == topology, topology.name
    for _ in range(20):
        topology = _user_built(rng)
        assert topology_from_record(json.loads(json.dumps(topology_record(topology))), "plan.npz") == topology
    # a plan file written before the relay's price was measured loads with none (0: unknown)
    record = topology_record(_measured())
    assert record["levels"][1]["link"]["relay_seconds_per_byte"] == 4e-10
    for level in record["levels"]:
        del level["link"]["relay_seconds"], level["link"]["relay_seconds_per_byte"]
    older = topology_from_record(record, "plan.npz")
    assert [(lv.link.relay_seconds, lv.link.relay_seconds_per_byte) for lv in older.levels] == [(0.0, 0.0), (0.0, 0.0)]


BAD_VALUES = {
    "bandwidth": [0, -1.0, float("nan"), "fast", None, True],
    "latency": [-1e-6, float("inf"), "1us", None],
    "overhead": [-1.0, [1]],
    "burst": [-5.0, "big"],
    "aggregate": [0.0, -1.0, "x"],
    "aggregate_burst": [-1.0, None],
    "relay_seconds": [-1e-6, float("nan"), None],
    "relay_seconds_per_byte": [-1e-9, "slow", None],
    "group_size": [0, -2, 1.5, "2", True],
    "rank_groups": [[0, -1], [0, 2], "0,1", [0.5]],
    "overlap": [1.5, -0.1, "most"],
    "piece_overlap": [1.01, -0.5, "half"],
    "local_rate": [0.0, -3.0, "quick"],
}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(BAD_VALUES)), st.data())
def test_a_record_with_one_field_out_of_range_or_of_the_wrong_type_is_refused_naming_it(field, data):
    record = topology_record(_measured())
    bad = data.draw(st.sampled_from(BAD_VALUES[field]))
    damaged = copy.deepcopy(record)
    if field in ("group_size",):
        damaged["levels"][0][field] = bad
    elif field in ("rank_groups", "overlap", "piece_overlap", "local_rate"):
        damaged[field] = bad
    else:
        damaged["levels"][data.draw(st.integers(0, 1))]["link"][field] = bad
    with pytest.raises(InputError) as caught:
        topology_from_record(damaged, "plan.npz")
    message = str(caught.value)
    assert message.startswith("plan.npz: ") and field in message and "\n" not in message, message


def test_records_that_are_not_topologies_are_refused():
    for bad, expected in [
        (None, "not a record with a name"),
        ({"name": "x", "levels": []}, "has no levels"),
        ({"name": "x", "levels": [{"name": "l"}]}, "level 0 is not a record with a name and a link"),
        ({"name": "x", "levels": [{"name": "l", "group_size": 2, "link": topology_record(Topology.flat())["levels"][0]["link"]}]},
         "the last level must hold every rank"),
    ]:  # fmt: skip
        with pytest.raises(InputError, match=expected):
            topology_from_record(bad, "plan.npz")
