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
    """A refused job of its own ends with status 2 and one line (the other refusals: tests/mpi/test_refusals.py)."""
    missing = run_mpi(3, ["-m", "sparsewire", "spmm", str(tmp_path / "none.mtx")], timeout=60)
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparsewire: error:") and "no such file" in lines[0]
