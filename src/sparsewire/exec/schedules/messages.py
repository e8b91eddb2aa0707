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
        self._arrived = [np.zeros(len(ex.recv_ranks), bool) for ex in exchanges]
        self._waiting = [np.zeros(len(ex.send_ranks), np.int64) for ex in exchanges]

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
        exchanges, dependents = self.buffers.exchanges, self.buffers.dependents
        while not self._arrived[index].all():
            arrived_index, message = self.transport.wait_any()
            self._arrived[arrived_index][message] = True
            for dependent_index, send_message in dependents[arrived_index][message]:
                waiting = self._waiting[dependent_index]
                waiting[send_message] -= 1
                if waiting[send_message] == 0:
                    dependent = exchanges[dependent_index]
                    self.packer.message(dependent, send_message, b)
                    self.transport.start_send(dependent, send_message)

    def _start_relay(self, ex, b: np.ndarray) -> None:
        """Send the messages of relay ``ex`` whose inputs are in; the others leave as their inputs arrive."""
        arrived, waiting = self._arrived[ex.input], self._waiting[ex.index]
        for message, needed in enumerate(ex.dependencies):
            waiting[message] = sum(1 for m in needed if not arrived[m])
            if waiting[message] == 0:
                self.packer.message(ex, message, b)
                self.transport.start_send(ex, message)

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        transport, steps, exchanges = self.transport, self.buffers.steps, self.buffers.exchanges
        self._finished[:] = False
        if self._per_message:
            for arrived in self._arrived:
                arrived[:] = False
        for position, step in enumerate(steps):
            for index in step:
                ex = exchanges[index]
                transport.post_receives(ex)
                if ex.input is not None and self._per_message:
                    self._start_relay(ex, b)
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
        self._arrived = [np.zeros(len(ex.recv_ranks), bool) for ex in buffers.exchanges]
        self._waiting = [np.zeros(len(ex.send_ranks), np.int64) for ex in buffers.exchanges]

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        transport, steps, exchanges = self.transport, self.buffers.steps, self.buffers.exchanges
        for arrived in self._arrived:
            arrived[:] = False
        for position, step in enumerate(steps):
            for index in step:
                ex = exchanges[index]
                transport.post_receives(ex)
                if ex.input is None:
                    self.packer.exchange(ex, b)
                    transport.start_sends(ex)
                    continue
                arrived, waiting = self._arrived[ex.input], self._waiting[index]
                for message, needed in enumerate(ex.dependencies):
                    waiting[message] = sum(1 for m in needed if not arrived[m])
                    if waiting[message] == 0:
                        self.packer.message(ex, message, b)
                        transport.start_send(ex, message)
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
        exchanges, dependents = self.buffers.exchanges, self.buffers.dependents
        while not all(self._arrived[i].all() for i in indices):
            index, message = self.transport.wait_any()
            ex = exchanges[index]
            self._arrived[index][message] = True
            self.combine.message_arrived(ex, message, out)
            for dependent_index, send_message in dependents[index][message]:
                waiting = self._waiting[dependent_index]
                waiting[send_message] -= 1
                if waiting[send_message] == 0:
                    dependent = exchanges[dependent_index]
                    self.packer.message(dependent, send_message, b)
                    self.transport.start_send(dependent, send_message)
