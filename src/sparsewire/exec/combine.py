"""How received rows become C: streaming (added as each exchange, message or partition completes)
or ordered (one product after everything arrived, every C row summed in a fixed order).

A schedule calls the combine at five points (Not collective: local arithmetic only) and never asks
which one it has:

* ``diagonal(b, out, progress)`` / ``diagonal_rows(b, out, thread)``: ``C_p = A(p, p) B_p`` (all rows, in
  pieces with a call to ``progress`` after each where messages are in flight, or thread t's rows
  ``row_bounds[t]:row_bounds[t+1]``);
* ``exchange_arrived(ex, out)``: every message of ``ex`` is in its receive buffer;
* ``message_arrived(ex, message, out)``: one message is;
* ``rows_arrived(ex, start, stop, out)``: rows ``[start, stop)`` of the receive buffer are (one piece of a
  message over the slower link, :mod:`~sparsewire.exec.message_rows`);
* ``partition_arrived(ex, thread, start, stop, out)``: elements ``[start, stop)`` of the flattened
  receive buffer are (one partition, applied to thread t's rows of C);
* ``finish(b, out)``: every message has arrived.

:class:`OrderedCombine` does its work in ``finish``: ``C_p = merged @ [B_p ; receive buffers]``,
each row's entries ordered by global column (B rows) and then by buffer position (partial C rows).
So C is bitwise identical across runs, modes, transports and thread counts, and for the
column-based strategies across P too (the serial CSR product in ascending column order).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sparsewire.exec.buffers import Buffers, ExchangeBuffers
from sparsewire.wire.paths import device_type

__all__ = ["StreamingCombine", "OrderedCombine", "progress_piece_bounds", "multiply_in_pieces", "PROGRESS_EVERY"]


#: Multiply-adds (nonzeros x k) of the diagonal block between two calls that let the transport move the messages in
#: flight (:meth:`~sparsewire.exec.transports.base.Transport.progress`): well under a millisecond at the kernel's rate.
PROGRESS_EVERY = 1 << 20


def progress_piece_bounds(indptr: np.ndarray, k: int) -> list[int] | None:
    """Not collective. Row bounds of pieces of about :data:`PROGRESS_EVERY` multiply-adds of a CSR product with
    row pointers ``indptr`` and a k-column B (a piece ends at the first row whose end reaches the next multiple),
    or None where the product is one piece anyway."""
    work = np.asarray(indptr, np.int64) * k
    if work[-1] <= PROGRESS_EVERY:
        return None
    rows = np.searchsorted(work, np.arange(PROGRESS_EVERY, work[-1], PROGRESS_EVERY))
    return sorted({0, *rows.tolist(), len(work) - 1})


def multiply_in_pieces(kernels, operand, b: np.ndarray, out: np.ndarray, bounds: list[int], progress: Callable[[], None]) -> None:
    """Not collective. ``out = operand @ b`` row piece by row piece (``bounds``, :func:`progress_piece_bounds`) with
    ``kernels.multiply_rows``, calling ``progress`` after each piece."""
    for start, stop in zip(bounds[:-1], bounds[1:]):
        kernels.multiply_rows(operand, b, out, start, stop)
        progress()


def _progress_pieces(buffers: Buffers) -> list[int] | None:
    """Row bounds of the diagonal block's pieces (:func:`progress_piece_bounds`), or None where the product runs on
    several threads or off the CPU, or is one piece anyway."""
    if len(buffers.row_bounds) != 2 or device_type(str(buffers.kernels.device)) != "cpu":
        return None
    return progress_piece_bounds(buffers.plan.diagonal.indptr, buffers.k)


class StreamingCombine:
    """Adds received rows to C as they complete (the buffers hold the unpack operands the
    schedule applies: CSR per exchange, or CSC per message and partition)."""

    def __init__(self, buffers: Buffers, in_pieces: bool = True) -> None:
        self.buffers, self.kernels = buffers, buffers.kernels
        self._pieces = _progress_pieces(buffers) if in_pieces else None

    def diagonal(self, b: np.ndarray, out: np.ndarray, progress: Callable[[], None] | None = None) -> None:
        """Not collective. With ``progress`` (messages in flight) and ``in_pieces``, one thread's product on the CPU
        is made in pieces of about :data:`PROGRESS_EVERY` multiply-adds with a call to ``progress`` after each."""
        pieces = self._pieces
        if progress is None or pieces is None:
            self.kernels.multiply(self.buffers.diagonal, b, out)
            return
        multiply_in_pieces(self.kernels, self.buffers.diagonal, b, out, pieces, progress)

    def diagonal_rows(self, b: np.ndarray, out: np.ndarray, thread: int) -> None:
        """Not collective."""
        bounds = self.buffers.row_bounds
        self.kernels.multiply_rows(self.buffers.diagonal, b, out, int(bounds[thread]), int(bounds[thread + 1]))

    def exchange_arrived(self, ex: ExchangeBuffers, out: np.ndarray) -> None:
        """Not collective."""
        self.kernels.multiply(ex.unpack, ex.receive_buffer, out, accumulate=True)

    def message_arrived(self, ex: ExchangeBuffers, message: int, out: np.ndarray) -> None:
        """Not collective."""
        self.rows_arrived(ex, int(ex.recv_offsets[message]), int(ex.recv_offsets[message + 1]), out)

    def rows_arrived(self, ex: ExchangeBuffers, start: int, stop: int, out: np.ndarray) -> None:
        """Not collective."""
        self.kernels.apply_columns(ex.unpack_columns, ex.receive_buffer, out, start, stop)

    def partition_arrived(self, ex: ExchangeBuffers, thread: int, start: int, stop: int, out: np.ndarray) -> None:
        """Not collective."""
        self.kernels.apply_elements(ex.unpack_columns, thread, ex.recv_flat, self.buffers.k, out, start, stop)

    def finish(self, b: np.ndarray, out: np.ndarray) -> None:
        """Not collective. Nothing left: every row was added as it arrived."""


class OrderedCombine:
    """Computes C once every message has arrived, in the fixed order of the ``merged`` operand
    (the buffers' stack starts with a copy of B_p)."""

    def __init__(self, buffers: Buffers) -> None:
        self.buffers, self.kernels = buffers, buffers.kernels
        self._head = buffers.plan.local_shape[1]

    def diagonal(self, b: np.ndarray, out: np.ndarray, progress: Callable[[], None] | None = None) -> None:
        """Not collective. Part of :meth:`finish`."""

    def diagonal_rows(self, b: np.ndarray, out: np.ndarray, thread: int) -> None:
        """Not collective. Part of :meth:`finish`."""

    def exchange_arrived(self, ex: ExchangeBuffers, out: np.ndarray) -> None:
        """Not collective. Kept in its receive buffer for :meth:`finish`."""

    def message_arrived(self, ex: ExchangeBuffers, message: int, out: np.ndarray) -> None:
        """Not collective. Kept in its receive buffer for :meth:`finish`."""

    def rows_arrived(self, ex: ExchangeBuffers, start: int, stop: int, out: np.ndarray) -> None:
        """Not collective. Kept in its receive buffer for :meth:`finish`."""

    def partition_arrived(self, ex: ExchangeBuffers, thread: int, start: int, stop: int, out: np.ndarray) -> None:
        """Not collective. Kept in its receive buffer for :meth:`finish`."""

    def finish(self, b: np.ndarray, out: np.ndarray) -> None:
        """Not collective."""
        self.buffers.stack[: self._head] = b
        self.kernels.multiply(self.buffers.merged, self.buffers.stack, out)
