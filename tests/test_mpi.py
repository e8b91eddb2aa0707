"""Multi-rank tests: every one runs ``mpiexec -n P`` as a subprocess with a timeout."""

from __future__ import annotations

import json

import pytest

from conftest import SHARED_MATRICES, _seed, run_mpi


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_executor_plans_results_and_bytes(ranks):
    completed = run_mpi(ranks, ["tests/mpi_driver.py", str(_seed())], timeout=240)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.strip() == f"OK {7 * 4 * 2 * ranks}"  # cases x strategies x modes, on every rank


def spmm_json(ranks, matrix, *extra, timeout=240):
    completed = run_mpi(ranks, ["-m", "sparsewire", "spmm", matrix, "--json", *extra], timeout=timeout)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, completed.stdout  # exactly one JSON object, from rank 0
    return json.loads(lines[0])


@pytest.mark.parametrize("ranks", [3, 4])
def test_cli_spmm_all_strategies_and_modes(ranks):
    report = spmm_json(ranks, "rmat:10:8:5", "--strategy", "all", "--mode", "all", "--check", "--repeat", "2", "--k", "8")
    assert report["ranks"] == ranks and len(report["runs"]) == 8
    checksums = {round(run["checksum_sum"], 9) for run in report["runs"]}
    assert len(checksums) == 1  # every strategy and mode computes the same C
    for run in report["runs"]:
        assert run["max_abs_error"] <= 1e-9
        assert run["measured_bytes"] == run["planned_bytes"]


def test_cli_spmm_single_run_fields():
    report = spmm_json(2, "stencil2d:40", "--strategy", "column", "--mode", "bulk", "--k", "1", "--check", "--repeat", "3")
    for key in (
        "ranks", "strategy", "mode", "k", "dtype", "median_seconds", "min_seconds", "planned_bytes",
        "measured_bytes", "checksum_sum", "checksum_fro", "max_abs_error",
    ):
        assert key in report
    assert report["strategy"] == "column" and report["mode"] == "bulk" and report["k"] == 1
    # The stencil's column partition boundary: 40 B rows cross each way, 8 bytes each, k = 1.
    assert report["planned_bytes"] == report["measured_bytes"] == 2 * 40 * 8
    assert report["max_abs_error"] <= 1e-9


@pytest.mark.skipif(not SHARED_MATRICES, reason="../shared/data is not present")
@pytest.mark.parametrize("path", SHARED_MATRICES, ids=lambda p: p.name)
def test_cli_spmm_on_shared_matrices(path):
    report = spmm_json(4, str(path), "--strategy", "all", "--mode", "all", "--check", "--repeat", "1")
    for run in report["runs"]:
        assert run["max_abs_error"] <= 1e-9 and run["measured_bytes"] == run["planned_bytes"]


def test_cli_spmm_errors_are_one_line_without_hang(tmp_path):
    missing = run_mpi(3, ["-m", "sparsewire", "spmm", str(tmp_path / "none.mtx")], timeout=60)
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparsewire: error:") and "no such file" in lines[0]
    nan_file = tmp_path / "nan.mtx"
    nan_file.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 nan\n2 2 1\n")
    nan = run_mpi(2, ["-m", "sparsewire", "spmm", str(nan_file), "--check"], timeout=60)
    assert nan.returncode == 2 and "NaN" in nan.stderr and "Traceback" not in nan.stderr
    bad_k = run_mpi(3, ["-m", "sparsewire", "spmm", "stencil2d:8", "--k", "0"], timeout=60)
    assert bad_k.returncode == 2 and bad_k.stderr.strip().splitlines() == [
        "sparsewire: error: argument --k: must be at least 1 (got 0); see 'sparsewire spmm --help'"
    ]
    rowwise = run_mpi(2, ["-m", "sparsewire", "spmm", "stencil2d:8", "--strategy", "rowwise"], timeout=60)
    assert rowwise.returncode == 2 and "accounting only" in rowwise.stderr
