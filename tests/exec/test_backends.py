"""Kernel backends: the torch backend (tensors on the CPU device, PyTorch's sparse products) gives
the same C as the NumPy backend. Its products are checked one by one against the compiled
kernels here, and whole multiplies under ``mpiexec -n P`` (every strategy and mode it runs, flat and
hierarchical, P = 1..4; plans transposed, saved and deterministic; the commands on it) in tests/mpi/test_executor.py,
tests/mpi/test_torch_plans.py and tests/mpi/test_torch_command.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")


from conftest import run_mpi  # noqa: E402
from sparsewire.errors import InputError  # noqa: E402
from sparsewire.kernels import backend_problem, make_backend  # noqa: E402
from sparsewire.kernels.numpy_backend import NumpyBackend  # noqa: E402


def integer_matrix(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(-5, 6, matrix.nnz).astype(np.float64)
    return sp.csr_array(matrix)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_products_equal_the_compiled_kernels(rng, dtype):
    numpy_backend, torch_backend = NumpyBackend(), make_backend("torch", "cpu")
    for shape, k in [((37, 29), 5), ((64, 64), 16), ((1, 9), 1), ((12, 12), 3)]:
        a = integer_matrix(rng, shape, 0.2)
        x = rng.integers(-4, 5, (shape[1], k)).astype(dtype)
        start = rng.integers(-3, 4, (shape[0], k)).astype(dtype)
        ops = (numpy_backend.csr(a, dtype, 2), torch_backend.csr(a, dtype, 2))
        for accumulate in (False, True):
            mine = numpy_backend.zeros(start.shape, dtype)
            mine[:] = start
            numpy_backend.multiply(ops[0], x, mine, accumulate)
            theirs = torch.from_numpy(start.copy())
            torch_backend.multiply(ops[1], torch.from_numpy(x), theirs, accumulate)
            np.testing.assert_array_equal(theirs.numpy(), mine)
            np.testing.assert_array_equal(mine, (start if accumulate else 0) + a @ x)
        lo, hi = sorted(rng.integers(0, shape[0] + 1, 2).tolist())
        rows = torch.from_numpy(start.copy())
        torch_backend.multiply_rows(ops[1], torch.from_numpy(x), rows, lo, hi, accumulate=True)
        expected = start.copy()
        expected[lo:hi] += (a @ x)[lo:hi]
        np.testing.assert_array_equal(rows.numpy(), expected)
        index = rng.integers(0, shape[1], 2 * shape[1])
        gathered = torch.empty((index.size, k), dtype=getattr(torch, np.dtype(dtype).name))
        torch_backend.gather(torch_backend.gather_operand(index, 2), torch.from_numpy(x), gathered)
        np.testing.assert_array_equal(gathered.numpy(), x[index])
        columns = torch_backend.columns(a, dtype, np.array([0, shape[0]]))
        c0, c1 = sorted(rng.integers(0, shape[1] + 1, 2).tolist())
        added = torch.from_numpy(start.copy())
        torch_backend.apply_columns(columns, torch.from_numpy(x), added, c0, c1)
        np.testing.assert_array_equal(added.numpy(), start + a[:, c0:c1] @ x[c0:c1])


def test_the_torch_csr_shares_the_plans_32_bit_indices_and_widens_only_past_them(rng):
    """A pattern whose entries and columns fit in int32 becomes a CSR tensor on the very arrays given (no int64 copy:
    the plan's diagonal block is held once), multiplied exactly; one with 2**31 columns gets int64 indices (PyTorch
    takes both int32 or both int64)."""
    backend = make_backend("torch", "cpu")
    a = integer_matrix(rng, (40, 30), 0.2)
    a.indices, a.indptr = a.indices.astype(np.int32), a.indptr.astype(np.int32)
    operand = backend.csr(a, np.float64, 1)
    assert operand.matrix.col_indices().dtype == operand.matrix.crow_indices().dtype == torch.int32
    assert operand.indices.data_ptr() == a.indices.ctypes.data and operand.indptr.data_ptr() == a.indptr.ctypes.data
    x = rng.integers(-4, 5, (30, 3)).astype(np.float64)
    out = torch.zeros(40, 3, dtype=torch.float64)
    backend.multiply(operand, torch.from_numpy(x), out)
    assert np.array_equal(out.numpy(), a @ x)
    wide = sp.csr_array(([2.0], [2**31 - 1 + 1], [0, 1]), shape=(1, 2**31 + 1))
    assert backend.csr(wide, np.float64, 1).matrix.col_indices().dtype == torch.int64


def test_a_product_that_overwrites_ignores_what_was_in_out():
    backend = make_backend("torch", "cpu")
    a = sp.csr_array(np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]]))
    out = torch.full((3, 2), float("nan"), dtype=torch.float64)
    backend.multiply(backend.csr(a, np.float64, 1), torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64), out)
    assert out.tolist() == [[1.0, 2.0], [6.0, 8.0], [0.0, 0.0]]


def test_an_empty_operand_overwrites_with_zeros_and_adds_nothing(rng):
    """No product runs for an operand without entries (a receive matrix without neighbours), but
    the result is still A @ x: zeros, or out unchanged when accumulating."""
    backend = make_backend("torch", "cpu")
    rows, inner, k = (int(n) for n in rng.integers(1, 9, 3))
    empty = backend.csr(sp.csr_array((rows, inner)), np.float64, 1)
    x = torch.from_numpy(rng.integers(-5, 6, (inner, k)).astype(np.float64))
    out = torch.full((rows, k), float("nan"), dtype=torch.float64)
    backend.multiply(empty, x, out)
    assert torch.equal(out, torch.zeros(rows, k, dtype=torch.float64))
    before = torch.from_numpy(rng.integers(-5, 6, (rows, k)).astype(np.float64))
    out.copy_(before)
    backend.multiply(empty, x, out, accumulate=True)
    assert torch.equal(out, before)


def test_backend_problems_name_the_fix():
    assert backend_problem("numpy", "cpu", "partitioned") is None
    assert "unknown backend 'cupy'" in backend_problem("cupy", "cpu", None)
    assert "backend='torch'" in backend_problem("numpy", "cuda", None)
    assert "cannot run the partitioned mode" in backend_problem("torch", "cpu", "partitioned")
    assert "unknown device" in backend_problem("torch", "gpu0", None)
    assert "runs on cpu and cuda devices" in backend_problem("torch", "mps", None)
    if not torch.cuda.is_available():
        assert "sees no CUDA device" in backend_problem("torch", "cuda:0", None)
    else:
        assert backend_problem("torch", "cuda:0", None) is None
        assert "CUDA device(s)" in backend_problem("torch", f"cuda:{torch.cuda.device_count()}", None)
    with pytest.raises(InputError, match="unknown backend"):
        make_backend("cupy")


def test_cli_refuses_the_partitioned_mode_on_the_torch_backend_in_one_line():
    completed = run_mpi(
        2, ["-m", "sparsewire", "spmm", "stencil2d:8", "--backend", "torch", "--mode", "partitioned"], timeout=120
    )
    assert completed.returncode != 0
    errors = [line for line in completed.stderr.splitlines() if line.startswith("sparsewire: error:")]
    assert errors and "torch backend cannot run the partitioned mode" in errors[0], completed.stderr
