"""``sparsewire eigs``'s refusals under mpiexec: each ends its job with one error line, so each runs in a job of its
own. Its successful runs are collective cases in tests/mpi/test_eigs_command.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from conftest import run_mpi

pytestmark = pytest.mark.mpi  # every test here starts mpiexec


def test_eigs_bad_input_is_one_line(tmp_path):
    path = tmp_path / "directed.mtx"
    scipy.io.mmwrite(path, sp.coo_array(np.array([[0.0, 1.0], [0.0, 0.0]])))
    completed = run_mpi(2, ["-m", "sparsewire", "eigs", str(path)], timeout=60)
    assert completed.returncode == 2 and "not symmetric" in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1  # (--block below --nev: tests/mpi/test_refusals.py)


def test_eigs_on_an_empty_matrix_is_one_line(tmp_path):
    path = tmp_path / "empty.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n0 0 0\n")
    completed = run_mpi(2, ["-m", "sparsewire", "eigs", str(path)], timeout=60)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count("is 0 x 0; eigs needs a matrix of order at least 2") == 1, completed.stderr
