"""Point-to-point transfer of packed sparse row sets (:mod:`sparsewire.spgemm.local`'s messages),
with the bytes counted from what MPI delivered.

A message goes as three sends on one tag: its header (listed rows, entries: 2 x int64), its
integer array and its values. The receiver posts the header receive first; once the header has
arrived it knows the sizes and posts the two payload receives with exactly that room (a sender
that sent more would make MPI report a truncation error, not a silent overrun). Every completed
receive adds its status's byte count (``MPI_Get_count`` in bytes) to :attr:`bytes_received`, so
the figure comes from MPI, independent of the predictions the algorithms make from counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

__all__ = ["SparseTransfer", "Incoming"]

_HEADER = 0
_INTS = 1
_VALUES = 2


@dataclass
class Incoming:
    """One message being received: its header first, then (after :meth:`SparseTransfer.post_payload`)
    its payload."""

    comm: MPI.Comm
    source: int
    tag: int
    header: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    header_request: MPI.Request | None = None
    requests: list = field(default_factory=list)
    ints: np.ndarray | None = None
    values: np.ndarray | None = None

    @property
    def listed(self) -> int:
        return int(self.header[0])


class SparseTransfer:
    """Not collective by itself: the sends and receives of one multiply, matched by the callers.

    ``itype`` and ``dtype``: the integer and value types of the messages (both sides agree, as
    they follow from the shapes and the semiring)."""

    def __init__(self, itype: np.dtype, dtype: np.dtype) -> None:
        self.itype, self.dtype = np.dtype(itype), np.dtype(dtype)
        self.send_requests: list[MPI.Request] = []
        self._keep_alive: list = []
        self.bytes_received = 0

    def send(self, comm: MPI.Comm, destination: int, tag: int, message: tuple[np.ndarray, np.ndarray, int]) -> None:
        """Not collective (point to point with the peers). Start sending one message (header, integers,
        values); the buffers must stay unchanged
        until :meth:`finish_sends`."""
        ints, values, listed = message
        header = np.array([listed, values.size], np.int64)
        self._keep_alive.append((header, message))  # the buffers must outlive the requests
        base = 3 * tag
        self.send_requests += [
            comm.Isend([header, MPI.BYTE], destination, base + _HEADER),
            comm.Isend([ints.view(np.uint8), MPI.BYTE], destination, base + _INTS),
            comm.Isend([np.ascontiguousarray(values).view(np.uint8), MPI.BYTE], destination, base + _VALUES),
        ]

    def post_header(self, comm: MPI.Comm, source: int, tag: int) -> Incoming:
        """Not collective (point to point with the peers). Start receiving the header of one message."""
        incoming = Incoming(comm, source, tag)
        incoming.header_request = comm.Irecv([incoming.header, MPI.BYTE], source, 3 * tag + _HEADER)
        return incoming

    def wait_header(self, incoming: Incoming) -> tuple[int, int]:
        """Not collective (point to point with the peers). Wait for one message's header; returns (listed rows, entries)."""
        if incoming.header_request is not None:
            status = MPI.Status()
            incoming.header_request.Wait(status)
            incoming.header_request = None
            self.bytes_received += status.Get_count(MPI.BYTE)
        return int(incoming.header[0]), int(incoming.header[1])

    def post_payload(self, incoming: Incoming, values: np.ndarray | None = None) -> None:
        """Not collective (point to point with the peers). Wait for the header, then start the payload
        receives with exactly the announced room;
        ``values``: where the values go (default: a new array)."""
        listed, entries = self.wait_header(incoming)
        incoming.ints = np.empty(2 * listed + entries, self.itype)
        incoming.values = np.empty(entries, self.dtype) if values is None else values
        base = 3 * incoming.tag
        incoming.requests = [
            incoming.comm.Irecv([incoming.ints.view(np.uint8), MPI.BYTE], incoming.source, base + _INTS),
            incoming.comm.Irecv([incoming.values.view(np.uint8), MPI.BYTE], incoming.source, base + _VALUES),
        ]

    def wait(self, incoming: Incoming) -> tuple[np.ndarray, np.ndarray, int]:
        """Not collective (point to point with the peers). Wait for one message's payload; returns it as
        (integer array, values, listed rows)."""
        statuses = [MPI.Status(), MPI.Status()]
        MPI.Request.Waitall(incoming.requests, statuses)
        self.bytes_received += sum(status.Get_count(MPI.BYTE) for status in statuses)
        return incoming.ints, incoming.values, incoming.listed

    def finish_sends(self) -> None:
        """Not collective (point to point with the peers). Wait until every started send has completed (its
        buffers may then change)."""
        MPI.Request.Waitall(self.send_requests)
        self.send_requests.clear()
        self._keep_alive.clear()
