"""The calibration records: one cache directory, one versioned schema for every record, and the
compute and transfer records read back through it (no MPI)."""

from __future__ import annotations

import json

import pytest

from sparsewire.calibration.compute import COMPUTE_KIND, default_calibration_path, load_compute_rate
from sparsewire.errors import InputError
from sparsewire.topology import records as store
from sparsewire.wire.transfer_records import TRANSFER_KIND, default_transfer_record_path, load_transfer_rule


def test_every_record_lives_in_one_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert store.cache_directory() == tmp_path / "sparsewire"
    assert default_calibration_path() == tmp_path / "sparsewire" / "compute.json"
    assert default_transfer_record_path("cuda:1") == tmp_path / "sparsewire" / "transfer-cuda.json"


def test_a_record_round_trips_with_its_stamp(tmp_path, rng):
    rate = float(rng.integers(1, 10**9))
    path = store.write_record(tmp_path / "deep" / "compute.json", {**store.stamp(COMPUTE_KIND), "compute_rate": rate})
    record = store.read_record(path, COMPUTE_KIND, "rerun it")
    assert record["schema"] == store.SCHEMA and record["kind"] == COMPUTE_KIND and record["written"] and "host" in record
    assert load_compute_rate(path) == rate
    with pytest.raises(InputError, match="is not a transfer calibration"):
        load_transfer_rule(path, "cpu")  # another kind


@pytest.mark.parametrize(
    "record, problem",
    [
        ({"kind": COMPUTE_KIND, "schema": store.SCHEMA - 1, "compute_rate": 1.0}, "of schema 1"),
        ({"kind": TRANSFER_KIND, "schema": store.SCHEMA, "compute_rate": 1.0}, "its kind is 'transfer'"),
        ({"kind": COMPUTE_KIND, "schema": store.SCHEMA, "compute_rate": -3.0}, "positive number"),
        ({"kind": COMPUTE_KIND, "schema": store.SCHEMA, "compute_rate": True}, "positive number"),
        ({"kind": COMPUTE_KIND, "schema": store.SCHEMA}, "positive number"),
    ],
)
def test_a_wrong_record_names_the_file_and_the_command_that_writes_one(tmp_path, record, problem):
    path = tmp_path / "compute.json"
    path.write_text(json.dumps(record))
    with pytest.raises(InputError, match=problem) as caught:
        load_compute_rate(path)
    assert str(path) in str(caught.value) and "sparsewire calibrate --output" in str(caught.value)


def test_a_missing_record_says_how_to_make_it(tmp_path):
    with pytest.raises(InputError, match="does not exist.*sparsewire calibrate --output"):
        load_compute_rate(tmp_path / "none.json")


def test_a_prediction_says_which_links_it_prices():
    """The predicted-time column names what it prices: the assumed constants (nodes:G, flat), a
    named cluster, or measured links; a planted measured link on nodes:2 is no longer assumed."""
    import dataclasses

    from sparsewire.topology.model import Topology
    from sparsewire.topology.presets import PRESETS

    assert Topology.nodes(2).prices() == "assumed links" and Topology.flat().prices() == "assumed links"
    assert PRESETS["cola-a800"].topology.prices() == "cola-a800"
    nodes = Topology.nodes(2)
    measured_link = dataclasses.replace(nodes.levels[1].link, bandwidth=1.17e8, name="inter_node")
    levels = (nodes.levels[0], dataclasses.replace(nodes.levels[1], link=measured_link))
    measured_shared = dataclasses.replace(levels[0].link, bandwidth=9.1e9, name="intra_node")
    levels = (dataclasses.replace(levels[0], link=measured_shared), levels[1])
    measured = Topology("measured:links.json", levels)
    assert not measured.assumed_links and measured.prices() == "measured links"


@pytest.mark.parametrize("per_node", [1, 2])
def test_a_calibration_on_one_rank_per_node_prices_only_measured_links(per_node):
    """``calibrate --network`` on one rank per node measures no link inside a node: the topology's node level
    keeps the assumed shared-memory link, but its groups of one rank join no pair, so every message is priced by the
    measured link; on two ranks per node without an intra-node measurement the assumed link prices messages."""
    from sparsewire.topology.model import Topology
    from sparsewire.topology.records import stamp

    record = stamp("network")
    record.update(ranks=4, rank_groups=[r // per_node for r in range(4)], group_size=per_node)
    record["links"] = {"inter_node": {"bandwidth_bytes_per_second": 6e7, "latency_seconds": 1e-5, "single_pair_bandwidth": 1.2e8}}
    topology = Topology.from_record(record, "measured:net.json")
    assert topology.levels[0].link.name == "shared-memory"
    assert topology.assumed_links == (per_node > 1)
    assert topology.prices() == ("assumed links" if per_node > 1 else "measured links")


@pytest.mark.parametrize("content", ["", '{"kind": "transfer", "sche', "\x00\x00\x00"], ids=["empty", "cut", "zeros"])
def test_a_damaged_stored_transfer_calibration_is_ignored_with_a_warning_and_a_given_one_refused(tmp_path, monkeypatch, content):
    from sparsewire.errors import FallbackWarning
    from sparsewire.wire.paths import default_rule
    from sparsewire.wire.transfer_records import transfer_rule

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    stored = default_transfer_record_path("cpu")
    stored.parent.mkdir(parents=True)
    stored.write_text(content)
    with pytest.warns(FallbackWarning, match="ignoring the damaged stored calibration .* calibrate --device cpu"):
        assert transfer_rule("cpu") == default_rule("cpu")  # the cache is ours: as if there were none
    with pytest.raises(InputError, match="is not a calibration record"):
        transfer_rule("cpu", stored)  # a file the user names is theirs: refused, not ignored
    store.write_record(stored, {**store.stamp(TRANSFER_KIND), "device": "cpu", "staged_below_bytes": 4096})
    assert transfer_rule("cpu").staged_below_bytes == 4096  # a good record is read again
