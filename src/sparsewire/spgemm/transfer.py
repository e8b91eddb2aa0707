"""Point-to-point transfer of packed sparse row sets (:mod:`sparsewire.spgemm.local`'s messages),
with the bytes counted from what MPI delivered.

A message goes as three sends on one tag: its header (listed rows, entries: 2 x int64), its
integer array and its values. The receiver posts the header receive first; once the header has
arrived it knows the sizes and posts the two payload receives with exactly that room (a sender
that sent more would make MPI report a truncation error, not a silent overrun). Every completed
receive adds its status's byte count (``MPI_Get_count`` in bytes) to :attr:`bytes_received`, so
the figure comes from MPI, independent of the predictions the algorithms make from counts.

With ``code_indices`` the integer array travels coded (:mod:`~sparsewire.spgemm.index_coding`: delta plus
bit-packing, lossless): the header carries its coded bytes as a third int64, and the receiver decodes it
bit for bit. ``code_indices`` is True (every message), False, or the ranks of the plan's communicator whose
messages to and from this rank are coded (``compress="auto"``: the links where coding pays; both ends of a
link hold the same decision, so a receiver knows from the source whether to expect a coded message).
:attr:`bytes_received` stays what MPI counted on the wire; :attr:`payload_bytes_received` is what the same
messages take uncoded (a 16-byte header, the decoded integers, the values), the figure the predictions are
made in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from sparsewire.spgemm.index_coding import decode_indices, encode_indices

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
    coded: np.ndarray | None = None  # the coded integers (code_indices)
    is_coded: bool = False

    @property
    def listed(self) -> int:
        return int(self.header[0])


class SparseTransfer:
    """Not collective by itself: the sends and receives of one multiply, matched by the callers.

    ``itype`` and ``dtype``: the integer and value types of the messages (both sides agree, as
    they follow from the shapes and the semiring); ``code_indices``: the integers travel coded, on every
    link (True) or on those to and from the ranks of ``comm`` (the plan's communicator) in the set."""

    def __init__(
        self, itype: np.dtype, dtype: np.dtype, code_indices: bool | frozenset[int] = False, comm: MPI.Comm | None = None
    ) -> None:
        self.itype, self.dtype, self.comm = np.dtype(itype), np.dtype(dtype), comm
        self.code_indices = code_indices if isinstance(code_indices, frozenset) else bool(code_indices)
        if isinstance(code_indices, frozenset) and comm is None:
            raise ValueError("coding some links needs the plan's communicator (comm), whose ranks the set names")
        self._ranks: dict[int, list[int]] = {}
        self.send_requests: list[MPI.Request] = []
        self._keep_alive: list = []
        self.bytes_received = self.payload_bytes_received = 0
        # The integer arrays alone: as MPI counted them on the wire, and decoded (equal without code_indices).
        self.index_bytes_received = self.index_payload_bytes_received = 0

    def plan_rank(self, comm: MPI.Comm, peer: int) -> int:
        """Not collective. ``peer`` of ``comm`` (the plan's communicator or one split from it, as SUMMA's grid
        rows and columns) as a rank of the plan's communicator."""
        if comm is self.comm or self.comm is None:
            return peer
        ranks = self._ranks.get(id(comm))
        if ranks is None:
            ranks = MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())), self.comm.Get_group())
            self._ranks[id(comm)] = ranks
        return ranks[peer]

    def coded_with(self, comm: MPI.Comm, peer: int) -> bool:
        """Not collective. Whether the messages between this rank and ``peer`` of ``comm`` carry coded integers."""
        if isinstance(self.code_indices, frozenset):
            return self.plan_rank(comm, peer) in self.code_indices
        return self.code_indices

    def send(self, comm: MPI.Comm, destination: int, tag: int, message: tuple[np.ndarray, np.ndarray, int]) -> None:
        """Not collective (point to point with the peers). Start sending one message (header, integers,
        values); the buffers must stay unchanged
        until :meth:`finish_sends`."""
        ints, values, listed = message
        if self.coded_with(comm, destination):
            ints = encode_indices(ints, listed)
            header = np.array([listed, values.size, ints.size], np.int64)
        else:
            header = np.array([listed, values.size], np.int64)
        self._keep_alive.append((header, ints, message))  # the buffers must outlive the requests
        base = 3 * tag
        self.send_requests += [
            comm.Isend([header, MPI.BYTE], destination, base + _HEADER),
            comm.Isend([ints.view(np.uint8), MPI.BYTE], destination, base + _INTS),
            comm.Isend([np.ascontiguousarray(values).view(np.uint8), MPI.BYTE], destination, base + _VALUES),
        ]

    def post_header(self, comm: MPI.Comm, source: int, tag: int) -> Incoming:
        """Not collective (point to point with the peers). Start receiving the header of one message."""
        coded = self.coded_with(comm, source)
        incoming = Incoming(comm, source, tag, header=np.zeros(3 if coded else 2, np.int64), is_coded=coded)
        incoming.header_request = comm.Irecv([incoming.header, MPI.BYTE], source, 3 * tag + _HEADER)
        return incoming

    def wait_header(self, incoming: Incoming) -> tuple[int, int]:
        """Not collective (point to point with the peers). Wait for one message's header; returns (listed rows, entries)."""
        if incoming.header_request is not None:
            status = MPI.Status()
            incoming.header_request.Wait(status)
            incoming.header_request = None
            self.bytes_received += status.Get_count(MPI.BYTE)
            self.payload_bytes_received += 16  # (the uncoded header: listed rows, entries)
        return int(incoming.header[0]), int(incoming.header[1])

    def post_payload(self, incoming: Incoming, values: np.ndarray | None = None) -> None:
        """Not collective (point to point with the peers). Wait for the header, then start the payload
        receives with exactly the announced room;
        ``values``: where the values go (default: a new array)."""
        listed, entries = self.wait_header(incoming)
        if incoming.is_coded:
            incoming.coded = np.empty(int(incoming.header[2]), np.uint8)
            integers = incoming.coded
        else:
            incoming.ints = np.empty(2 * listed + entries, self.itype)
            integers = incoming.ints.view(np.uint8)
        incoming.values = np.empty(entries, self.dtype) if values is None else values
        base = 3 * incoming.tag
        incoming.requests = [
            incoming.comm.Irecv([integers, MPI.BYTE], incoming.source, base + _INTS),
            incoming.comm.Irecv([incoming.values.view(np.uint8), MPI.BYTE], incoming.source, base + _VALUES),
        ]

    def wait(self, incoming: Incoming) -> tuple[np.ndarray, np.ndarray, int]:
        """Not collective (point to point with the peers). Wait for one message's payload; returns it as
        (integer array, values, listed rows)."""
        statuses = [MPI.Status(), MPI.Status()]
        MPI.Request.Waitall(incoming.requests, statuses)
        self.bytes_received += sum(status.Get_count(MPI.BYTE) for status in statuses)
        self.index_bytes_received += statuses[0].Get_count(MPI.BYTE)
        if incoming.is_coded:
            listed, entries = incoming.listed, int(incoming.header[1])
            incoming.ints, incoming.coded = decode_indices(incoming.coded, listed, self.itype, entries), None
            self.payload_bytes_received += incoming.ints.nbytes + statuses[1].Get_count(MPI.BYTE)
        else:
            self.payload_bytes_received += sum(status.Get_count(MPI.BYTE) for status in statuses)
        self.index_payload_bytes_received += incoming.ints.nbytes
        return incoming.ints, incoming.values, incoming.listed

    def finish_sends(self) -> None:
        """Not collective (point to point with the peers). Wait until every started send has completed (its
        buffers may then change)."""
        MPI.Request.Waitall(self.send_requests)
        self.send_requests.clear()
        self._keep_alive.clear()
