"""ExecOptions: how a plan is made and run as one object, validated once with one line per
problem, normalised, replaced, reported and saved (no MPI)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sparsewire
from sparsewire.errors import InputError
from sparsewire.exec.options import UNSET, ExecOptions, Proxy, exec_options
from sparsewire.plan.modes import MODES, Mode
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy


def test_the_defaults_and_their_normal_forms():
    options = ExecOptions()
    assert (options.strategy, options.mode, options.proxy, options.transport, options.backend, options.device) == (
        "auto",
        None,
        Proxy.LOCAL,
        "mpi",
        "numpy",
        "cpu",
    )
    given = ExecOptions(strategy="joint", mode="early", threads=2, proxy="balanced", transfer_calibration="calibration.json")
    assert given.strategy is Strategy.JOINT and given.mode is Mode.EARLY and given.proxy is Proxy.BALANCED
    assert given.transfer_calibration == Path("calibration.json") and given.layout == "merged"
    assert ExecOptions(mode="pipelined").layout == "pipelined" and ExecOptions(mode="auto").mode is None
    assert sparsewire.ExecOptions is ExecOptions
    assert options.trial is True and ExecOptions(trial=False).as_dict()["trial"] is False
    assert ExecOptions(trial=np.False_).trial is False  # a NumPy bool becomes a plain one (the options go to JSON)


def test_every_problem_is_named_in_one_error():
    with pytest.raises(InputError) as caught:
        ExecOptions(strategy="teleport", mode="warp", threads=0, proxy="nearest", transport="pigeon", backend="abacus", trial="y")
    lines = str(caught.value).splitlines()
    assert lines[0] == "invalid options:" and len(lines) == 8, lines
    for expected in (
        "unknown strategy 'teleport'",
        "unknown mode 'warp'",
        "threads must be a positive integer",
        "unknown proxy 'nearest'",
        "unknown transport 'pigeon'",
        "unknown backend 'abacus'",
        "trial must be True or False (got 'y')",
    ):
        assert any(expected in line for line in lines), (expected, lines)
    with pytest.raises(InputError, match="^strategy 'joint-hier' routes through groups; pass a topology with groups"):
        ExecOptions(strategy="joint-hier")
    with pytest.raises(InputError, match="accounting only"):
        ExecOptions(strategy="rowwise")
    with pytest.raises(InputError, match="the torch transport cannot run the partitioned mode"):
        ExecOptions(transport="torch", mode="partitioned")
    with pytest.raises(InputError, match="numpy backend runs on the CPU"):
        ExecOptions(device="cuda:0")
    with pytest.raises(InputError, match="threads must be a positive integer"):
        ExecOptions(threads=True)


@pytest.mark.parametrize("mode", MODES)
def test_every_executable_strategy_and_mode_is_accepted_and_round_trips(mode):
    topology = sparsewire.Topology.nodes(2)
    for strategy in EXECUTABLE_STRATEGIES:
        options = ExecOptions(strategy=strategy.value, topology=topology, mode=mode, deterministic=True)
        reported = options.as_dict()
        assert reported["strategy"] == strategy.value and reported["mode"] == mode and reported["topology"] == topology.name
        saved = options.saved()
        assert set(saved) == {"strategy", "topology", "proxy", "mode", "deterministic", "transport"}
        again = ExecOptions(**{**saved, "topology": topology})
        assert again == options


def test_replace_validates_again_and_the_keywords_replace_fields(rng):
    base = ExecOptions(mode="bulk", threads=1)
    threads = int(rng.integers(2, 9))
    assert base.replace(threads=threads).threads == threads and base.threads == 1
    with pytest.raises(InputError, match="unknown mode"):
        base.replace(mode="sideways")
    assert exec_options(base, mode="early", threads=UNSET) == ExecOptions(mode="early", threads=1)
    assert exec_options(None) == ExecOptions()
    assert exec_options(base, mode="sideways").startswith("unknown mode 'sideways'")  # the text, for a collective error
    assert exec_options(base, colour="red").startswith("not an option of a plan")
    assert exec_options("bulk").startswith("options must be a sparsewire.ExecOptions")


def test_what_ranks_must_agree_on_leaves_out_their_own_choices():
    options = ExecOptions(mode="overlap", threads=3, transfer_calibration="mine.json")
    agreed = options.agreed()
    assert "threads" not in agreed and "transfer_calibration" not in agreed and agreed["device type"] == "cpu"
    assert agreed == ExecOptions(mode="overlap", threads=1).agreed()
