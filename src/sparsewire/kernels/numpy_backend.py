"""Kernel backends: where an executor's buffers live and what runs its local products.

Every local operation of a multiply goes through one backend object, the executor's kernel choke
point (``buffers.kernels``):

* ``csr(matrix, dtype, threads)``, ``gather_operand(index, threads)``, ``columns(matrix, dtype,
  row_bounds)``: a plan's matrices prepared once (CSR products, row gathers, per-message column
  ranges of a receive matrix);
* ``zeros(shape, dtype)``: every buffer; ``mpi_memory(buffer)``: what MPI is given to move it
  directly (host memory as a NumPy array of the same memory; a CUDA tensor itself);
  ``flat(buffer)``, ``stage_zeros``, ``copy_out``, ``copy_in``: a message staged through host
  memory (:mod:`~sparsewire.wire.paths`); ``synchronize()``: every queued kernel and
  copy done (a no-op on the CPU), before MPI touches that memory;
* ``multiply``, ``multiply_rows``, ``gather``, ``gather_rows``, ``apply_columns`` (and, NumPy only, the per-thread
  element ranges of the partitioned mode): the products;
* ``block(b, shape, dtype)``, ``output(out, shape, dtype)``: the caller's B and C checked and in
  the backend's array type.

:class:`NumpyBackend` (``numpy``, the default): NumPy arrays on cache lines, the compiled kernels of
:mod:`sparsewire.kernels.compiled`, every mode. ``torch`` (:mod:`sparsewire.kernels.torch_backend`):
tensors of a torch device (``cpu``, ``cuda``) and PyTorch's sparse CSR products and gathers. Both give the
same C (exact on integer data): ``tests/exec/test_backends.py`` runs every strategy and mode the
torch backend supports on both.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sparsewire._lib.aligned import empty_aligned, zeros_aligned
from sparsewire.errors import PlanMismatchError
from sparsewire.kernels import compiled as kernels
from sparsewire.kernels import refuse_non_dense, refuse_unsupported_values
from sparsewire.plan.modes import Mode

__all__ = ["NumpyBackend"]


class NumpyBackend:
    """NumPy arrays and the compiled (Numba) kernels of :mod:`sparsewire.kernels.compiled`; every mode."""

    name = "numpy"
    device = "cpu"
    modes = frozenset(Mode)
    description = "buffers are NumPy arrays, products the compiled kernels"

    csr = staticmethod(kernels.CsrOperand.from_matrix)
    gather_operand = staticmethod(kernels.GatherOperand.from_index)
    columns = staticmethod(kernels.CscOperand.from_matrix)
    multiply = staticmethod(kernels.multiply)
    multiply_rows = staticmethod(kernels.multiply_rows)
    gather = staticmethod(kernels.gather)
    gather_rows = staticmethod(kernels.gather_rows)
    apply_columns = staticmethod(kernels.apply_columns)
    apply_elements = staticmethod(kernels.apply_elements)
    gather_elements = staticmethod(kernels.gather_elements)
    multiply_elements = staticmethod(kernels.multiply_elements)

    @staticmethod
    def with_values(operand: kernels.CsrOperand, values: np.ndarray) -> kernels.CsrOperand:
        """Not collective. ``operand``'s pattern with other values (in its stored order)."""
        return dataclasses.replace(operand, data=values)

    @staticmethod
    def from_torch(tensor):
        """Not collective. A CPU tensor as this backend's array (a NumPy view of its memory)."""
        return tensor.detach().numpy()

    @staticmethod
    def zeros(shape: tuple[int, int], dtype) -> np.ndarray:
        """Not collective. A zeroed buffer whose rows start on cache lines."""
        return zeros_aligned(shape, dtype)

    @staticmethod
    def mpi_memory(buffer: np.ndarray) -> np.ndarray:
        """Not collective. The buffer itself (it is host memory)."""
        return buffer

    @staticmethod
    def flat(buffer: np.ndarray) -> np.ndarray:
        """Not collective. The buffer as one row of elements (a view), in the backend's array type."""
        return buffer.reshape(-1)

    @staticmethod
    def stage_zeros(elements: int, dtype) -> np.ndarray:
        """Not collective. Host memory for staged messages (:mod:`sparsewire.wire.paths`)."""
        return zeros_aligned((elements,), dtype)

    @staticmethod
    def copy_out(source: np.ndarray, stage: np.ndarray) -> None:
        """Not collective. ``stage[:] = source`` (a message of a flat buffer into host memory)."""
        np.copyto(stage, source)

    @staticmethod
    def copy_in(stage: np.ndarray, target: np.ndarray) -> None:
        """Not collective. ``target[:] = stage`` (a staged message into a flat buffer)."""
        np.copyto(target, stage)

    @staticmethod
    def synchronize() -> None:
        """Not collective. Nothing to wait for: every kernel has returned when it is called."""

    @staticmethod
    def set_threads(threads: int, sharing: int) -> None:
        """Not collective. The compiled kernels' threads (:func:`sparsewire.kernels.compiled.set_threads`)."""
        kernels.set_threads(threads, sharing)

    @staticmethod
    def block(b, shape: tuple[int, int], dtype: np.dtype, rank: int) -> np.ndarray:
        """Not collective. B as a C-contiguous array of ``dtype`` (converted when it is not)."""
        refuse_non_dense(b, rank, (np.ndarray,))
        if getattr(b, "shape", None) != shape:
            raise PlanMismatchError(
                f"rank {rank}: the B block has shape {getattr(b, 'shape', type(b).__name__)}, expected {shape} "
                "(this rank's rows of B by k); give each rank its rows under the plan's column partition"
            )
        refuse_unsupported_values(getattr(b.dtype, "kind", None), str(b.dtype), rank)
        if b.dtype != dtype or not b.flags.c_contiguous:
            b = np.ascontiguousarray(b, dtype=dtype)
        return b

    @staticmethod
    def apart(b: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Not collective. ``b``, or a copy of it where it shares memory with ``out``: C's rows are
        written while B's are still read (NumPy's ``matmul(a, b, out=b)`` copies likewise)."""
        return b.copy() if np.may_share_memory(b, out) and np.shares_memory(b, out) else b

    @staticmethod
    def output(out, shape: tuple[int, int], dtype: np.dtype, rank: int) -> np.ndarray:
        """Not collective. ``out`` checked, or a new C on cache lines when None."""
        if out is None:
            return empty_aligned(shape, dtype)
        if getattr(out, "shape", None) != shape or out.dtype != dtype or not out.flags.c_contiguous:
            raise PlanMismatchError(
                f"rank {rank}: out must be a C-contiguous {dtype} array of shape {shape} "
                f"(got {getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')})"
            )
        return out
