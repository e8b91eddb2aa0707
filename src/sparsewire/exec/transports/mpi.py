"""The MPI transport of whole messages (and of their pieces): persistent point-to-point requests
(:class:`MpiTransport`); the partitioned mode's are in :mod:`~sparsewire.exec.transports.mpi_partitioned`, with the
registry's ``select``.

Every request is made once, on the executor's own communicator (a duplicate, so its tags never
match the caller's messages), over the buffers' slices, and started again each multiply. Bytes are
counted from the receive statuses (``MPI_Get_count``), minus partition padding.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import mpi_datatype, wait_all, wait_any
from sparsewire.exec.buffers import Buffers, ExchangeBuffers
from sparsewire.exec.transports.base import ByteLedger, PieceTransport
from sparsewire.plan.modes import Mode
from sparsewire.wire import codecs
from sparsewire.wire.paths import WirePath

__all__ = ["MpiTransport"]

_TAG = 4242  # + exchange index: exchanges of one step between the same pair must not match each other
_COUNTED_BY = "MPI receive statuses (MPI_Get_count)"


class _Coded:
    """A message through the payload codec (:mod:`sparsewire.wire.codecs`): its rows in the buffers and its
    wire buffer (bytes, large enough for every row at full width)."""

    def __init__(self, codec: str, flat: np.ndarray, start: int, count: int, k: int) -> None:
        self.codec, self.rows = codec, flat[start : start + count].reshape(count // k, k)
        self.wire = np.zeros(codecs.max_message_bytes(codec, count // k, k, flat.itemsize), np.uint8)


def _count(ledger: ByteLedger, ex: ExchangeBuffers, message: int, status, datatype, coded: _Coded | None, tracer) -> None:
    """Count one received message from its status; a coded one decoded first (its payload from its header; its
    decoding a ``decode`` span of ``tracer`` while one records)."""
    if coded is None:
        ledger.record(ex, message, status.Get_count(datatype))
        return
    size = status.Get_count(MPI.BYTE)
    started = tracer.clock() if tracer is not None and tracer.recording else None
    rows, k = codecs.decode(coded.codec, coded.wire[:size], coded.rows)
    if started is not None:
        tracer.span("decode", started, tracer.clock(), bytes=size)
    ledger.record(ex, message, rows * k, wire_bytes=size)


def _messages(offsets: np.ndarray, elements: tuple[int, ...], k: int):
    """(start element, element count) of every message."""
    return zip((offsets[:-1] * k).tolist(), elements)


def _pieces(make, flat: np.ndarray, bounds, whole: list, ranks, tag: int, k: int, datatype) -> list[list[tuple]]:
    """Per message its requests with their rows, ``[(request, first row, end row), ...]``: where ``bounds`` (the
    buffers' ``recv_pieces`` or ``send_pieces``) cut it, one persistent request (``make``: ``Recv_init`` or
    ``Send_init``) per piece over its rows of ``flat``; else its whole-message request ``whole[m]`` (which may be
    coded or staged)."""
    if bounds is None:
        return [[(request, None, None)] for request in whole]
    requests = []
    for message, (rows, rank) in enumerate(zip(bounds, ranks)):
        if rows.size == 2:
            requests.append([(whole[message], int(rows[0]), int(rows[1]))])
            continue
        whole[message].Free()
        requests.append(
            [
                (make([flat[start * k : stop * k], datatype], rank, tag), start, stop)
                for start, stop in zip(rows[:-1].tolist(), rows[1:].tolist())
            ]
        )
    return requests


def _bind(flat: np.ndarray, stage: np.ndarray | None, device, start: int, count: int, staged: bool):
    """(the host memory MPI moves one message in, the backend's slice it is copied to or from when
    the message is staged, else None)."""
    if staged:
        return stage[start : start + count], device[start : start + count]
    return flat[start : start + count], None


class MpiTransport(PieceTransport):
    """One persistent ``MPI_Send_init``/``MPI_Recv_init`` request per message (per piece where the buffers cut
    it, :mod:`~sparsewire.exec.message_rows`: the pieces of a message share its tag and match in order); a staged message
    (:mod:`sparsewire.wire.paths`) is copied into host memory before its send starts and
    out of it once its receive completes; an encoded message is coded into its wire buffer and sent
    by ``MPI_Isend`` (its size varies), received by a persistent request into a wire buffer of its
    largest size and decoded into the receive buffer on completion. Before MPI reads or writes any
    memory of an exchange the backend is synchronised (queued device kernels and copies done;
    nothing on the CPU)."""

    name = "mpi"
    modes = frozenset({Mode.BULK, Mode.OVERLAP, Mode.PIPELINED, Mode.EARLY})
    counted_by = _COUNTED_BY
    stages_messages = True

    def __init__(self, comm: MPI.Comm, buffers: Buffers, ledger: ByteLedger) -> None:
        super().__init__(buffers, ledger)
        self._type = mpi_datatype(buffers.dtype)
        k = buffers.k
        self._recv: list[list[MPI.Prequest]] = []
        self._send: list[list[list[MPI.Prequest | None]]] = []  # per exchange, per message, per piece
        self._recv_owner: list[list[tuple[int, int, int]]] = []  # per exchange, per receive: (message, first row, end row)
        # Staged messages (WirePath.STAGED, exec/wire.py) are bound to host memory and copied around MPI.
        self._copy_out: list[list[tuple[object, np.ndarray] | None]] = []
        self._copy_in: list[list[tuple[np.ndarray, object] | None]] = []
        # Encoded messages (WirePath.ENCODED): per exchange, per message its _Coded (None: not encoded).
        self._encode: list[list[_Coded | None]] = []
        self._decode: list[list[_Coded | None]] = []
        self._comm, self._coded_sends = comm, [[] for _ in buffers.exchanges]  # this multiply's MPI_Isend requests
        codec = buffers.needs.codec
        self._noise = np.random.default_rng([comm.Get_rank(), 43])  # int8's stochastic rounding
        self.codec_tracer = None  # while tracing: coding and decoding are spans of their own (encode, decode)
        for ex in buffers.exchanges:
            tag = _TAG + ex.index
            recv_messages = list(_messages(ex.recv_offsets, ex.recv_elements, k))
            send_messages = list(_messages(ex.send_offsets, ex.send_elements, k))
            recv_staged, send_staged = set(ex.recv_staged), set(ex.send_staged)
            recv_memory = [
                _bind(ex.recv_flat, ex.recv_stage, ex.recv_device, start, count, m in recv_staged)
                for m, (start, count) in enumerate(recv_messages)
            ]
            send_memory = [
                _bind(ex.send_flat, ex.send_stage, ex.send_device, start, count, m in send_staged)
                for m, (start, count) in enumerate(send_messages)
            ]
            coded_recv = [
                _Coded(codec, ex.recv_flat, start, count, k) if path is WirePath.ENCODED else None
                for path, (start, count) in zip(ex.recv_paths, recv_messages)
            ]
            coded_send = [
                _Coded(codec, ex.send_flat, start, count, k) if path is WirePath.ENCODED else None
                for path, (start, count) in zip(ex.send_paths, send_messages)
            ]
            recv_requests = [
                comm.Recv_init([memory, self._type] if coded is None else [coded.wire, MPI.BYTE], source, tag)
                for source, (memory, _), coded in zip(ex.recv_ranks, recv_memory, coded_recv)
            ]
            send_requests = [
                comm.Send_init([memory, self._type], destination, tag) if coded is None else None
                for destination, (memory, _), coded in zip(ex.send_ranks, send_memory, coded_send)
            ]
            # Cut messages (ExchangeBuffers.recv_pieces/send_pieces): a request per piece, in order.
            recv_pieces = _pieces(comm.Recv_init, ex.recv_flat, ex.recv_pieces, recv_requests, ex.recv_ranks, tag, k, self._type)
            send_pieces = _pieces(comm.Send_init, ex.send_flat, ex.send_pieces, send_requests, ex.send_ranks, tag, k, self._type)
            self._recv.append([request for pieces in recv_pieces for request, _, _ in pieces])
            self._recv_owner.append([(m, start, stop) for m, pieces in enumerate(recv_pieces) for _, start, stop in pieces])
            self._send.append([[request for request, _, _ in pieces] for pieces in send_pieces])
            self._encode.append(coded_send)
            self._decode.append(coded_recv)
            self._copy_in.append([None if device is None else (memory, device) for memory, device in recv_memory])
            self._copy_out.append([None if device is None else (device, memory) for memory, device in send_memory])
        self._persistent_send = [[r for pieces in requests for r in pieces if r is not None] for requests in self._send]
        self._encoded_sends = [[m for m, coded in enumerate(messages) if coded is not None] for messages in self._encode]
        self._backend = buffers.kernels
        self._statuses = [[MPI.Status() for _ in requests] for requests in self._recv]
        # Every receive in one list for MPI_Waitany, with its (exchange, message).
        self._all_recv = [request for requests in self._recv for request in requests]
        self._owner = [(index, owner[0]) for index, owners in enumerate(self._recv_owner) for owner in owners]
        self._any_status = MPI.Status()
        # Cut messages: per exchange, per message, the pieces not yet in and the elements they brought.
        self._pieces_left = [np.zeros(len(ex.recv_ranks), np.int64) for ex in buffers.exchanges]
        self._pieces_per_message = [
            np.bincount([m for m, _, _ in owners], minlength=len(ex.recv_ranks))
            for ex, owners in zip(buffers.exchanges, self._recv_owner)
        ]
        self._elements_in = [np.zeros(len(ex.recv_ranks), np.int64) for ex in buffers.exchanges]

    def post_receives(self, ex: ExchangeBuffers) -> None:
        if self._recv[ex.index]:
            self._backend.synchronize()  # no kernel or copy still reads the memory MPI will write
            MPI.Prequest.Startall(self._recv[ex.index])
        if ex.recv_pieces is not None:
            self._pieces_left[ex.index][:] = self._pieces_per_message[ex.index]
            self._elements_in[ex.index][:] = 0

    def start_sends(self, ex: ExchangeBuffers) -> None:
        for message in ex.send_staged:
            self._backend.copy_out(*self._copy_out[ex.index][message])
        if self._send[ex.index]:
            self._backend.synchronize()  # the packed rows (and their staged copies) are in memory
            if self._persistent_send[ex.index]:
                MPI.Prequest.Startall(self._persistent_send[ex.index])
        for message in self._encoded_sends[ex.index]:
            self._send_encoded(ex, message)

    def _send_encoded(self, ex: ExchangeBuffers, message: int) -> None:
        coded, tracer = self._encode[ex.index][message], self.codec_tracer
        started = tracer.clock() if tracer is not None and tracer.recording else None
        size = codecs.encode(coded.codec, coded.rows, coded.wire, self._noise)
        if started is not None:
            tracer.span("encode", started, tracer.clock(), bytes=int(size))
        request = self._comm.Isend([coded.wire[:size], MPI.BYTE], ex.send_ranks[message], _TAG + ex.index)
        self._coded_sends[ex.index].append(request)

    def start_send(self, ex: ExchangeBuffers, message: int) -> None:
        staged = self._copy_out[ex.index][message]
        if staged is not None:
            self._backend.copy_out(*staged)
        self._backend.synchronize()
        if self._encode[ex.index][message] is not None:
            self._send_encoded(ex, message)
        else:
            MPI.Prequest.Startall(self._send[ex.index][message])

    def start_piece(self, ex: ExchangeBuffers, message: int, piece: int) -> None:
        self._send[ex.index][message][piece].Start()

    def wait_piece(self, ex: ExchangeBuffers) -> tuple[int, int, int]:
        position = wait_any(self._recv[ex.index], self._any_status, yielding=self.yield_while_waiting)
        if position == MPI.UNDEFINED:
            raise RuntimeError("no receive of the exchange is active but pieces are missing; the executor's schedule is broken")
        self._piece_in(ex, position, self._any_status)
        return self._recv_owner[ex.index][position]

    def _piece_in(self, ex: ExchangeBuffers, position: int, status: MPI.Status) -> None:
        """Receive ``position`` of a cut exchange completed: its message is counted once its last piece is in."""
        message = self._recv_owner[ex.index][position][0]
        elements, left = self._elements_in[ex.index], self._pieces_left[ex.index]
        elements[message] += status.Get_count(self._type)
        left[message] -= 1
        if left[message] == 0:
            self.ledger.record(ex, message, int(elements[message]))

    def progress(self) -> None:
        # A probe runs MPICH's progress engine and completes nothing (the receive statuses stay for the count).
        self._comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)

    def wait_receives(self, ex: ExchangeBuffers) -> None:
        requests, statuses = self._recv[ex.index], self._statuses[ex.index]
        if requests and ex.recv_pieces is not None:
            wait_all(requests, statuses, yielding=self.yield_while_waiting)
            for position, status in enumerate(statuses):
                self._piece_in(ex, position, status)
        elif requests:
            wait_all(requests, statuses, yielding=self.yield_while_waiting)
            for message, (status, coded) in enumerate(zip(statuses, self._decode[ex.index])):
                _count(self.ledger, ex, message, status, self._type, coded, self.codec_tracer)
        for message in ex.recv_staged:
            self._backend.copy_in(*self._copy_in[ex.index][message])

    def wait_any(self) -> tuple[int, int]:
        position = wait_any(self._all_recv, self._any_status, yielding=self.yield_while_waiting)
        if position == MPI.UNDEFINED:
            raise RuntimeError("no receive is active but messages are missing; the executor's schedule is broken")
        index, message = self._owner[position]
        coded = self._decode[index][message]
        _count(self.ledger, self.buffers.exchanges[index], message, self._any_status, self._type, coded, self.codec_tracer)
        staged = self._copy_in[index][message]
        if staged is not None:
            self._backend.copy_in(*staged)
        return index, message

    def wait_sends(self, ex: ExchangeBuffers) -> None:
        wait_all(self._persistent_send[ex.index], yielding=self.yield_while_waiting)
        coded = self._coded_sends[ex.index]
        if coded:
            wait_all(coded, yielding=self.yield_while_waiting)
            coded.clear()

    def incomplete_receives(self, ex: ExchangeBuffers) -> list[int] | None:
        # MPI_Request_get_status neither completes nor frees a request (MPI_THREAD_MULTIPLE here)
        owners = self._recv_owner[ex.index]
        return sorted({owners[position][0] for position, request in enumerate(self._recv[ex.index]) if not request.Get_status()})

    def free(self) -> None:
        """Not collective (frees this rank's requests); see :mod:`sparsewire.exec.transports.base`."""
        for request in self._all_recv + [r for requests in self._persistent_send for r in requests]:
            request.Free()
        self._recv, self._send, self._all_recv, self._persistent_send = [], [], [], []
