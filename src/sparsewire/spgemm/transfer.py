"""Point-to-point transfer of packed sparse row sets (:mod:`sparsewire.spgemm.local`'s messages),
with the bytes counted from what MPI delivered.

A message goes as three sends on one tag: its header (listed rows, entries: 2 x int64), its
integer array and its values. The receiver posts the header receive first; once the header has
arrived it knows the sizes and posts the two payload receives with exactly that room (a sender
that sent more would make MPI report a truncation error, not a silent overrun). Every completed
receive adds its status's byte count (``MPI_Get_count`` in bytes) to :attr:`bytes_received`, so
the figure comes from MPI, independent of the predictions the algorithms make from counts.

With a :class:`MessageCoding` whose ``links`` code a message's link, its integer array travels coded
(:mod:`~sparsewire.spgemm.index_coding`: delta plus bit-packing, lossless): the header carries its coded
bytes as a third int64, and the receiver decodes it bit for bit. ``links`` is True (every message), False,
or the ranks of the plan's communicator whose messages to and from this rank are coded (``compress="auto"``:
the links where coding pays; both ends of a link hold the same decision, so a receiver knows from the source
whether to expect a coded message). With ``values="bf16"`` the values of those messages travel as
:mod:`sparsewire.wire.codecs`' bf16 message of one row (each entry within ``max(2^-8 |x|, 2^-134)``, NaN and
Inf kept; a message holding a value that would overflow bf16 goes whole); the receiver posts room for the
largest such message and decodes into the values' place.
:attr:`bytes_received` stays what MPI counted on the wire; :attr:`payload_bytes_received` is what the same
messages take uncoded (a 16-byte header, the decoded integers, the values), the figure the predictions are
made in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from sparsewire.spgemm.index_coding import decode_indices, encode_indices

__all__ = ["SparseTransfer", "Incoming", "MessageCoding", "UNCODED"]

_HEADER = 0
_INTS = 1
_VALUES = 2


@dataclass(frozen=True)
class MessageCoding:
    """What a plan's SpGEMM messages code. ``links``: the links whose messages carry coded integers (True: every
    link; a frozenset: the ranks of the plan's communicator whose links to this rank do); ``values``: ``none``
    or ``bf16``, the values of those same messages (float32 or float64 values only)."""

    links: bool | frozenset[int] = False
    values: str = "none"

    def __post_init__(self) -> None:
        if self.values not in ("none", "bf16"):
            raise ValueError(f"SpGEMM messages code their values as none or bf16 (got {self.values!r})")


#: Nothing coded: every message as it is.
UNCODED = MessageCoding()


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
    coded: np.ndarray | None = None  # the coded integers
    coded_values: np.ndarray | None = None  # the values' bf16 message
    is_coded: bool = False

    @property
    def listed(self) -> int:
        return int(self.header[0])


class SparseTransfer:
    """Not collective by itself: the sends and receives of one multiply, matched by the callers.

    ``itype`` and ``dtype``: the integer and value types of the messages (both sides agree, as
    they follow from the shapes and the semiring); ``coding``: what the messages of which links code
    (:class:`MessageCoding`); ``comm``: the plan's communicator, whose ranks a set of links names."""

    def __init__(self, itype: np.dtype, dtype: np.dtype, coding: MessageCoding = UNCODED, comm: MPI.Comm | None = None) -> None:
        self.itype, self.dtype, self.comm = np.dtype(itype), np.dtype(dtype), comm
        self.code_indices = coding.links if isinstance(coding.links, frozenset) else bool(coding.links)
        self.value_codec = coding.values
        if isinstance(coding.links, frozenset) and comm is None:
            raise ValueError("coding some links needs the plan's communicator (comm), whose ranks the set names")
        if self.value_codec != "none" and self.dtype not in (np.float32, np.float64):
            raise ValueError(f"bf16 codes float32 or float64 values, not {self.dtype}")
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
        value_bytes = np.ascontiguousarray(values).view(np.uint8)
        if self.coded_with(comm, destination):
            ints = encode_indices(ints, listed)
            header = np.array([listed, values.size, ints.size], np.int64)
            if self.value_codec != "none":
                value_bytes = self._encode_values(values)
        else:
            header = np.array([listed, values.size], np.int64)
        self._keep_alive.append((header, ints, value_bytes, message))  # the buffers must outlive the requests
        base = 3 * tag
        self.send_requests += [
            comm.Isend([header, MPI.BYTE], destination, base + _HEADER),
            comm.Isend([ints.view(np.uint8), MPI.BYTE], destination, base + _INTS),
            comm.Isend([value_bytes, MPI.BYTE], destination, base + _VALUES),
        ]

    def _encode_values(self, values: np.ndarray) -> np.ndarray:
        """The values as one row of a codec message (:func:`sparsewire.wire.codecs.encode`)."""
        from sparsewire.wire import codecs

        row = np.ascontiguousarray(values, self.dtype).reshape(1, -1)
        wire = np.empty(codecs.max_message_bytes(self.value_codec, 1, row.shape[1], self.dtype.itemsize), np.uint8)
        return wire[: codecs.encode(self.value_codec, row, wire)]

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
        value_room = incoming.values.view(np.uint8)
        if incoming.is_coded and self.value_codec != "none":
            from sparsewire.wire import codecs

            size = codecs.max_message_bytes(self.value_codec, 1, entries, self.dtype.itemsize)
            incoming.coded_values = value_room = np.empty(size, np.uint8)
        base = 3 * incoming.tag
        incoming.requests = [
            incoming.comm.Irecv([integers, MPI.BYTE], incoming.source, base + _INTS),
            incoming.comm.Irecv([value_room, MPI.BYTE], incoming.source, base + _VALUES),
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
            if incoming.coded_values is not None:
                from sparsewire.wire import codecs

                message = incoming.coded_values[: statuses[1].Get_count(MPI.BYTE)]
                codecs.decode(self.value_codec, message, incoming.values.reshape(1, entries))
                incoming.coded_values = None
            self.payload_bytes_received += incoming.ints.nbytes + incoming.values.nbytes
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
