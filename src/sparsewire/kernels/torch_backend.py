"""The torch kernel backend: an executor's buffers as tensors of one torch device, its local
products as PyTorch's sparse CSR products (``torch.addmm`` with a CSR matrix: MKL on the CPU
build, cuSPARSE on CUDA) and row gathers (``index_select``); a message's rows are added to C by
the product of its block of the receive matrix.

A plan's matrices are converted once per executor; the transposed plan has matrices of its own
(:mod:`sparsewire.plan.transpose` builds ``A^T``'s blocks explicitly, so no product runs on a
transposed view).

Devices: ``cpu``, and ``cuda``/``cuda:N`` where PyTorch has CUDA. On the CPU a tensor and its NumPy
view are the same memory, so MPI and Gloo move the tensors themselves. On CUDA the buffers are
device memory: MPI is given the tensors themselves (:meth:`TorchBackend.mpi_memory`; read through
``__cuda_array_interface__`` by a CUDA-aware MPI) only for the messages the transfer rule sends
direct; every other message is staged (:mod:`sparsewire.wire.paths`) through pinned host
memory, copied asynchronously on a stream of its own (:meth:`~TorchBackend.copy_out`,
:meth:`~TorchBackend.copy_in`); NCCL moves the tensors for the torch transport. The CUDA-only
lines are the branches on ``self._copies`` beside their CPU twins (``tests/exec/test_devices.py``
runs them where PyTorch sees a GPU).

Runs the bulk, overlap, pipelined and early modes (the partitioned mode's per-thread element
ranges are the compiled kernels' own). Every product on the CPU sums each C row in one thread in
the stored order, so ``deterministic=True`` (the ordered combine) gives the same bits run to run;
on CUDA that rests on cuSPARSE, whose SpMM documentation names only the transposed product as one
that may differ run to run (no product here runs on a transposed view); not yet checked on a GPU.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from sparsewire._lib.aligned import zeros_aligned
from sparsewire._lib.distinct import csr_index_type
from sparsewire.errors import PlanMismatchError
from sparsewire.kernels import refuse_non_dense, refuse_unsupported_values
from sparsewire.kernels.compiled import balanced_bounds
from sparsewire.plan.modes import Mode

__all__ = ["TorchBackend", "TorchCsr", "TorchGather", "TorchColumns", "node_device"]

_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


def _index(values: np.ndarray, device: torch.device, itype=np.int64) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(values, dtype=itype)).to(device)


def node_device(comm) -> str:
    """Collective. ``cuda:N`` for this rank, N its rank among the ranks of its node modulo the
    node's CUDA devices, made PyTorch's current device (so NCCL and ``cuda`` name it); ``cuda``
    where this PyTorch sees no CUDA device (the backend then says why it cannot run)."""
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_rank()
    node.Free()
    if not torch.cuda.is_available():
        return "cuda"
    index = local % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return f"cuda:{index}"


def _csr_index(csr: sp.csr_array, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The row pointer and column indices of a torch CSR tensor: int32 where both fit (PyTorch takes both int32 or both
    int64), which halves their memory and, on the CPU, shares the plan's own int32 arrays; else int64."""
    itype = csr_index_type(*csr.shape, csr.nnz)
    return _index(csr.indptr, device, itype), _index(csr.indices, device, itype)


def _csr_tensor(indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta": the products used here are stable
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(indptr, indices, values, size=shape, check_invariants=False)


@dataclass(frozen=True, eq=False)
class TorchCsr:
    """A CSR matrix as a torch tensor, with its row pointer on the host (to cut row ranges
    without a device round trip) and the threads' balanced row ranges (``bounds``)."""

    matrix: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor
    row_starts: np.ndarray
    shape: tuple[int, int]
    bounds: np.ndarray

    @property
    def nnz(self) -> int:
        return int(self.row_starts[-1])


@dataclass(frozen=True, eq=False)
class TorchGather:
    """Row indices to gather: ``out[r] = x[index[r]]``."""

    index: torch.Tensor


@dataclass(frozen=True, eq=False)
class TorchColumns:
    """A receive matrix cut by columns (the rows of a receive buffer): the CSR matrix of columns
    ``[c, c')``, made on the first call for that range (one per message) and kept in ``blocks``."""

    matrix: sp.csr_array
    dtype: np.dtype
    blocks: dict


class TorchBackend:
    """Tensors on ``device`` and PyTorch's kernels (see the module docstring)."""

    name = "torch"
    modes = frozenset({Mode.BULK, Mode.OVERLAP, Mode.PIPELINED, Mode.EARLY})
    description = "buffers are torch tensors, products torch's sparse CSR addmm and index_select"

    def __init__(self, device: str = "cpu") -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        # Staged copies run on a stream of their own (CUDA); None on the CPU, where a copy is a memcpy.
        self._copies = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    @staticmethod
    def device_problem(device: str) -> str | None:
        """Not collective. Why the torch backend cannot run on ``device`` (None: it can): ``cpu``
        always, ``cuda`` or ``cuda:N`` where this PyTorch has CUDA and device N."""
        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError):
            return f"unknown device {device!r}; use cpu, cuda or cuda:N"
        if parsed.type == "cpu":
            return None
        if parsed.type != "cuda":
            return f"device {device!r}: the torch backend runs on cpu and cuda devices; use cpu, cuda or cuda:N"
        if not torch.cuda.is_available():
            return (
                f"device {device!r}: this PyTorch ({torch.__version__}) sees no CUDA device; install a CUDA build of PyTorch "
                "on a machine with an NVIDIA GPU (bench/README.md), or use device='cpu'"
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            return (
                f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s), cuda:0 to "
                f"cuda:{torch.cuda.device_count() - 1}"
            )
        return None

    def _values(self, values: np.ndarray, dtype: np.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(values, dtype=dtype)).to(self.device)

    def csr(self, matrix: sp.sparray, dtype, threads: int, *, keep_order: bool = False) -> TorchCsr:
        """Not collective. ``matrix`` for :meth:`multiply` (``keep_order``: each row summed in its
        stored order, no duplicates allowed; otherwise duplicates summed, columns sorted)."""
        csr = sp.csr_array(matrix)
        if not keep_order:
            csr.sum_duplicates()
        row_starts = csr.indptr.astype(np.int64)
        indptr, indices = _csr_index(csr, self.device)
        values = self._values(csr.data, np.dtype(dtype))
        return TorchCsr(
            _csr_tensor(indptr, indices, values, csr.shape),
            indptr,
            indices,
            values,
            row_starts,
            csr.shape,
            balanced_bounds(row_starts, threads),
        )

    def gather_operand(self, index: np.ndarray, threads: int) -> TorchGather:
        """Not collective."""
        return TorchGather(_index(index, self.device))

    def columns(self, matrix: sp.sparray, dtype, row_bounds: np.ndarray) -> TorchColumns:
        """Not collective. ``matrix`` for :meth:`apply_columns`, cut by column ranges as they are asked for."""
        csr = sp.csr_array(matrix)
        csr.sum_duplicates()
        return TorchColumns(csr, np.dtype(dtype), {})

    @staticmethod
    def with_values(operand: TorchCsr, values: torch.Tensor) -> TorchCsr:
        """Not collective. ``operand``'s pattern with other values (in its stored order)."""
        return TorchCsr(
            _csr_tensor(operand.indptr, operand.indices, values, operand.shape),
            operand.indptr,
            operand.indices,
            values,
            operand.row_starts,
            operand.shape,
            operand.bounds,
        )

    @staticmethod
    def from_torch(tensor: torch.Tensor) -> torch.Tensor:
        """Not collective. The tensor itself, detached from autograd."""
        return tensor.detach()

    def zeros(self, shape: tuple[int, int], dtype) -> torch.Tensor:
        """Not collective. A zeroed buffer on the device."""
        return torch.zeros(shape, dtype=_TORCH_DTYPES[np.dtype(dtype)], device=self.device)

    def mpi_memory(self, buffer: torch.Tensor):
        """Not collective. What MPI is given to move the buffer directly: on the CPU its NumPy view
        (the same memory); on CUDA the tensor itself, which only a CUDA-aware MPI reads (the
        transfer rule stages every message otherwise)."""
        return buffer if self._copies is not None else buffer.numpy()

    @staticmethod
    def flat(buffer: torch.Tensor) -> torch.Tensor:
        """Not collective. The buffer as one row of elements (a view on its device)."""
        return buffer.view(-1)

    def stage_zeros(self, elements: int, dtype) -> np.ndarray:
        """Not collective. Host memory for staged messages (:mod:`sparsewire.wire.paths`):
        page-locked (pinned) on CUDA, so the copies are asynchronous DMA; a NumPy view for MPI."""
        if self._copies is None:
            return zeros_aligned((elements,), dtype)
        return torch.zeros(elements, dtype=_TORCH_DTYPES[np.dtype(dtype)], pin_memory=True).numpy()

    def copy_out(self, source: torch.Tensor, stage: np.ndarray) -> None:
        """Not collective. ``stage[:] = source``: a message of a flat buffer into host memory. On
        CUDA it is queued on the copy stream after the kernels that packed ``source``; MPI may read
        ``stage`` after :meth:`synchronize`."""
        if self._copies is None:
            torch.from_numpy(stage).copy_(source)
            return
        self._copies.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._copies):
            torch.from_numpy(stage).copy_(source, non_blocking=True)

    def copy_in(self, stage: np.ndarray, target: torch.Tensor) -> None:
        """Not collective. ``target[:] = stage``: a staged message into a flat buffer. On CUDA it is
        queued on the copy stream (once the kernels before it are done with ``target``) and the
        compute stream waits for it, so the host goes on to the next message while it runs."""
        if self._copies is None:
            target.copy_(torch.from_numpy(stage))
            return
        compute = torch.cuda.current_stream(self.device)
        self._copies.wait_stream(compute)
        with torch.cuda.stream(self._copies):
            target.copy_(torch.from_numpy(stage), non_blocking=True)
        compute.wait_stream(self._copies)

    def synchronize(self) -> None:
        """Not collective. Wait until every queued kernel and copy is done, before MPI reads or
        writes the buffers or the staged memory (mpi4py does not synchronise a CUDA stream); on the
        CPU there is nothing to wait for."""
        if self._copies is not None:
            self._copies.synchronize()
            torch.cuda.current_stream(self.device).synchronize()

    @staticmethod
    def set_threads(threads: int, sharing: int) -> None:
        """Not collective. PyTorch's intra-op threads (one pool per process)."""
        torch.set_num_threads(threads)

    @staticmethod
    def multiply(operand: TorchCsr, x: torch.Tensor, out: torch.Tensor, accumulate: bool = False) -> None:
        """Not collective. ``out = A @ x`` or, with ``accumulate``, ``out += A @ x`` (nothing to add
        from an empty A, such as a rank's receive matrix where it has no neighbour)."""
        if operand.nnz == 0:
            if not accumulate:
                out.zero_()
            return
        torch.addmm(out, operand.matrix, x, beta=1 if accumulate else 0, out=out)

    @staticmethod
    def multiply_rows(
        operand: TorchCsr, x: torch.Tensor, out: torch.Tensor, start: int, stop: int, accumulate: bool = False
    ) -> None:
        """Not collective. Rows [start, stop) of :meth:`multiply`."""
        if stop <= start:
            return
        first, last = int(operand.row_starts[start]), int(operand.row_starts[stop])
        rows = _csr_tensor(
            operand.indptr[start : stop + 1] - first,
            operand.indices[first:last],
            operand.values[first:last],
            (stop - start, operand.shape[1]),
        )
        target = out[start:stop]
        torch.addmm(target, rows, x, beta=1 if accumulate else 0, out=target)

    @staticmethod
    def gather(operand: TorchGather, x: torch.Tensor, out: torch.Tensor) -> None:
        """Not collective. ``out[r] = x[index[r]]``."""
        if operand.index.numel():
            torch.index_select(x, 0, operand.index, out=out)

    @staticmethod
    def gather_rows(operand: TorchGather, x: torch.Tensor, out: torch.Tensor, start: int, stop: int) -> None:
        """Not collective. Rows [start, stop) of :meth:`gather`."""
        if stop > start:
            torch.index_select(x, 0, operand.index[start:stop], out=out[start:stop])

    def apply_columns(
        self, operand: TorchColumns, buffer: torch.Tensor, out: torch.Tensor, col_start: int, col_stop: int
    ) -> None:
        """Not collective. ``out += R[:, col_start:col_stop] @ buffer[col_start:col_stop]`` (one
        message's rows added at their C rows): a CSR ``addmm`` on that block of R, made once.
        (Gathering the message's rows, scaling them and ``index_add_`` at their C rows made the early
        mode's epochs several times slower: docs/design-decisions.md, "The torch backend for GNN training".)"""
        key = (col_start, col_stop)
        block = operand.blocks.get(key)
        if block is None:
            block = operand.blocks[key] = self.csr(operand.matrix[:, col_start:col_stop], operand.dtype, 1)
        if block.nnz:
            torch.addmm(out, block.matrix, buffer[col_start:col_stop], out=out)

    def block(self, b, shape: tuple[int, int], dtype: np.dtype, rank: int) -> torch.Tensor:
        """Not collective. B as a contiguous tensor of ``dtype`` on the device (a NumPy array is
        wrapped without a copy where it already fits)."""
        refuse_non_dense(b, rank, (np.ndarray, torch.Tensor))
        got = tuple(getattr(b, "shape", ()))  # a torch.Size or a NumPy shape
        if got != shape:
            raise PlanMismatchError(
                f"rank {rank}: the B block has shape {got or type(b).__name__}, expected {shape} "
                "(this rank's rows of B by k); give each rank its rows under the plan's column partition"
            )
        if isinstance(b, np.ndarray):
            refuse_unsupported_values(b.dtype.kind, str(b.dtype), rank)
            b = torch.from_numpy(np.ascontiguousarray(b, dtype=dtype))
        elif isinstance(b, torch.Tensor) and b.is_complex():
            refuse_unsupported_values("c", str(b.dtype), rank)
        return b.to(device=self.device, dtype=_TORCH_DTYPES[dtype]).contiguous()

    @staticmethod
    def apart(b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Not collective. ``b``, or a copy of it where its memory overlaps ``out``'s: C's rows are
        written while B's are still read."""
        if b.device != out.device:
            return b
        b_start, out_start = b.data_ptr(), out.data_ptr()
        b_end, out_end = b_start + b.numel() * b.element_size(), out_start + out.numel() * out.element_size()
        return b.clone() if b_start < out_end and out_start < b_end else b

    def output(self, out, shape: tuple[int, int], dtype: np.dtype, rank: int) -> torch.Tensor:
        """Not collective. ``out`` checked (a contiguous tensor of ``dtype`` on the device), or a
        new C when None."""
        wanted = _TORCH_DTYPES[dtype]
        if out is None:
            return torch.empty(shape, dtype=wanted, device=self.device)
        if not (
            isinstance(out, torch.Tensor)
            and tuple(out.shape) == shape
            and out.dtype == wanted
            and out.device == self.device
            and out.is_contiguous()
        ):
            raise PlanMismatchError(
                f"rank {rank}: out must be a contiguous {wanted} tensor on {self.device} of shape {shape} "
                f"(got {type(out).__name__} {tuple(getattr(out, 'shape', ()))})"
            )
        return out
