"""Schedules of whole messages: the order in which one multiply packs, moves and combines a plan's exchanges.

Each schedule is made once per executor from the buffers, a transport and a combine, and
``run(b, out)`` computes this rank's rows of C (every schedule ends with ``combine.finish``):

* :class:`BulkSchedule`: exchange after exchange, all messages of one completed before its
  product; the diagonal block first.
* :class:`OverlapSchedule` (``overlap``, and ``pipelined`` on a plan of the pipelined layout, CoLa
  Alg. 3): the exchanges of a step start together, the diagonal block is multiplied while the
  first step's messages are in flight (PETSc's MatMult ordering), a relay waits only for the
  exchange it forwards from (SHIRO Alg. 1); where the buffers list each relayed message's inputs
  (the overlap mode) and the transport sends message by message, each relayed message leaves as
  soon as its own inputs have arrived, and received exchanges are still combined whole.
* :class:`EarlySchedule` (Collom & Bienz sec. 3.2, Alg. 1): receives complete one at a time; each
  arriving message is combined at once, and a relayed message is packed and sent as soon as the
  input messages it reads have arrived.
* :class:`~sparsewire.exec.schedules.partitioned.PartitionedSchedule` (sec. 3.3, Algs. 3-5): T threads.
"""

from __future__ import annotations

import numpy as np

from sparsewire.exec.buffers import Buffers
from sparsewire.exec.pack import Packer
from sparsewire.exec.transports.base import MessageTransport

__all__ = ["BulkSchedule", "OverlapSchedule", "EarlySchedule"]


class _Schedule:
    """``run(b, out)`` is Collective: every rank runs its schedule in the same multiply."""

    def __init__(self, buffers: Buffers, transport: MessageTransport, combine, packer: Packer | None = None) -> None:
        self.buffers, self.transport, self.combine = buffers, transport, combine
        self.packer = packer or Packer(buffers)

    def close(self) -> None:
        """Release what the schedule holds (threads)."""


class _MessageRelays:
    """Relays sent message by message (the early mode, and the overlap mode where the transport
    sends one message at a time): which received messages are in, and how many inputs each
    relayed message still waits for; a relayed message is packed and sent once that count is 0."""

    def __init__(self, buffers: Buffers, transport: MessageTransport, packer: Packer) -> None:
        self.buffers, self.transport, self.packer = buffers, transport, packer
        self.arrived = [np.zeros(len(ex.recv_ranks), bool) for ex in buffers.exchanges]
        self._waiting = [np.zeros(len(ex.send_ranks), np.int64) for ex in buffers.exchanges]

    def reset(self) -> None:
        """A multiply begins: nothing has arrived."""
        for arrived in self.arrived:
            arrived[:] = False

    def start(self, ex, b: np.ndarray) -> None:
        """Send the messages of relay ``ex`` whose inputs are in; the others leave as they arrive."""
        arrived, waiting = self.arrived[ex.input], self._waiting[ex.index]
        for message, needed in enumerate(ex.dependencies):
            waiting[message] = sum(1 for m in needed if not arrived[m])
            if waiting[message] == 0:
                self.packer.message(ex, message, b)
                self.transport.start_send(ex, message)

    def arrive(self, index: int, message: int, b: np.ndarray) -> None:
        """Message ``message`` of exchange ``index`` is in: send every relayed message it completes."""
        self.arrived[index][message] = True
        exchanges = self.buffers.exchanges
        for dependent_index, send_message in self.buffers.dependents[index][message]:
            waiting = self._waiting[dependent_index]
            waiting[send_message] -= 1
            if waiting[send_message] == 0:
                self.packer.message(exchanges[dependent_index], send_message, b)
                self.transport.start_send(exchanges[dependent_index], send_message)


class BulkSchedule(_Schedule):
    """Exchange after exchange (see the module docstring)."""

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        transport, combine = self.transport, self.combine
        combine.diagonal(b, out)
        for ex in self.buffers.exchanges:
            transport.post_receives(ex)
            self.packer.exchange(ex, b)
            transport.start_sends(ex)
            transport.wait_receives(ex)
            combine.exchange_arrived(ex, out)
            transport.wait_sends(ex)
        combine.finish(b, out)


class OverlapSchedule(_Schedule):
    """Steps in flight while the diagonal block and the previous step are computed (see the
    module docstring)."""

    def __init__(self, buffers: Buffers, transport: MessageTransport, combine, packer: Packer | None = None) -> None:
        super().__init__(buffers, transport, combine, packer)
        exchanges = buffers.exchanges
        self._finished = np.zeros(len(exchanges), bool)
        # Relays message by message: the buffers list each relayed message's inputs, and the
        # transport sends one message at a time and completes any one receive.
        self._per_message = transport.sends_message_by_message and any(any(ex.dependencies) for ex in exchanges)
        self._relays = _MessageRelays(buffers, transport, self.packer)

    def _finish(self, index: int, b: np.ndarray, out: np.ndarray) -> None:
        """Every message of exchange ``index`` in (one at a time where some of them feed relays), then its product."""
        if self._finished[index]:
            return
        ex = self.buffers.exchanges[index]
        if self._per_message:  # any posted receive may complete first: every exchange's, one at a time
            self._arrivals_until(index, b)
        else:
            self.transport.wait_receives(ex)
        self.combine.exchange_arrived(ex, out)
        self._finished[index] = True

    def _arrivals_until(self, index: int, b: np.ndarray) -> None:
        """Complete receives in arrival order until exchange ``index`` is in, sending each relayed
        message whose inputs are then all in."""
        while not self._relays.arrived[index].all():
            self._relays.arrive(*self.transport.wait_any(), b)

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        transport, steps, exchanges = self.transport, self.buffers.steps, self.buffers.exchanges
        self._finished[:] = False
        if self._per_message:
            self._relays.reset()
        for position, step in enumerate(steps):
            for index in step:
                ex = exchanges[index]
                transport.post_receives(ex)
                if ex.input is not None and self._per_message:
                    self._relays.start(ex, b)
                    continue
                if ex.input is not None:
                    self._finish(ex.input, b, out)
                self.packer.exchange(ex, b)
                transport.start_sends(ex)
            if position == 0:
                self.combine.diagonal(b, out)  # while the first messages are in flight
            else:
                for index in steps[position - 1]:
                    self._finish(index, b, out)
        for index in range(len(exchanges)):
            self._finish(index, b, out)
        for ex in exchanges:
            transport.wait_sends(ex)
        self.combine.finish(b, out)


class EarlySchedule(_Schedule):
    """Each message combined as it arrives; relays sent message by message (see the module
    docstring)."""

    def __init__(self, buffers: Buffers, transport: MessageTransport, combine, packer: Packer | None = None) -> None:
        super().__init__(buffers, transport, combine, packer)
        self._relays = _MessageRelays(buffers, transport, self.packer)

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        transport, steps, exchanges = self.transport, self.buffers.steps, self.buffers.exchanges
        self._relays.reset()
        for position, step in enumerate(steps):
            for index in step:
                ex = exchanges[index]
                transport.post_receives(ex)
                if ex.input is None:
                    self.packer.exchange(ex, b)
                    transport.start_sends(ex)
                    continue
                self._relays.start(ex, b)
            if position == 0:
                self.combine.diagonal(b, out)  # while the first messages are in flight
            else:
                self._arrivals_until(steps[position - 1], b, out)
        self._arrivals_until(range(len(exchanges)), b, out)
        for ex in exchanges:
            transport.wait_sends(ex)
        self.combine.finish(b, out)

    def _arrivals_until(self, indices, b: np.ndarray, out: np.ndarray) -> None:
        """Complete receives in arrival order until every message of the exchanges ``indices``
        has been combined."""
        arrived = self._relays.arrived
        while not all(arrived[i].all() for i in indices):
            index, message = self.transport.wait_any()
            self.combine.message_arrived(self.buffers.exchanges[index], message, out)
            self._relays.arrive(index, message, b)
