"""Packing: ``send_buffer_e = send_matrix_e @ [B_p ; receive buffer of e's input]``, as an object
the schedules call (so one layer, a trace or a codec, can wrap it as it wraps the transport and the
combine).

A :class:`Packer` is made once per executor from its buffers. A send buffer is packed by a gather
when every sent row is one B row (``pack_gather``), else by a CSR product over B_p (``pack_b``)
plus one over the input exchange's receive buffer (``pack_input``: forwarded B rows and summed
partial C rows).
"""

from __future__ import annotations

import numpy as np

from sparsewire.exec.buffers import Buffers, ExchangeBuffers

__all__ = ["Packer"]


class Packer:
    """Not collective. Packs an executor's send buffers (see the module docstring)."""

    def __init__(self, buffers: Buffers) -> None:
        self.buffers, self.kernels = buffers, buffers.kernels

    def exchange(self, ex: ExchangeBuffers, b: np.ndarray) -> None:
        """Not collective. Every message of ``ex``: ``send_buffer = send_matrix @ [b ; input's receive buffer]``."""
        kernels = self.kernels
        if ex.pack_gather is not None:
            kernels.gather(ex.pack_gather, b, ex.send_buffer)
            return
        kernels.multiply(ex.pack_b, b, ex.send_buffer)
        if ex.pack_input is not None:
            kernels.multiply(ex.pack_input, self.buffers.exchanges[ex.input].receive_buffer, ex.send_buffer, accumulate=True)

    def message(self, ex: ExchangeBuffers, message: int, b: np.ndarray) -> None:
        """Not collective. The rows of one destination only (a relay, or a message over the slower link sent
        first: ``ex.send_order``), on the calling thread."""
        self.rows(ex, b, int(ex.send_offsets[message]), int(ex.send_offsets[message + 1]))

    def rows(self, ex: ExchangeBuffers, b: np.ndarray, start: int, stop: int) -> None:
        """Not collective. Rows ``start:stop`` of ``ex``'s send buffer (one message, or one piece of it:
        ``ex.send_pieces``), on the calling thread."""
        kernels = self.kernels
        if ex.pack_gather is not None:
            kernels.gather_rows(ex.pack_gather, b, ex.send_buffer, start, stop)
            return
        kernels.multiply_rows(ex.pack_b, b, ex.send_buffer, start, stop)
        if ex.pack_input is not None:
            source = self.buffers.exchanges[ex.input].receive_buffer
            kernels.multiply_rows(ex.pack_input, source, ex.send_buffer, start, stop, accumulate=True)

    def elements(self, ex: ExchangeBuffers, b: np.ndarray, start: int, stop: int) -> None:
        """Not collective (one thread's partition). Elements ``start:stop`` of ``ex``'s flat send buffer
        (the partitioned mode: each thread packs its own partitions)."""
        if ex.pack_gather is not None:
            self.kernels.gather_elements(ex.pack_gather, b, ex.send_flat, start, stop)
            return
        self.kernels.multiply_elements(ex.pack_b, b, ex.send_flat, start, stop, False)
        if ex.pack_input is not None:
            source = self.buffers.exchanges[ex.input].receive_buffer
            self.kernels.multiply_elements(ex.pack_input, source, ex.send_flat, start, stop, True)
