"""The collective cases run on every rank of one job per rank count: tests/test_collective.py starts
``mpiexec -n P python -m pytest tests/mpi`` for P = 1 to 4 (at P = 3 as two jobs, each with some of the files), and
one case runs alone as
``mpiexec -n 3 python -m pytest tests/mpi/test_api.py::test_roundtrip`` (the harness:
:mod:`sparsewire.testing.collective`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from sparsewire._lib import jit  # noqa: F401 - Numba's pool sized before a case module imports python-graphblas
from sparsewire.testing import collective as harness
from sparsewire.testing.collective import *  # noqa: F403 - the harness's hooks and fixtures (comm, shared_tmp)

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"  # optional: cases on it are skipped without it
SHARED_MATRICES = sorted(SHARED_DATA.glob("*.mtx.gz")) if SHARED_DATA.is_dir() else []

# The executor's case list and the transfer paths' checks live beside the drivers that also run them as scripts
# (tests/exec/mpi_driver.py, tests/wire/transfer_driver.py); the trace format's rules beside the tracing tests.
# The OGB fixtures are written by tests/io/ogb_files.py.
sys.path[:0] = [str(Path(__file__).resolve().parents[1] / folder) for folder in ("exec", "profile", "wire", "io")]


#: Run first in every job: tests/test_torchrun.py reads the losses it leaves while the rest of this job may still run.
FIRST = "test_gcn_on_cora_leaves_its_losses_for_the_torchrun_jobs"


def pytest_collection_modifyitems(config, items):
    """:data:`FIRST` first, then the harness's own hook (the cases of this P, the same on every rank)."""
    items.sort(key=lambda item: getattr(item, "originalname", "") != FIRST)
    harness.pytest_collection_modifyitems(config, items)


def on_rank_zero(comm, write, *args):
    """``write(*args)`` on rank 0 (a file the other ranks then read), its result on every rank once it is done."""
    result = write(*args) if comm.Get_rank() == 0 else None
    comm.Barrier()
    return comm.bcast(result)


def matrix_file(comm, path: Path, matrix) -> str:
    """``path`` once rank 0 wrote ``matrix`` (sparse or dense) to it in Matrix Market format, on every rank."""
    on_rank_zero(comm, scipy.io.mmwrite, path, sp.coo_array(matrix))
    return str(path)


@pytest.fixture
def seed(rng) -> int:
    """One integer seed per case, equal on every rank (drawn from the session seed and the case's name)."""
    return int(rng.integers(2**31))


@pytest.fixture
def command(comm, capsys):
    """``sparsewire ARGS`` as ``mpiexec -n P sparsewire ARGS`` runs it, on every rank of this job, in this process:
    returns the exit status and rank 0's standard output and error (the same on every rank, so every rank can
    assert on them). A command that ends the job (an unexpected exception at P > 1) ends this job too."""
    from sparsewire.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = main(list(args))
        out, err = capsys.readouterr()
        statuses = comm.allgather(status)
        assert len(set(statuses)) == 1, f"the ranks ended with different statuses {statuses}"
        out, err = comm.bcast((out, err) if comm.Get_rank() == 0 else None)
        return status, out, err

    return run


@pytest.fixture
def refusal(comm, capsys):
    """The error line of ``sparsewire ARGS`` refused as ``mpiexec -n P sparsewire ARGS`` refuses it, run in this
    process on every rank of this job: asserts the exit status 2 on every rank and one ``sparsewire: error:`` line in
    all, printed by rank 0 alone (a job of its own: tests/exec/test_executor_mpi.py, tests/spgemm/test_spgemm_mpi.py)."""
    from sparsewire.cli import main

    def run(*args: str) -> str:
        capsys.readouterr()
        status = main(list(args))
        _, err = capsys.readouterr()
        statuses = comm.allgather(status)
        errors = comm.allgather([line for line in err.splitlines() if line.startswith("sparsewire: error:")])
        assert statuses == [2] * comm.Get_size(), f"{args}: statuses {statuses}, {err[-2000:]}"
        assert len(errors[0]) == 1 and not any(errors[1:]), f"{args}: error lines by rank {errors}"
        return errors[0][0]

    return run


def slow_link_topology(path: Path, rank_groups: list[int]) -> Path:
    """A measured-network record (``sparsewire calibrate --network``'s format) at ``path``: the ranks in the groups
    ``rank_groups``, 50 GB/s inside a group and 100 Mbit/s (12.5 MB/s) between groups (slow enough that coding pays there
    by a wide margin even on an oversubscribed machine, whose codec timings run high). Returns ``path``."""
    import json

    link = {"latency_seconds": 2e-5}
    record = {
        "kind": "network",
        "schema": 2,
        "written": "2026-11-26T00:00:00+00:00",
        "host": "test",
        "group_size": int(np.bincount(rank_groups).max()),
        "rank_groups": list(rank_groups),
        "links": {
            "intra_node": {**link, "bandwidth_bytes_per_second": 50e9, "single_pair_bandwidth": 50e9},
            "inter_node": {**link, "bandwidth_bytes_per_second": 12.5e6, "single_pair_bandwidth": 12.5e6},
        },
    }
    path.write_text(json.dumps(record))
    return path
