"""MPI transports: persistent point-to-point requests, MPI-4 partitioned messages, and partitioned
messages over point-to-point requests (where MPI has no partitioned communication).

Every request is made once, on the executor's own communicator (a duplicate, so its tags never
match the caller's messages), over the buffers' slices, and started again each multiply. Bytes are
counted from the receive statuses (``MPI_Get_count``), minus partition padding.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import mpi_datatype, wait_all, wait_any
from sparsewire.errors import FallbackWarning
from sparsewire.exec.buffers import Buffers, ExchangeBuffers
from sparsewire.exec.transports.base import ByteLedger, MessageTransport, PartitionedTransport
from sparsewire.plan.modes import Mode
from sparsewire.wire import codecs
from sparsewire.wire.paths import WirePath

__all__ = ["MpiTransport", "MpiPartitionedTransport", "MpiPartitionsOverPointToPoint", "partitioned_available", "select"]

_TAG = 4242  # + exchange index: exchanges of one step between the same pair must not match each other
_PARTITION_TAG = 8000  # + exchange index * T + partition
_COUNTED_BY = "MPI receive statuses (MPI_Get_count)"


def partitioned_available(comm: MPI.Comm) -> bool:
    """Not collective. Whether the MPI library offers MPI-4 partitioned communication (``MPI_Psend_init``)."""
    # MPI-4 libraries have it (probing with MPI_PROC_NULL crashes MPICH 5.0, so ask the version).
    return hasattr(comm, "Psend_init") and MPI.Get_version() >= (4, 0)


def _wait_and_count(requests: list, statuses: list, ledger: ByteLedger, ex: ExchangeBuffers, datatype: MPI.Datatype) -> None:
    """Complete one request per received message of ``ex`` and count each from its status."""
    if requests:
        MPI.Request.Waitall(requests, statuses)
        for message, status in enumerate(statuses):
            ledger.record(ex, message, status.Get_count(datatype))


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


def _bind(flat: np.ndarray, stage: np.ndarray | None, device, start: int, count: int, staged: bool):
    """(the host memory MPI moves one message in, the backend's slice it is copied to or from when
    the message is staged, else None)."""
    if staged:
        return stage[start : start + count], device[start : start + count]
    return flat[start : start + count], None


class MpiTransport(MessageTransport):
    """One persistent ``MPI_Send_init``/``MPI_Recv_init`` request per message; a staged message
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
        self._send: list[list[MPI.Prequest]] = []
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
            self._recv.append(
                [
                    comm.Recv_init([memory, self._type] if coded is None else [coded.wire, MPI.BYTE], source, tag)
                    for source, (memory, _), coded in zip(ex.recv_ranks, recv_memory, coded_recv)
                ]
            )
            self._send.append(
                [
                    comm.Send_init([memory, self._type], destination, tag) if coded is None else None
                    for destination, (memory, _), coded in zip(ex.send_ranks, send_memory, coded_send)
                ]
            )
            self._encode.append(coded_send)
            self._decode.append(coded_recv)
            self._copy_in.append([None if device is None else (memory, device) for memory, device in recv_memory])
            self._copy_out.append([None if device is None else (device, memory) for memory, device in send_memory])
        self._persistent_send = [[request for request in requests if request is not None] for requests in self._send]
        self._encoded_sends = [[m for m, coded in enumerate(messages) if coded is not None] for messages in self._encode]
        self._backend = buffers.kernels
        self._statuses = [[MPI.Status() for _ in requests] for requests in self._recv]
        # Every receive in one list for MPI_Waitany, with its (exchange, message).
        self._all_recv = [request for requests in self._recv for request in requests]
        self._owner = [(index, message) for index, requests in enumerate(self._recv) for message in range(len(requests))]
        self._any_status = MPI.Status()

    def post_receives(self, ex: ExchangeBuffers) -> None:
        if self._recv[ex.index]:
            self._backend.synchronize()  # no kernel or copy still reads the memory MPI will write
            MPI.Prequest.Startall(self._recv[ex.index])

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
            self._send[ex.index][message].Start()

    def progress(self) -> None:
        # A probe runs MPICH's progress engine and completes nothing (the receive statuses stay for the count).
        self._comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)

    def wait_receives(self, ex: ExchangeBuffers) -> None:
        requests, statuses = self._recv[ex.index], self._statuses[ex.index]
        if requests:
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
        return [message for message, request in enumerate(self._recv[ex.index]) if not request.Get_status()]

    def free(self) -> None:
        """Not collective (frees this rank's requests); see :mod:`sparsewire.exec.transports.base`."""
        for request in self._all_recv + [r for requests in self._persistent_send for r in requests]:
            request.Free()
        self._recv, self._send, self._all_recv, self._persistent_send = [], [], [], []


class _Partitioned(PartitionedTransport):
    """What the two partitioned transports share: T partitions per message, and a flag per
    received partition once it has arrived (the fallback's request must not be tested again once
    complete, and a flag costs less than asking MPI)."""

    name = "mpi"
    modes = frozenset({Mode.PARTITIONED})
    counted_by = _COUNTED_BY

    def __init__(self, comm: MPI.Comm, buffers: Buffers, ledger: ByteLedger) -> None:
        super().__init__(buffers, ledger)
        self._type = mpi_datatype(buffers.dtype)
        self._parts = buffers.needs.partitions
        self._arrived = [np.zeros((len(ex.recv_ranks), self._parts), bool) for ex in buffers.exchanges]

    def _reset_arrivals(self, ex: ExchangeBuffers) -> None:
        self._arrived[ex.index][:] = False


class MpiPartitionedTransport(_Partitioned):
    """MPI-4 ``MPI_Psend_init``/``MPI_Precv_init``: one request per message, T partitions each,
    ``MPI_Pready`` per packed partition, ``MPI_Parrived`` per arrived one."""

    def __init__(self, comm: MPI.Comm, buffers: Buffers, ledger: ByteLedger) -> None:
        super().__init__(comm, buffers, ledger)
        k, T = buffers.k, self._parts
        self._recv, self._send = [], []
        for ex in buffers.exchanges:
            tag, flat_recv, flat_send = _TAG + ex.index, ex.recv_flat, ex.send_flat
            self._recv.append(
                [
                    comm.Precv_init([flat_recv[start : start + count], count // T, self._type], T, source, tag)
                    for source, (start, count) in zip(ex.recv_ranks, _messages(ex.recv_offsets, ex.recv_elements, k))
                ]
            )
            self._send.append(
                [
                    comm.Psend_init([flat_send[start : start + count], count // T, self._type], T, destination, tag)
                    for destination, (start, count) in zip(ex.send_ranks, _messages(ex.send_offsets, ex.send_elements, k))
                ]
            )
        self._statuses = [[MPI.Status() for _ in requests] for requests in self._recv]

    def post_receives(self, ex: ExchangeBuffers) -> None:
        self._reset_arrivals(ex)
        if self._recv[ex.index]:
            MPI.Prequest.Startall(self._recv[ex.index])

    def start_sends(self, ex: ExchangeBuffers) -> None:
        if self._send[ex.index]:
            MPI.Prequest.Startall(self._send[ex.index])

    def mark_ready(self, ex: ExchangeBuffers, message: int, partition: int) -> None:
        self._send[ex.index][message].Pready(partition)

    def partition_arrived(self, ex: ExchangeBuffers, message: int, partition: int) -> bool:
        flags = self._arrived[ex.index]
        if flags[message, partition]:
            return True
        arrived = self._recv[ex.index][message].Parrived(partition)
        if arrived:
            flags[message, partition] = True
        return arrived

    def wait_receives(self, ex: ExchangeBuffers) -> None:
        # Not yielding: MPICH's MPI_Testall fails on partitioned requests ("See the MPI_ERROR field"), and every
        # partition has arrived by now (the schedule polled each with MPI_Parrived).
        _wait_and_count(self._recv[ex.index], self._statuses[ex.index], self.ledger, ex, self._type)

    def wait_sends(self, ex: ExchangeBuffers) -> None:
        MPI.Request.Waitall(self._send[ex.index])

    def free(self) -> None:
        """Not collective (frees this rank's requests); see :mod:`sparsewire.exec.transports.base`."""
        for request in [r for requests in self._recv + self._send for r in requests]:
            request.Free()
        self._recv, self._send = [], []


class MpiPartitionsOverPointToPoint(_Partitioned):
    """The partitioned protocol where MPI has no partitioned communication: one persistent
    point-to-point request per partition; a receive is tested (``MPI_Test``, under a lock: the T
    threads share the requests) until it completes, and counted from those statuses."""

    def __init__(self, comm: MPI.Comm, buffers: Buffers, ledger: ByteLedger) -> None:
        super().__init__(comm, buffers, ledger)
        k, T = buffers.k, self._parts
        self._recv, self._send = [], []
        for ex in buffers.exchanges:
            flat_recv, flat_send = ex.recv_flat, ex.send_flat
            tags = [_PARTITION_TAG + ex.index * T + t for t in range(T)]
            self._recv.append(
                [
                    [
                        comm.Recv_init(
                            [flat_recv[start + t * (count // T) : start + (t + 1) * (count // T)], self._type], source, tags[t]
                        )
                        for t in range(T)
                    ]
                    for source, (start, count) in zip(ex.recv_ranks, _messages(ex.recv_offsets, ex.recv_elements, k))
                ]
            )
            self._send.append(
                [
                    [
                        comm.Send_init(
                            [flat_send[start + t * (count // T) : start + (t + 1) * (count // T)], self._type],
                            destination,
                            tags[t],
                        )
                        for t in range(T)
                    ]
                    for destination, (start, count) in zip(ex.send_ranks, _messages(ex.send_offsets, ex.send_elements, k))
                ]
            )
        self._statuses = [[[MPI.Status() for _ in range(T)] for _ in ex.recv_ranks] for ex in buffers.exchanges]
        self._lock = threading.Lock() if T > 1 else None

    def post_receives(self, ex: ExchangeBuffers) -> None:
        self._reset_arrivals(ex)
        for requests in self._recv[ex.index]:
            MPI.Prequest.Startall(requests)

    def start_sends(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers). Nothing to open: each partition's send starts when
        it is marked ready."""

    def mark_ready(self, ex: ExchangeBuffers, message: int, partition: int) -> None:
        self._send[ex.index][message][partition].Start()

    def partition_arrived(self, ex: ExchangeBuffers, message: int, partition: int) -> bool:
        flags = self._arrived[ex.index]
        if flags[message, partition]:
            return True
        request, status = self._recv[ex.index][message][partition], self._statuses[ex.index][message][partition]
        if self._lock is None:
            arrived = request.Test(status)
            if arrived:
                flags[message, partition] = True
            return arrived
        with self._lock:
            # The flag is set under the lock: a second thread's Test of the completed (now inactive) request
            # would overwrite its status with an empty one, and the bytes of that partition would count 0.
            arrived = bool(flags[message, partition]) or request.Test(status)
            if arrived:
                flags[message, partition] = True
        return arrived

    def wait_receives(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers). Every partition was completed by
        :meth:`partition_arrived`; count their statuses."""
        for message, statuses in enumerate(self._statuses[ex.index]):
            elements = sum(status.Get_count(self._type) for status in statuses)
            self.ledger.record(ex, message, elements)

    def wait_sends(self, ex: ExchangeBuffers) -> None:
        for requests in self._send[ex.index]:
            wait_all(requests, yielding=self.yield_while_waiting)

    def free(self) -> None:
        """Not collective (frees this rank's requests); see :mod:`sparsewire.exec.transports.base`."""
        for request in [r for requests in self._recv + self._send for group in requests for r in group]:
            request.Free()
        self._recv, self._send = [], []


#: Whether this process has shown the fallback's warning: once per process. Python's own once-per-place record
#: is cleared whenever any code changes the warning filters (Numba's compiler does, on a first compile), which
#: showed it once per plan.
_fallback_shown = False


def select(mode: Mode, comm: MPI.Comm, device: str = "cpu", *, partitioned: bool | None = None) -> type:
    """Not collective. The registry's selector (:mod:`sparsewire.exec.transports`): persistent
    point to point for whole messages; for the partitioned mode MPI-4 partitioned messages, or,
    where MPI has none (or ``partitioned`` is False), one persistent request per partition (with a
    FallbackWarning on rank 0, once per process). ``partitioned`` None: as :func:`partitioned_available` answers."""
    if not Mode(mode).partitions_per_thread:
        return MpiTransport
    if partitioned_available(comm) if partitioned is None else partitioned:
        return MpiPartitionedTransport
    global _fallback_shown
    if comm.Get_rank() == 0 and not _fallback_shown:
        _fallback_shown = True
        warnings.warn(
            "MPI partitioned communication is not available; the partitioned mode runs on persistent point-to-point requests, "
            "one per partition",
            FallbackWarning,
            stacklevel=4,
        )
    return MpiPartitionsOverPointToPoint
