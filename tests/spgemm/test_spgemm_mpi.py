"""The SpGEMM and graph commands' refusals under ``mpiexec -n P``: each ends its job with one error line, so each
runs in a job of its own. Their successful runs are collective cases in tests/mpi/test_spgemm_command.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from conftest import run_mpi

pytestmark = pytest.mark.mpi  # every test here starts mpiexec


def error_of(ranks, args, timeout=120):
    completed = run_mpi(ranks, ["-m", "sparsewire", *args], timeout=timeout)
    assert completed.returncode == 2, completed.stdout + completed.stderr
    lines = [line for line in completed.stderr.splitlines() if line.startswith("sparsewire: error:")]
    assert len(lines) == 1, completed.stderr  # one line, from rank 0 only
    return lines[0]


def test_cli_spgemm_bad_input(tmp_path):
    assert "unknown semiring" in error_of(2, ["spgemm", "rmat:6:4", "--semiring", "avg_times"])
    assert "product is the number of ranks" in error_of(3, ["spgemm", "rmat:6:4", "--grid", "2x2"])
    assert "random:SEED" in error_of(2, ["spgemm", "rmat:6:4", "--values", "gauss"])
    assert "give a topology" in error_of(2, ["bfs", "rmat:6:4", "--partition", "metis-hier"])
    scipy.io.mmwrite(tmp_path / "a.mtx", sp.random_array((6, 5), density=0.5, format="coo", rng=1))
    assert "A's columns must equal B's rows" in error_of(2, ["spgemm", str(tmp_path / "a.mtx"), str(tmp_path / "a.mtx")])
    nan = sp.coo_array((np.array([1.0, np.nan]), ([0, 1], [1, 0])), shape=(2, 2))
    scipy.io.mmwrite(tmp_path / "nan.mtx", nan)
    assert "NaN" in error_of(2, ["spgemm", str(tmp_path / "nan.mtx")])
    negative = sp.coo_array((np.array([1.0, -2.0]), ([0, 1], [1, 0])), shape=(2, 2))
    scipy.io.mmwrite(tmp_path / "negative.mtx", negative)
    assert "negative weights" in error_of(2, ["sssp", str(tmp_path / "negative.mtx")])
    assert "is not a vertex" in error_of(2, ["bfs", "rmat:6:4", "--source", "64"])
    assert "square" in error_of(2, ["triangles", str(tmp_path / "a.mtx")])
