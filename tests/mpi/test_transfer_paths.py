"""Transfer paths on every rank of one job: messages staged through host memory by a planted calibration give the
same C as messages sent from their buffers (tests/wire/transfer_driver.py's checks), nothing is staged on the CPU
without a calibration, ``calibrate --device`` measures both paths and writes a file the executor reads, and the
commands stage by the calibration they are given. Refusals run in jobs of their own
(tests/wire/test_transfer_paths.py)."""

from __future__ import annotations

import json

import pytest
from transfer_driver import check_transfer_paths, write_calibration

from conftest import SHARED_DATA, on_rank_zero
from sparsewire.calibration.transfer import crossover
from sparsewire.wire.transfer_records import load_transfer_rule


@pytest.mark.ranks(1, 3)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_staged_messages_follow_a_planted_threshold_and_give_the_same_c(comm, seed, shared_tmp, backend):
    if backend == "torch":
        pytest.importorskip("torch")
    # The checks plant the file: its threshold is the largest message's size, so every smaller one is staged.
    calibration = shared_tmp / "planted.json"
    totals = comm.bcast(check_transfer_paths(comm, f"split:{calibration}", backend, seed))
    ranks = comm.Get_size()
    assert load_transfer_rule(calibration, "cpu").staged_below_bytes > 0 or ranks == 1
    if ranks >= 2:
        assert totals["staged"] > 0, totals
    if ranks >= 3 and totals["distinct_sizes"] >= 2:
        assert totals["direct"] > 0, totals  # both paths ran (messages of one size are all staged)


@pytest.mark.ranks(3)
def test_without_a_calibration_nothing_is_staged_on_the_cpu(comm, seed, shared_tmp, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared_tmp / "cache"))  # no stored calibration either
    calibration = on_rank_zero(comm, write_calibration, shared_tmp / "zero.json", 0)
    totals = comm.bcast(check_transfer_paths(comm, str(calibration), "numpy", seed))
    assert totals["staged"] == 0 and totals["direct"] > 0


@pytest.mark.ranks(2)
def test_calibrate_device_measures_both_paths_and_writes_a_file_the_executor_reads(command, shared_tmp):
    output = shared_tmp / "transfer.json"
    args = ["calibrate", "--device", "cpu", "--sizes", "64,4096,262144", "--repeat", "3", "--output", str(output), "--json"]
    status, out, err = command(*args)
    assert status == 0, out + err
    record = json.loads(out)
    assert [r["bytes"] for r in record["sweep"]] == [64, 4096, 262144]
    assert all(r["direct_seconds"] > 0 and r["staged_seconds"] > 0 for r in record["sweep"])
    direct = [r["direct_seconds"] for r in record["sweep"]]
    staged = [r["staged_seconds"] for r in record["sweep"]]
    assert record["staged_below_bytes"] == crossover([64, 4096, 262144], direct, staged)
    assert load_transfer_rule(output, "cpu").staged_below_bytes == record["staged_below_bytes"]


@pytest.mark.ranks(3)
def test_spmm_command_stages_by_the_calibration_it_is_given(command, comm, shared_tmp):
    calibration = on_rank_zero(comm, write_calibration, shared_tmp / "t.json", 10**9)  # every message staged
    args = ["spmm", "rmat:9:8:1", "--k", "8", "--mode", "bulk,early", "--check", "--json"]
    status, out, err = command(*args, "--transfer-calibration", str(calibration))
    assert status == 0, out + err
    for run in json.loads(out)["runs"]:
        assert run["check_passed"] and run["staged_below_bytes"] == 10**9
        paths = run["transfer_paths"]["intra_group"]
        assert set(paths) == {"staged"} and paths["staged"][0] == run["messages"]


@pytest.mark.ranks(3)
@pytest.mark.skipif(not (SHARED_DATA / "gnn" / "cora.npz").exists(), reason="needs ../shared/data/gnn/cora.npz")
def test_gcn_with_every_message_staged_trains_to_the_same_losses(command, comm, shared_tmp):
    """Cora, 30 epochs, float64: every message staged (threshold 10^9) against none (0)."""
    pytest.importorskip("torch")
    histories = {}
    for threshold in (10**9, 0):
        calibration = on_rank_zero(comm, write_calibration, shared_tmp / f"t{threshold}.json", threshold)
        args = ["gcn", str(SHARED_DATA / "gnn" / "cora.npz"), "--epochs", "30", "--dtype", "float64"]
        status, out, err = command(*args, "--transfer-calibration", str(calibration), "--json")
        assert status == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        paths = report["transfer_paths"]
        assert paths["staged" if threshold else "direct"] > 0 and paths["direct" if threshold else "staged"] == 0, paths
        histories[threshold] = report["history"]
    staged, direct = histories[10**9], histories[0]
    assert [a["loss"] for a in staged] == [b["loss"] for b in direct]  # a staged copy moves the same bits
    assert [a["bytes"] for a in staged] == [b["bytes"] for b in direct]
