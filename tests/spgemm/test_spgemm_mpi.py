"""A SpGEMM refusal under ``mpiexec -n P`` ends a job of its own with status 2 and one error line, from rank 0. The
other refusals are collective cases (tests/mpi/test_refusals.py), the successful runs too
(tests/mpi/test_spgemm_command.py)."""

from __future__ import annotations

import pytest

from conftest import run_mpi

pytestmark = pytest.mark.mpi  # every test here starts mpiexec


def error_of(ranks, args, timeout=120):
    completed = run_mpi(ranks, ["-m", "sparsewire", *args], timeout=timeout)
    assert completed.returncode == 2, completed.stdout + completed.stderr
    lines = [line for line in completed.stderr.splitlines() if line.startswith("sparsewire: error:")]
    assert len(lines) == 1, completed.stderr  # one line, from rank 0 only
    return lines[0]


def test_cli_spgemm_bad_input():
    """A refused job of its own (the other refusals are collective cases: tests/mpi/test_refusals.py)."""
    assert "product is the number of ranks" in error_of(3, ["spgemm", "rmat:6:4", "--grid", "2x2"])
