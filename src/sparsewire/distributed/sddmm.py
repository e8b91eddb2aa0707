"""Distributed SDDMM: ``S = A ∘ (X Yᵀ)`` at A's stored entries (:mod:`sparsewire.plan.sddmm` gives the formula and
the two ways of a block), planned once and run many times as :class:`SddmmPlan`.

Rank q holds its rows of A, its rows of X (A's row partition) and its rows of Y (A's column partition) and receives
its entries' values in the order of its CSR arrays (``matrix.local_rows.data``). One run is two rounds of
point-to-point messages on a communicator of the plan's own: first the Y rows of the ``column`` blocks and the X
rows of the ``row`` blocks, then the sampled values of the ``row`` blocks back to their rows' owners. Every byte
received is counted from MPI's receive statuses, not from the plan. This version runs on MPI only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, agree_on_values, collective_errors, mpi_messages_problem
from sparsewire.kernels.sampled import sampled_dots
from sparsewire.plan.sddmm import SDDMM_STRATEGIES, sddmm_blocks, way_bytes

if TYPE_CHECKING:  # for annotations only: the matrix's class imports this module
    from sparsewire.distributed.matrix import DistributedMatrix

__all__ = ["SddmmPlan", "plan_sddmm"]

_FIRST, _SECOND = 1, 2  # the tags of the two rounds


class SddmmPlan:
    """A reusable SDDMM of one distributed A at width ``d`` (see the module docstring).

    Attributes:
        matrix: the :class:`~sparsewire.distributed.matrix.DistributedMatrix` it samples.
        d: the width of X and Y.
        dtype: the element type of X, Y and the values.
        strategy: ``column``, ``row`` or ``auto`` (:data:`~sparsewire.plan.sddmm.SDDMM_STRATEGIES`).
        blocks: this rank's off-diagonal blocks with their ways (:class:`~sparsewire.plan.sddmm.SddmmBlock`).
        planned_bytes: the bytes every rank together receives per run, from the formula of each block's way.
        bytes_received: the bytes this rank received in the last run, counted from MPI's receive statuses.
    """

    def __init__(self, matrix: DistributedMatrix, d: int, dtype, strategy: str) -> None:
        """Collective. Prefer :func:`plan_sddmm`."""
        self.matrix, self.d, self.dtype, self.strategy = matrix, int(d), np.dtype(dtype), strategy
        comm = matrix.comm
        rank, size = comm.Get_rank(), comm.Get_size()
        itemsize = self.dtype.itemsize
        self.diagonal, self.blocks = sddmm_blocks(matrix.local_rows, matrix.col_partition, rank, self.d, itemsize, strategy)
        own_start = int(matrix.col_partition.offsets[rank])
        local_cols = matrix.local_rows.indices.astype(np.int64)
        self._diagonal_rows = np.repeat(np.arange(matrix.local_rows.shape[0]), np.diff(matrix.local_rows.indptr))[self.diagonal]
        self._diagonal_cols = local_cols[self.diagonal] - own_start
        # What each peer needs of this rank, told once: the Y rows of its column blocks; the pattern of its row
        # blocks (their entries' rows and columns, the columns as this rank's own Y rows).
        requests: list[object] = [None] * size
        for block in self.blocks:
            if block.way == "column":
                requests[block.peer] = ("column", block.cols - int(matrix.col_partition.offsets[block.peer]))
            else:
                columns = block.cols[block.entry_cols] - int(matrix.col_partition.offsets[block.peer])
                requests[block.peer] = ("row", block.rows.size, block.entry_rows, columns)
        told = list(enumerate(comm.alltoall(requests)))
        # (peer, its rows of Y to send) and (peer, its row count, its entries' rows, their columns as our Y rows)
        self._serve_columns = [(peer, request[1]) for peer, request in told if request is not None and request[0] == "column"]
        self._serve_rows = [(peer, *request[1:]) for peer, request in told if request is not None and request[0] == "row"]
        self.planned_bytes = int(comm.allreduce(sum(block.bytes(self.d, itemsize) for block in self.blocks)))
        self.bytes_received = 0
        self._comm = comm.Dup()
        self._closed = False

    def __repr__(self) -> str:
        ways = [block.way for block in self.blocks]
        return (
            f"SddmmPlan(d={self.d}, dtype={self.dtype}, strategy={self.strategy!r}, "
            f"column blocks {ways.count('column')}, row blocks {ways.count('row')}, planned bytes {self.planned_bytes})"
        )

    @collective_errors
    def sddmm(self, x_local: np.ndarray, y_local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Collective. This rank's values of ``A ∘ (X Yᵀ)`` in the order of ``matrix.local_rows.data``, into ``out``
        when given: ``x_local`` is this rank's rows of X (``matrix.row_partition``), ``y_local`` its rows of Y
        (``matrix.col_partition``), both of width d.

        Round one: each ``column`` block's owner sends the Y rows it names; each ``row`` block's rows go to the
        columns' owner. Then every rank samples its own columns, the fetched rows, and the blocks it was sent rows of
        (round two: their values go back). Finally every value is scaled by A's entry."""
        x, y, out = self._checked(x_local, y_local, out)
        comm, d = self._comm, self.d
        column_blocks = [block for block in self.blocks if block.way == "column"]
        row_blocks = [block for block in self.blocks if block.way == "row"]
        fetched = {block.peer: np.empty((block.cols.size, d), self.dtype) for block in column_blocks}
        rows_in = {peer: np.empty((n_rows, d), self.dtype) for peer, n_rows, _, _ in self._serve_rows}
        first = [comm.Irecv(buffer, peer, _FIRST) for peer, buffer in (*fetched.items(), *rows_in.items())]
        sent = [comm.Isend(np.ascontiguousarray(y[rows]), peer, _FIRST) for peer, rows in self._serve_columns]
        sent += [comm.Isend(np.ascontiguousarray(x[block.rows]), block.peer, _FIRST) for block in row_blocks]
        received = self._wait(first)
        own = np.empty(self.diagonal.size, self.dtype)
        out[self.diagonal] = sampled_dots(x, y, self._diagonal_rows, self._diagonal_cols, own)
        for block in column_blocks:
            values = np.empty(block.entries.size, self.dtype)
            out[block.entries] = sampled_dots(x, fetched[block.peer], block.rows[block.entry_rows], block.entry_cols, values)
        values_back = {block.peer: np.empty(block.entries.size, self.dtype) for block in row_blocks}
        second = [comm.Irecv(buffer, peer, _SECOND) for peer, buffer in values_back.items()]
        for peer, _, entry_rows, columns in self._serve_rows:
            values = sampled_dots(rows_in[peer], y, entry_rows, columns, np.empty(entry_rows.size, self.dtype))
            sent.append(comm.Isend(values, peer, _SECOND))
        received += self._wait(second)
        MPI.Request.Waitall(sent)
        for block in row_blocks:
            out[block.entries] = values_back[block.peer]
        self.bytes_received = int(sum(received))
        out *= self.matrix.local_rows.data.astype(self.dtype, copy=False)
        return out

    def _checked(self, x_local, y_local, out) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Collective. The operands as contiguous arrays of the plan's dtype, or one error on every rank."""
        matrix = self.matrix
        rank = matrix.comm.Get_rank()
        problem = "this SddmmPlan was closed; make a new one with sparsewire.plan_sddmm" if self._closed else None
        y_start, y_stop = matrix.col_partition.range(rank)
        shapes = {
            "x_local": (x_local, (matrix.local_rows.shape[0], self.d), "matrix.row_partition"),
            "y_local": (y_local, (y_stop - y_start, self.d), "matrix.col_partition"),
        }
        for name, (given, shape, partition) in shapes.items():
            if problem is None and (not hasattr(given, "shape") or tuple(given.shape) != shape):
                problem = (
                    f"rank {rank}: {name} has shape {getattr(given, 'shape', type(given).__name__)}, expected {shape} "
                    f"(this rank's rows by {partition}, d = {self.d})"
                )
            elif problem is None and np.iscomplexobj(given):
                problem = f"rank {rank}: {name} is complex; SDDMM here is real ({self.dtype})"
        if (
            problem is None
            and out is not None
            and (not isinstance(out, np.ndarray) or out.shape != (matrix.local_rows.nnz,) or out.dtype != self.dtype)
        ):
            problem = f"rank {rank}: out must be a {self.dtype} array of shape ({matrix.local_rows.nnz},), one value per entry"
        agree_on_error(matrix.comm, problem)
        x = np.ascontiguousarray(x_local, dtype=self.dtype)
        y = np.ascontiguousarray(y_local, dtype=self.dtype)
        return x, y, np.empty(matrix.local_rows.nnz, self.dtype) if out is None else out

    @staticmethod
    def _wait(requests: list) -> list[int]:
        """Not collective. Complete ``requests``; the bytes each received, from its status."""
        statuses = [MPI.Status() for _ in requests]
        MPI.Request.Waitall(requests, statuses)
        return [status.Get_count(MPI.BYTE) for status in statuses]

    def explain(self) -> str:
        """Not collective. This rank's blocks: the way of each, its rows, columns and entries, and the bytes of
        either way (``plan.sddmm``'s formula)."""
        itemsize = self.dtype.itemsize
        lines = [f"SDDMM plan on rank {self.matrix.comm.Get_rank()}: strategy {self.strategy}, d = {self.d}, {self.dtype}"]
        lines.append(f"  own columns: {self.diagonal.size} entries, no bytes")
        for block in self.blocks:
            column, row = way_bytes(block.rows.size, block.cols.size, block.entries.size, self.d, itemsize)
            lines.append(
                f"  from rank {block.peer}: {block.way:6s} {block.rows.size} rows, {block.cols.size} columns, "
                f"{block.entries.size} entries; column {column} B, row {row} B"
            )
        lines.append(f"  every rank together: {self.planned_bytes} bytes per run")
        return "\n".join(lines)

    def close(self) -> None:
        """Collective. Free the plan's communicator (a second call does nothing)."""
        if not self._closed:
            self._closed = True
            self._comm.Free()

    def __enter__(self) -> SddmmPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@collective_errors
def plan_sddmm(matrix: DistributedMatrix, d: int, dtype=np.float64, strategy: str = "auto") -> SddmmPlan:
    """Collective. A reusable plan of ``S = A ∘ (X Yᵀ)`` for ``matrix`` at width ``d`` (:class:`SddmmPlan`):
    ``column`` fetches each off-diagonal block's Y rows, ``row`` sends its X rows out and its values back, ``auto``
    takes the way of fewer bytes per block (:mod:`sparsewire.plan.sddmm`). Every rank must give the same
    arguments."""
    problem = mpi_messages_problem(matrix.comm, "SDDMM")
    if problem:
        pass
    elif strategy not in SDDMM_STRATEGIES:
        problem = f"unknown SDDMM strategy {strategy!r}; choose one of {', '.join(SDDMM_STRATEGIES)}"
    elif not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 1:
        problem = f"d, the width of X and Y, must be a positive integer (got {d!r})"
    elif np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        problem = f"dtype {np.dtype(dtype)} is not supported; use numpy.float32 or numpy.float64"
    agree_on_error(matrix.comm, problem)
    agree_on_values(
        matrix.comm, {"d": int(d), "dtype": np.dtype(dtype).name, "strategy": strategy}, "give every rank the same arguments"
    )
    return SddmmPlan(matrix, d, dtype, strategy)
