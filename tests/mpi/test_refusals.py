"""The commands' refusals of bad input under ``mpiexec -n P``: exit status 2 on every rank and one error line, from
rank 0, that names the problem. Each command family keeps one refused job of its own as well (its own ``mpiexec``:
tests/exec/test_executor_mpi.py, tests/spgemm/test_spgemm_mpi.py, tests/apps/test_eigs.py, tests/gnn/test_gnn.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import matrix_file, on_rank_zero


def text_file(comm, path, text: str) -> str:
    """``path`` once rank 0 wrote ``text`` to it (a malformed file :func:`matrix_file` would not write), on every rank."""
    on_rank_zero(comm, path.write_text, text)
    return str(path)


@pytest.mark.ranks(2)
def test_spgemm_and_graph_commands_refuse_bad_input_in_one_line(comm, refusal, shared_tmp):
    assert "unknown semiring" in refusal("spgemm", "rmat:6:4", "--semiring", "avg_times")
    assert "random:SEED" in refusal("spgemm", "rmat:6:4", "--values", "gauss")
    assert "give a topology" in refusal("bfs", "rmat:6:4", "--partition", "metis-hier")
    a = matrix_file(comm, shared_tmp / "a.mtx", sp.random_array((6, 5), density=0.5, format="coo", rng=1))
    nan = matrix_file(comm, shared_tmp / "nan.mtx", sp.coo_array((np.array([1.0, np.nan]), ([0, 1], [1, 0])), shape=(2, 2)))
    negative = sp.coo_array((np.array([1.0, -2.0]), ([0, 1], [1, 0])), shape=(2, 2))
    negative = matrix_file(comm, shared_tmp / "negative.mtx", negative)
    assert "A's columns must equal B's rows" in refusal("spgemm", a, a)
    assert "NaN" in refusal("spgemm", nan)
    assert "negative weights" in refusal("sssp", negative)
    assert "is not a vertex" in refusal("bfs", "rmat:6:4", "--source", "64")
    assert "square" in refusal("triangles", a)


@pytest.mark.ranks(2, 3)
def test_spmm_refuses_bad_input_in_one_line(comm, refusal, shared_tmp):
    nan = text_file(comm, shared_tmp / "nan.mtx", "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 nan\n2 2 1\n")
    assert "NaN" in refusal("spmm", nan, "--check")
    assert refusal("spmm", "stencil2d:8", "--k", "0") == (
        "sparsewire: error: argument --k: must be from 1 to 2147483647 (got 0); see 'sparsewire spmm --help'"
    )
    assert "accounting only" in refusal("spmm", "stencil2d:8", "--strategy", "rowwise")
    assert "--group-size" in refusal("spmm", "stencil2d:8", "--strategy", "joint-group")
    assert "unknown topology" in refusal("spmm", "stencil2d:8", "--topology", "torus")


@pytest.mark.ranks(2)
def test_eigs_refuses_a_block_smaller_than_nev_in_one_line(refusal):
    assert "--block 2 must be at least --nev 3" in refusal("eigs", "stencil2d:4", "--nev", "3", "--block", "2")


@pytest.mark.ranks(2)
def test_gcn_trains_on_a_graph_with_nan_when_allowed(comm, command, shared_tmp):
    """The refusal without ``--allow-nonfinite`` is a job of its own (tests/gnn/test_gnn.py)."""
    n = 40
    entries = [f"{i + 1} {(i + 1) % n + 1} {'nan' if i == 2 else '1'}" for i in range(n)]
    text = f"%%MatrixMarket matrix coordinate real general\n{n} {n} {n}\n" + "\n".join(entries) + "\n"
    ring = text_file(comm, shared_tmp / "ring.mtx", text)
    status, _, err = command("gcn", ring, "--features", "random:4", "--classes", "2", "--epochs", "2", "--allow-nonfinite")
    assert status == 0, err[-2000:]
