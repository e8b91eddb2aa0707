"""``sparsewire eigs`` on every rank of one job, as ``mpiexec -n P sparsewire eigs`` runs it: known spectra, SciPy's
eigsh on random and shared matrices, and matrices of low rank or tiny order. Its refusals end their jobs and run in
jobs of their own (tests/apps/test_eigs.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import SHARED_DATA, matrix_file


def eigs_json(command, matrix, *extra):
    status, out, err = command("eigs", matrix, "--json", *extra)
    assert status == 0, out + err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.ranks(1, 3)
def test_grid_laplacian_eigenvalues_are_the_analytic_ones(command, comm):
    # 5-point Laplacian on a 30 x 17 grid: 4 - 2 cos(pi i / 31) - 2 cos(pi j / 18).
    i, j = np.meshgrid(np.arange(1, 31), np.arange(1, 18))
    exact = np.sort((4 - 2 * np.cos(np.pi * i / 31) - 2 * np.cos(np.pi * j / 18)).ravel())[::-1][:3]
    report = eigs_json(command, "stencil2d:30:17", "--nev", "3", "--threads", "1")
    assert report["converged"] and report["iterations"] >= 1 and report["multiplies"] >= report["iterations"]
    np.testing.assert_allclose(report["eigenvalues"], exact, rtol=1e-9)
    assert report["ranks"] == comm.Get_size() and report["seconds"] > 0
    assert (report["bytes_per_multiply"] > 0) == (comm.Get_size() > 1)


@pytest.mark.ranks(2, 3, 4)
def test_random_symmetric_matrix_against_eigsh(command, comm, rng, shared_tmp):
    mode = {2: "early", 3: "partitioned", 4: "bulk"}[comm.Get_size()]
    upper = sp.random_array((300, 300), density=0.03, rng=rng, format="coo")
    upper.data = rng.integers(-5, 6, upper.nnz).astype(float)
    symmetric = sp.triu(upper, 1) + sp.triu(upper, 1).T + sp.diags_array(rng.integers(-3, 4, 300).astype(float))
    path = matrix_file(comm, shared_tmp / "symmetric.mtx", symmetric)
    report = eigs_json(command, path, "--nev", "5", "--mode", mode, "--check")
    assert report["converged"] and report["check_passed"]
    error = np.max(np.abs(np.array(report["eigenvalues"]) - report["reference_eigenvalues"]))
    assert error <= 1e-6 * np.abs(report["eigenvalues"][0])
    magnitudes = np.abs(report["eigenvalues"])
    assert np.all(magnitudes[:-1] >= magnitudes[1:] - 1e-12)


SYMMETRIC = ["bcsstk25", "delaunay_n16", "luxembourg_osm"]


@pytest.mark.ranks(2)
@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data is not present")
@pytest.mark.parametrize("name", SYMMETRIC)
def test_shared_symmetric_matrices_against_eigsh(command, name):
    report = eigs_json(command, str(SHARED_DATA / f"{name}.mtx.gz"), "--nev", "4", "--check")
    assert report["converged"] and report["check_passed"], report


def _low_rank(rng, n, rank):
    """A random symmetric integer matrix of the given rank (u diag(d) u^T, u and d integers)."""
    u = rng.integers(-3, 4, (n, rank)).astype(float)
    d = rng.choice([-2.0, -1.0, 1.0, 2.0, 3.0], rank)
    return u @ np.diag(d) @ u.T


@pytest.mark.ranks(1, 3)
@pytest.mark.parametrize("case", ["identity50", "identity200", "rank2_n50", "rank2_n200", "diag123"])
def test_rank_deficient_and_tiny_matrices_have_the_right_eigenvalues(command, comm, rng, shared_tmp, case):
    """Blocks that lie in the basis (identity), a spectrum of zeros (rank 2) and an order below
    the Krylov basis (3 x 3, 50 x 50): fresh directions must be orthogonalised."""
    dense = {
        "identity50": lambda: np.eye(50),
        "identity200": lambda: np.eye(200),
        "diag123": lambda: np.diag([1.0, 2.0, 3.0]),
        "rank2_n50": lambda: _low_rank(rng, 50, 2),
        "rank2_n200": lambda: _low_rank(rng, 200, 2),
    }[case]()
    path = matrix_file(comm, shared_tmp / f"{case}.mtx", dense)
    nev = 2 if case == "diag123" else 3
    report = eigs_json(command, path, "--nev", str(nev), "--check")
    exact = np.linalg.eigvalsh(dense)
    exact = exact[np.argsort(-np.abs(exact), kind="stable")][:nev]
    assert report["converged"] and report["check_passed"], report
    scale = np.abs(exact).max()
    # sorted by value: eigenvalues of one magnitude (+-x, as u diag(d) u^T can give) may come in either order
    got = np.sort(np.array(report["eigenvalues"]))
    assert np.max(np.abs(got - np.sort(exact))) <= 1e-9 * scale, (report["eigenvalues"], exact)
