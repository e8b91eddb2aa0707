"""Transfer paths (wire/paths.py, calibration/transfer.py): the hybrid rule follows a calibrated threshold,
calibration files are checked, and the commands' refusals. Staged messages giving the same C, and
``calibrate --device`` measuring, are collective cases (tests/mpi/test_transfer_paths.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transfer_driver import write_calibration

from conftest import cuda_devices, run_cli, run_mpi
from sparsewire.calibration.transfer import crossover
from sparsewire.comm.mpi_library import cuda_aware_mpi
from sparsewire.errors import InputError
from sparsewire.wire import paths as wire
from sparsewire.wire.paths import DEFAULT_CUDA_STAGED_BELOW, EVERY_MESSAGE, TransferRule, default_rule
from sparsewire.wire.transfer_records import TRANSFER_KIND as CALIBRATION_KIND
from sparsewire.wire.transfer_records import load_transfer_rule, transfer_rule


def test_crossover_is_where_direct_wins_for_good():
    sizes = [64, 256, 1024, 4096]
    assert crossover(sizes, [1, 1, 1, 1], [2, 2, 2, 2]) == 0  # direct everywhere: nothing staged
    assert crossover(sizes, [3, 3, 1, 1], [2, 2, 2, 2]) == 1024
    assert crossover(sizes, [3, 1, 3, 1], [2, 2, 2, 2]) == 4096  # a direct win below a staged one does not count
    assert crossover(sizes, [3, 3, 3, 3], [2, 2, 2, 2]) == 4097  # staged everywhere measured
    assert crossover([4096, 64, 1024, 256], [1, 3, 1, 3], [2, 2, 2, 2]) == 1024  # any order


def test_crossover_on_random_sweeps(rng):
    for _ in range(200):
        sizes = sorted(set(rng.integers(8, 10**6, rng.integers(1, 8)).tolist()))
        direct, staged = rng.random(len(sizes)).tolist(), rng.random(len(sizes)).tolist()
        threshold = crossover(sizes, direct, staged)
        for size, d, s in zip(sizes, direct, staged):
            if size >= threshold:
                assert d <= s  # every size at or above the threshold goes direct and was measured faster so
        below = [size for size in sizes if size < threshold]
        if below:
            position = sizes.index(below[-1])
            assert direct[position] > staged[position]  # the largest staged size was measured faster staged


def test_the_rule_stages_messages_below_the_threshold(tmp_path, rng):
    rule = load_transfer_rule(write_calibration(tmp_path / "t.json", 4096), "cpu")
    sizes = rng.integers(0, 10000, 100)
    np.testing.assert_array_equal(rule.staged(sizes), sizes < 4096)
    assert list(rule.staged([4095, 4096, 4097])) == [True, False, False]
    assert "below 4096 bytes" in rule.describe() and str(tmp_path / "t.json") in rule.describe()
    assert not default_rule("cpu").staged([0, 1, 10**9]).any()
    assert "every message direct" in default_rule("cpu").describe()


def test_the_stored_calibration_is_used_when_none_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert transfer_rule("cpu") == default_rule("cpu")
    (tmp_path / "sparsewire").mkdir()
    write_calibration(tmp_path / "sparsewire" / "transfer-cpu.json", 123)
    assert transfer_rule("cpu").staged_below_bytes == 123
    assert transfer_rule("cpu", write_calibration(tmp_path / "given.json", 7)).staged_below_bytes == 7


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "does not exist"),
        ("{not json", "is not a calibration record"),
        (json.dumps({"compute_rate": 1e9}), "not a transfer calibration .its kind is None"),
        (json.dumps({"kind": CALIBRATION_KIND, "schema": 99, "device": "cpu", "staged_below_bytes": 1}), "schema 99"),
        (json.dumps({"kind": CALIBRATION_KIND, "schema": 2, "device": "cuda", "staged_below_bytes": 1}), "device type 'cuda'"),
        (json.dumps({"kind": CALIBRATION_KIND, "schema": 2, "device": "cpu", "staged_below_bytes": -1}), "whole number"),
        (json.dumps({"kind": CALIBRATION_KIND, "schema": 2, "device": "cpu", "staged_below_bytes": 2.5}), "whole number"),
        (json.dumps({"kind": CALIBRATION_KIND, "schema": 2, "device": "cpu", "staged_below_bytes": True}), "whole number"),
        (json.dumps([1, 2]), "is not a transfer calibration"),
    ],
)
def test_bad_calibration_files_are_named_with_the_fix(tmp_path, content, problem):
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=problem) as error:
        load_transfer_rule(path, "cpu")
    assert "sparsewire calibrate --device cpu" in str(error.value)


def test_devices_other_than_cpu_and_cuda_are_refused():
    with pytest.raises(InputError, match="not built"):
        transfer_rule("mps")
    assert isinstance(TransferRule(0, "x").staged([1])[0], np.bool_)


def test_cuda_stages_every_message_where_mpi_cannot_read_its_memory(tmp_path, monkeypatch):
    """Not CUDA-aware (the MPICH wheel): every message staged, a calibration file notwithstanding
    (a bad one still refused); CUDA-aware: the 1 MiB default, or the calibrated threshold."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calibration = tmp_path / "cuda.json"
    calibration.write_text(json.dumps({"kind": CALIBRATION_KIND, "schema": 2, "device": "cuda", "staged_below_bytes": 4096}))
    monkeypatch.setattr(wire, "cuda_aware_mpi", lambda: (False, "MPICH Version: 5.0.2: MPIX_Query_cuda_support() = 0"))
    for given in (None, calibration):
        rule = transfer_rule("cuda:0", given)
        assert rule.staged_below_bytes == EVERY_MESSAGE and rule.staged([1, 2**40]).all()
        assert rule.describe().startswith("every message staged through host memory: MPI cannot read CUDA memory")
    with pytest.raises(InputError, match="device type 'cpu'"):
        transfer_rule("cuda:0", write_calibration(tmp_path / "cpu.json", 10))
    monkeypatch.setattr(wire, "cuda_aware_mpi", lambda: (True, "Open MPI v5.0.5: MPIX_Query_cuda_support() = 1"))
    default = transfer_rule("cuda:1")
    assert default.staged_below_bytes == DEFAULT_CUDA_STAGED_BELOW == 2**20
    assert list(default.staged([2**20 - 1, 2**20])) == [True, False]
    assert "calibrate --device cuda" in default.describe()
    assert transfer_rule("cuda", calibration).staged_below_bytes == 4096


def test_cuda_awareness_is_asked_of_the_mpi_library():
    aware, how = cuda_aware_mpi()
    assert isinstance(aware, bool)
    assert "MPIX_Query_cuda_support" in how
    if "MPICH" in how and not aware:
        assert how.endswith("= 0")


def test_calibrate_device_needs_two_ranks_and_a_device_it_runs():
    one = run_cli(["calibrate", "--device", "cpu", "--output", "/dev/null"])
    assert one.returncode != 0 and "needs two ranks" in one.stderr
    cuda = run_cli(["calibrate", "--device", "cuda"])  # the torch backend implied
    assert cuda.returncode != 0
    assert ("sees no CUDA device" if not cuda_devices() else "needs two ranks") in cuda.stderr, cuda.stderr
    sizes = run_cli(["calibrate", "--device", "cpu", "--sizes", "4,x"])
    assert sizes.returncode != 0 and "--sizes" in sizes.stderr


@pytest.mark.mpi
def test_spmm_command_refuses_a_calibration_file_that_does_not_exist(tmp_path):
    """A refusal ends its job, so it runs in a job of its own; the commands' staged runs are collective cases
    (tests/mpi/test_transfer_paths.py)."""
    bad = run_mpi(2, ["-m", "sparsewire", "spmm", "rmat:8:8:1", "--transfer-calibration", str(tmp_path / "missing.json")])
    assert bad.returncode != 0 and "does not exist" in bad.stderr
