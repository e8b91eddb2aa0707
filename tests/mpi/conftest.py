"""The collective cases run on every rank of one job per rank count: tests/test_collective.py starts
``mpiexec -n P python -m pytest tests/mpi`` for P = 1 to 4, and one case runs alone as
``mpiexec -n 3 python -m pytest tests/mpi/test_api.py::test_roundtrip`` (the harness:
:mod:`sparsewire.testing.collective`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparsewire.testing.collective import *  # noqa: F403 - the harness's hooks and fixtures (comm, shared_tmp)

# The executor's case list lives beside the driver that also runs it as a script (tests/exec/mpi_driver.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "exec"))


@pytest.fixture
def seed(rng) -> int:
    """One integer seed per case, equal on every rank (drawn from the session seed and the case's name)."""
    return int(rng.integers(2**31))
