"""The executor through the command line under ``mpiexec -n P`` (a job each, as users run it), and the
partitioned fallback's one warning per job; the executor's collective cases are in tests/mpi/test_executor.py."""

from __future__ import annotations

import pytest

from conftest import _seed, run_mpi

pytestmark = pytest.mark.mpi  # every test here starts mpiexec


def test_partitioned_fallback_to_point_to_point():
    completed = run_mpi(3, ["tests/exec/mpi_driver.py", str(_seed()), "2", "mpi-p2p-partitions"], timeout=400)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    from mpi_driver import planned_runs

    # every case of the driver in the partitioned mode (the one mode this transport changes), exact, on each rank
    runs = planned_runs([2], "mpi-p2p-partitions") * 3
    assert runs > 0 and completed.stdout.split()[:2] == ["OK", str(runs)], completed.stdout
    # A library user (the driver) sees Python's own warning, once for the job.
    notices = [line.split(": ", 1)[1] for line in completed.stderr.splitlines() if "FallbackWarning" in line]
    assert notices == [
        "FallbackWarning: MPI partitioned communication is not available; the partitioned mode runs on "
        "persistent point-to-point requests, one per partition"
    ]


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
        "sparsewire: error: argument --k: must be from 1 to 2147483647 (got 0); see 'sparsewire spmm --help'"
    ]
    rowwise = run_mpi(2, ["-m", "sparsewire", "spmm", "stencil2d:8", "--strategy", "rowwise"], timeout=60)
    assert rowwise.returncode == 2 and "accounting only" in rowwise.stderr
    no_topology = run_mpi(2, ["-m", "sparsewire", "spmm", "stencil2d:8", "--strategy", "joint-group"], timeout=60)
    assert no_topology.returncode == 2 and "--group-size" in no_topology.stderr
    assert len(no_topology.stderr.strip().splitlines()) == 1
    bad_topology = run_mpi(3, ["-m", "sparsewire", "spmm", "stencil2d:8", "--topology", "torus"], timeout=60)
    assert bad_topology.returncode == 2 and "unknown topology" in bad_topology.stderr
    assert len(bad_topology.stderr.strip().splitlines()) == 1
