"""``sparsewire eigs`` under mpiexec: known spectra, SciPy's eigsh, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from conftest import SHARED_DATA, run_mpi

pytestmark = pytest.mark.mpi  # every test here starts mpiexec


def eigs_json(ranks, matrix, *extra, timeout=300):
    completed = run_mpi(ranks, ["-m", "sparsewire", "eigs", matrix, "--json", *extra], timeout=timeout)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_grid_laplacian_eigenvalues_are_the_analytic_ones(ranks):
    # 5-point Laplacian on a 30 x 17 grid: 4 - 2 cos(pi i / 31) - 2 cos(pi j / 18).
    i, j = np.meshgrid(np.arange(1, 31), np.arange(1, 18))
    exact = np.sort((4 - 2 * np.cos(np.pi * i / 31) - 2 * np.cos(np.pi * j / 18)).ravel())[::-1][:3]
    report = eigs_json(ranks, "stencil2d:30:17", "--nev", "3", "--threads", "1")
    assert report["converged"] and report["iterations"] >= 1 and report["multiplies"] >= report["iterations"]
    np.testing.assert_allclose(report["eigenvalues"], exact, rtol=1e-9)
    assert report["ranks"] == ranks and report["seconds"] > 0
    assert (report["bytes_per_multiply"] > 0) == (ranks > 1)


@pytest.mark.parametrize("ranks, mode", [(2, "early"), (3, "partitioned"), (4, "bulk")])
def test_random_symmetric_matrix_against_eigsh(tmp_path, rng, ranks, mode):
    upper = sp.random_array((300, 300), density=0.03, rng=rng, format="coo")
    upper.data = rng.integers(-5, 6, upper.nnz).astype(float)
    symmetric = sp.triu(upper, 1) + sp.triu(upper, 1).T + sp.diags_array(rng.integers(-3, 4, 300).astype(float))
    path = tmp_path / "symmetric.mtx"
    scipy.io.mmwrite(path, sp.coo_array(symmetric))
    report = eigs_json(ranks, str(path), "--nev", "5", "--mode", mode, "--check")
    assert report["converged"] and report["check_passed"]
    assert np.max(np.abs(np.array(report["eigenvalues"]) - report["reference_eigenvalues"])) <= 1e-6 * np.abs(
        report["eigenvalues"][0]
    )
    magnitudes = np.abs(report["eigenvalues"])
    assert np.all(magnitudes[:-1] >= magnitudes[1:] - 1e-12)


SYMMETRIC = ["bcsstk25", "delaunay_n16", "luxembourg_osm"]


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is not present")
@pytest.mark.parametrize("name", SYMMETRIC)
def test_shared_symmetric_matrices_against_eigsh(name):
    report = eigs_json(2, str(SHARED_DATA / f"{name}.mtx.gz"), "--nev", "4", "--check", timeout=600)
    assert report["converged"] and report["check_passed"], report


def test_eigs_bad_input_is_one_line(tmp_path):
    path = tmp_path / "directed.mtx"
    scipy.io.mmwrite(path, sp.coo_array(np.array([[0.0, 1.0], [0.0, 0.0]])))
    completed = run_mpi(2, ["-m", "sparsewire", "eigs", str(path)], timeout=60)
    assert completed.returncode == 2 and "not symmetric" in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1
    too_many = run_mpi(2, ["-m", "sparsewire", "eigs", "stencil2d:4", "--nev", "3", "--block", "2"], timeout=60)
    assert too_many.returncode == 2 and "--block 2 must be at least --nev 3" in too_many.stderr


def _low_rank(rng, n, rank):
    """A random symmetric integer matrix of the given rank (u diag(d) u^T, u and d integers)."""
    u = rng.integers(-3, 4, (n, rank)).astype(float)
    d = rng.choice([-2.0, -1.0, 1.0, 2.0, 3.0], rank)
    return u @ np.diag(d) @ u.T


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("case", ["identity50", "identity200", "rank2_n50", "rank2_n200", "diag123"])
def test_rank_deficient_and_tiny_matrices_have_the_right_eigenvalues(tmp_path, rng, ranks, case):
    """Blocks that lie in the basis (identity), a spectrum of zeros (rank 2) and an order below
    the Krylov basis (3 x 3, 50 x 50) once gave nonsense: fresh directions were never orthogonalised."""
    dense = {
        "identity50": lambda: np.eye(50),
        "identity200": lambda: np.eye(200),
        "diag123": lambda: np.diag([1.0, 2.0, 3.0]),
        "rank2_n50": lambda: _low_rank(rng, 50, 2),
        "rank2_n200": lambda: _low_rank(rng, 200, 2),
    }[case]()
    path = tmp_path / f"{case}.mtx"
    scipy.io.mmwrite(path, sp.coo_array(dense))
    nev = 2 if case == "diag123" else 3
    report = eigs_json(ranks, str(path), "--nev", str(nev), "--check")
    exact = np.linalg.eigvalsh(dense)
    exact = exact[np.argsort(-np.abs(exact), kind="stable")][:nev]
    assert report["converged"] and report["check_passed"], report
    scale = np.abs(exact).max()
    assert np.max(np.abs(np.array(report["eigenvalues"]) - exact)) <= 1e-9 * scale, (report["eigenvalues"], exact)


def test_eigs_on_an_empty_matrix_is_one_line(tmp_path):
    path = tmp_path / "empty.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n0 0 0\n")
    completed = run_mpi(2, ["-m", "sparsewire", "eigs", str(path)], timeout=60)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count("is 0 x 0; eigs needs a matrix of order at least 2") == 1, completed.stderr
