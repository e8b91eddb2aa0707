"""The partitioned mode's MPI transports: MPI-4 partitioned messages, and partitioned messages over
point-to-point requests (where MPI has no partitioned communication); and :func:`select`, the registry's choice
among them and :class:`~sparsewire.exec.transports.mpi.MpiTransport`.

Every request is made once, on the executor's own communicator, over the buffers' slices, and started again each
multiply. Bytes are counted from the receive statuses (``MPI_Get_count``), minus partition padding.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import mpi_datatype, wait_all
from sparsewire.errors import FallbackWarning
from sparsewire.exec.buffers import Buffers, ExchangeBuffers
from sparsewire.exec.transports.base import ByteLedger, PartitionedTransport
from sparsewire.exec.transports.mpi import _COUNTED_BY, _TAG, MpiTransport, _messages
from sparsewire.plan.modes import Mode

__all__ = ["MpiPartitionedTransport", "MpiPartitionsOverPointToPoint", "partitioned_available", "select"]

_PARTITION_TAG = 8000  # + exchange index * T + partition


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
    from sparsewire.exec.transports.mpi_partitioned import (
        MpiPartitionedTransport,
        MpiPartitionsOverPointToPoint,
        partitioned_available,
    )

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
