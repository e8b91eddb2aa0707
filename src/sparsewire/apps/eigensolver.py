"""Largest-magnitude eigenpairs of a distributed symmetric matrix by a restarted block Krylov
method with Rayleigh-Ritz: the iterative SpMBV application of Collom & Bienz (sec. 1), one plan and
one executor for every multiply.

Each rank holds its rows of every block; only small dense problems (b x b Gram matrices, the
(m b) x (m b) projected matrix) are reduced over the ranks and solved on every rank, so every rank
computes the same Ritz values.

Cycle, from an orthonormal block X (n x b) and W = A X:

1. basis ``Q = [X, A X, A^2 X, ...]`` of m blocks: each new block ``A Q_j`` (one SpMM of width b)
   is orthogonalised against the basis twice (classical Gram-Schmidt, two passes) and then within
   itself by SVQB (``G = W^T W = V L V^T``, ``W V L^{-1/2}``; directions with
   ``L < 1e-12 max(max L, 1e-14 N)``, N the largest squared column norm before the projection
   (so a block of pure roundoff is dropped whole), are replaced by fresh pseudo-random ones, so the width stays b, and the
   refilled block goes through two more clean passes, so the fresh directions are orthogonal too
   (a rank-deficient A, or the identity, drops whole blocks);
2. Rayleigh-Ritz: ``H = Q^T (A Q)``, ``H = U T U^T``; the b Ritz pairs of largest ``|theta|`` give
   the next ``X = Q U`` and ``A X = (A Q) U`` (no multiply needed for the first block);
3. converged when ``||A x_i - theta_i x_i|| <= max(tol |theta_i|, n u |theta_1|)`` for the wanted
   ``nev`` pairs (u the unit roundoff: a zero eigenvalue's residual cannot go below the roundoff
   of one multiply, see :mod:`sparsewire._lib.tolerance`).

A matrix of order ``n <= steps * b`` has no room for a Krylov basis of ``steps`` blocks; it is
small, so it is solved directly: its columns are ``A I`` (``ceil(n / b)`` multiplies), every rank
holds all of it, and ``numpy.linalg.eigh`` gives the pairs.

A residual of r moves a Ritz value of a symmetric matrix by at most r^2 / gap, so ``tol = 1e-8``
gives eigenvalues far inside 1e-6 relative of ARPACK's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from sparsewire._lib.aligned import empty_aligned
from sparsewire._lib.tolerance import unit_roundoff
from sparsewire.errors import InputError
from sparsewire.exec.executor import SpmmExecutor
from sparsewire.io.generators import deterministic_dense

__all__ = ["EigenResult", "block_krylov_eigs"]


@dataclass(frozen=True)
class EigenResult:
    """Eigenvalues (descending by magnitude), this rank's rows of the eigenvectors, and counts."""

    eigenvalues: np.ndarray
    local_vectors: np.ndarray
    residuals: np.ndarray
    iterations: int
    multiplies: int
    converged: bool
    seconds: float
    multiply_seconds: float


def _allreduce_matrix(comm: MPI.Comm, local: np.ndarray) -> np.ndarray:
    total = np.empty_like(local)
    comm.Allreduce(np.ascontiguousarray(local), total, op=MPI.SUM)
    return total


def block_krylov_eigs(
    executor: SpmmExecutor,
    row_start: int,
    n: int,
    nev: int,
    *,
    steps: int = 8,
    tol: float = 1e-8,
    max_iterations: int = 500,
    progress=None,
) -> EigenResult:
    """Collective. The ``nev`` largest-magnitude eigenpairs of the symmetric matrix the executor
    multiplies (its block width ``executor.k`` is the block size b >= nev).

    Args:
        executor: an executor of a square matrix whose row and column partitions agree.
        row_start: this rank's first global row (the start vector and fresh directions are hashes of
            global rows, so the iteration is the same at every P up to rounding).
        n: the matrix order.
        steps: blocks per Krylov basis (m); m b columns are held per rank.
        tol: relative residual for convergence.
        max_iterations: cycles before giving up (the result then says ``converged=False``).
        progress: called with a line of text once per cycle on rank 0, or None.
    """
    comm, b, plan = executor.comm, executor.k, executor.plan
    if executor.dtype != np.float64:
        raise InputError(f"eigs works in float64; make the executor with dtype float64 (got {executor.dtype})")
    if plan.local_shape[0] != plan.local_shape[1] or plan.row_partition.n != plan.col_partition.n:
        raise InputError("eigs needs a square matrix with the same row and column partition")
    if not 1 <= nev <= min(b, n):
        raise InputError(f"--nev {nev} must be between 1 and the block size {b} and at most the order {n}")
    if steps < 2:
        raise InputError(f"the Krylov basis needs at least 2 blocks (got {steps})")
    if not (isinstance(tol, (int, float)) and np.isfinite(tol) and tol > 0):
        raise InputError(f"tol must be a finite number greater than 0 (got {tol!r}); 1e-8 is the default")
    n_local = plan.local_shape[0]
    started = time.perf_counter()
    multiply_seconds = 0.0
    multiplies = 0
    fresh_draws = 0

    def apply(block: np.ndarray, out: np.ndarray) -> None:
        nonlocal multiply_seconds, multiplies
        began = time.perf_counter()
        executor.multiply(block, out=out)
        multiply_seconds += time.perf_counter() - began
        multiplies += 1

    def fresh(columns: int) -> np.ndarray:
        nonlocal fresh_draws
        fresh_draws += 1
        # Rows of a hash matrix far from the start vector's, the same for every P.
        offset = fresh_draws * n
        return deterministic_dense(offset + row_start, offset + row_start + n_local, b, np.float64)[:, :columns]

    def orthonormalize(w: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
        clean = 0
        for _ in range(12):  # two clean passes in a row; a refill starts the count again
            # Also drop what is roundoff against the block as it came in (norms below ~1e-13 of it):
            # a block that lay in the basis (A = I) leaves only roundoff, all of it alike, which a
            # threshold relative to the projected block alone would keep and normalise.
            before = 0.0  # without a projection, the block's own largest L already bounds it
            if basis is not None and basis.shape[1]:
                # One reduction for the projection and the incoming column norms.
                reduced = _allreduce_matrix(comm, np.vstack([basis.T @ w, np.einsum("ij,ij->j", w, w)]))
                before = float(reduced[-1].max(initial=0.0))
                w = w - basis @ reduced[:-1]
            gram = _allreduce_matrix(comm, w.T @ w)
            values, vectors = np.linalg.eigh((gram + gram.T) / 2)
            keep = values > 1e-12 * max(values.max(initial=0.0), 1e-14 * before, 1e-300)
            if keep.all():
                w = w @ (vectors / np.sqrt(values))
                clean += 1
                if clean == 2:
                    return w
            else:
                kept = w @ (vectors[:, keep] / np.sqrt(values[keep]))
                w = np.hstack([kept, fresh(b - kept.shape[1])])
                clean = 0
        raise InputError(
            f"could not complete an orthonormal block of {b} columns in {n} dimensions; use a smaller --block or --steps"
        )

    if n <= steps * b:
        return _dense_eigs(executor, row_start, n, nev, started)
    x = orthonormalize(deterministic_dense(row_start, row_start + n_local, b, np.float64), None)
    ax = empty_aligned((n_local, b))
    apply(x, ax)
    q = np.empty((n_local, steps * b))
    aq = np.empty((n_local, steps * b))
    product = empty_aligned((n_local, b))
    theta = np.zeros(b)
    residuals = np.full(nev, np.inf)
    converged = False
    iteration = 0
    for iteration in range(1, max_iterations + 1):
        q[:, :b], aq[:, :b] = x, ax
        for j in range(1, steps):
            w = orthonormalize(aq[:, (j - 1) * b : j * b], q[:, : j * b])
            q[:, j * b : (j + 1) * b] = w
            apply(w, product)
            aq[:, j * b : (j + 1) * b] = product
        h = _allreduce_matrix(comm, q.T @ aq)
        values, vectors = np.linalg.eigh((h + h.T) / 2)
        order = np.argsort(-np.abs(values), kind="stable")[:b]
        theta, u = values[order], vectors[:, order]
        x, ax = q @ u, aq @ u
        r = ax - x * theta
        residuals = np.sqrt(_allreduce_matrix(comm, np.einsum("ij,ij->j", r, r)))[:nev]
        floor = n * unit_roundoff(np.float64) * abs(theta[0])
        worst = float(np.max(residuals / np.maximum(np.abs(theta[:nev]), max(floor / tol, 1e-300))))
        if progress is not None and comm.Get_rank() == 0:
            progress(f"iteration {iteration}: largest |eigenvalue| {abs(theta[0]):.10g}, worst relative residual {worst:.2e}")
        if worst <= tol:
            converged = True
            break
    return EigenResult(
        eigenvalues=theta[:nev].copy(),
        local_vectors=x[:, :nev].copy(),
        residuals=residuals,
        iterations=iteration,
        multiplies=multiplies,
        converged=converged,
        seconds=time.perf_counter() - started,
        multiply_seconds=multiply_seconds,
    )


def _dense_eigs(executor: SpmmExecutor, row_start: int, n: int, nev: int, started: float) -> EigenResult:
    """Collective. The ``nev`` largest-magnitude eigenpairs of a matrix small enough to hold
    (``n <= steps * b``): columns ``A I`` by the executor, rows gathered on every rank, ``eigh``."""
    comm, b = executor.comm, executor.k
    n_local = executor.plan.local_shape[0]
    columns = np.empty((n_local, n))
    block, product = empty_aligned((n_local, b)), empty_aligned((n_local, b))
    multiplies, began = 0, time.perf_counter()
    for first in range(0, n, b):
        block[:] = 0.0
        width = min(b, n - first)
        rows = np.arange(n_local) + row_start  # identity columns first..first+width, this rank's rows
        inside = (rows >= first) & (rows < first + width)
        block[inside, rows[inside] - first] = 1.0
        executor.multiply(block, out=product)
        multiplies += 1
        columns[:, first : first + width] = product[:, :width]
    multiply_seconds = time.perf_counter() - began
    dense = np.vstack(comm.allgather(columns))
    values, vectors = np.linalg.eigh((dense + dense.T) / 2)
    order = np.argsort(-np.abs(values), kind="stable")[:nev]
    theta, x = values[order], vectors[:, order]
    residuals = np.linalg.norm(dense @ x - x * theta, axis=0)
    return EigenResult(
        eigenvalues=theta.copy(),
        local_vectors=x[row_start : row_start + n_local].copy(),
        residuals=residuals,
        iterations=1,
        multiplies=multiplies,
        converged=True,
        seconds=time.perf_counter() - started,
        multiply_seconds=multiply_seconds,
    )
