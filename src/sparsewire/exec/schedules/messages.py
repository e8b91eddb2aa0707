"""Schedules of whole messages: the order in which one multiply packs, moves and combines a plan's exchanges.

Each schedule is made once per executor from the buffers, a transport and a combine, and
``run(b, out)`` computes this rank's rows of C (every schedule ends with ``combine.finish``):

* :class:`BulkSchedule`: the diagonal block first, then every message moved before any received
  row is combined: exchange after exchange, or, where the buffers list each relayed message's inputs
  and the transport sends message by message, every exchange at once with each relayed message
  sent as soon as its own inputs have arrived.
* :class:`OverlapSchedule` (``overlap``, and ``pipelined`` on a plan of the pipelined layout, CoLa
  Alg. 3): the exchanges of a step start together, the diagonal block is multiplied while the
  first step's messages are in flight (PETSc's MatMult ordering), in pieces between which the
  transport moves them (``Transport.progress``: MPICH moves a message past what TCP's sockets hold
  only inside an MPI call), a relay waits only for the
  exchange it forwards from (SHIRO Alg. 1); where the buffers list each relayed message's inputs
  and the transport sends message by message, each relayed message leaves as soon as its own
  inputs have arrived, and received exchanges are still combined whole, but for the messages the buffers cut
  into pieces (:mod:`~sparsewire.exec.message_rows`), each piece packed and posted, and combined as it
  arrives, on its own.
* :class:`EarlySchedule` (Collom & Bienz sec. 3.2, Alg. 1): the diagonal block as in the overlap mode;
  receives complete one at a time; each
  arriving message is combined at once, after the relayed messages whose inputs it completes, which are
  packed and sent as soon as the input messages they read have arrived.
* :class:`~sparsewire.exec.schedules.partitioned.PartitionedSchedule` (sec. 3.3, Algs. 3-5): T threads.

Where the buffers give an exchange a ``send_order`` (messages to another node first), the first three pack and post
its messages one at a time in that order instead of packing the whole exchange before posting any.
"""

from __future__ import annotations

import numpy as np

from sparsewire.exec.buffers import Buffers
from sparsewire.exec.pack import Packer
from sparsewire.exec.transports.base import MessageTransport
from sparsewire.profile.laps import COMBINE, EARLY, LOCAL, PACK, PHASES, POST_RECEIVES, POST_SENDS, UNPACK, WAIT, WAIT_SENDS, Laps

__all__ = ["BulkSchedule", "OverlapSchedule", "EarlySchedule"]


class _Schedule:
    """``run(b, out)`` is Collective: every rank runs its schedule in the same multiply.

    With ``laps`` (a summary recording, :mod:`~sparsewire.profile.laps`) each call is followed by its lap,
    ``push((code, clock()))``; without, ``push`` is None and each lap is one test of it."""

    def __init__(
        self, buffers: Buffers, transport: MessageTransport, combine, packer: Packer | None = None, laps: Laps | None = None
    ) -> None:
        self.buffers, self.transport, self.combine = buffers, transport, combine
        self.packer = packer or Packer(buffers)
        self.laps = laps
        self.push, self.clock = (laps.push, laps.clock) if laps is not None else (None, None)

    def close(self) -> None:
        """Release what the schedule holds (threads)."""

    def _send_exchange(self, ex, b: np.ndarray) -> None:
        """Pack every message of exchange ``ex`` and post its sends (a ``pack`` and a ``post sends`` lap); where the
        buffers give a ``send_order``, one message at a time in that order (a ``pack`` and a ``post send`` lap each):
        the messages over the slower link leave before the others are packed."""
        push = self.push
        if ex.send_pieces is not None:
            self._send_pieces(ex, b)
            return
        if ex.send_order is not None and self.transport.sends_message_by_message:
            for message in ex.send_order:
                _send_message(self.packer, self.transport, self.laps, ex, message, b)
            return
        self.packer.exchange(ex, b)
        if push:
            push((PACK, self.clock()))
        self.transport.start_sends(ex)
        if push:
            push((POST_SENDS + PHASES * ex.index, self.clock()))

    def _send_pieces(self, ex, b: np.ndarray) -> None:
        """Pack and post the messages of ``ex`` piece by piece (:mod:`~sparsewire.exec.message_rows`; those over the
        slower link first where the buffers give a ``send_order``): a piece crosses while the next is packed (a
        ``pack`` and a ``post send`` lap each)."""
        packer, transport, laps = self.packer, self.transport, self.laps
        for message in ex.send_order if ex.send_order is not None else range(len(ex.send_ranks)):
            rows = ex.send_pieces[message].tolist()
            for piece in range(len(rows) - 1):
                packer.rows(ex, b, rows[piece], rows[piece + 1])
                if laps is not None:
                    laps.push((PACK, laps.clock()))
                transport.start_piece(ex, message, piece)
                if laps is not None:
                    laps.push((laps.piece_code(ex, message, piece), laps.clock()))


class _MessageRelays:
    """Relays sent message by message (the early mode, and the overlap mode where the transport
    sends one message at a time): which received messages are in, and how many inputs each
    relayed message still waits for; a relayed message is packed and sent once that count is 0."""

    def __init__(self, buffers: Buffers, transport: MessageTransport, packer: Packer, laps: Laps | None) -> None:
        self.buffers, self.transport, self.packer = buffers, transport, packer
        self.laps = laps
        self.push, self.clock = (laps.push, laps.clock) if laps is not None else (None, None)
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
                self._send(ex, message, b)

    def arrive(self, index: int, message: int, b: np.ndarray) -> None:
        """Message ``message`` of exchange ``index`` is in: send every relayed message it completes."""
        self.arrived[index][message] = True
        exchanges = self.buffers.exchanges
        for dependent_index, send_message in self.buffers.dependents[index][message]:
            waiting = self._waiting[dependent_index]
            waiting[send_message] -= 1
            if waiting[send_message] == 0:
                self._send(exchanges[dependent_index], send_message, b)

    def receive_until(self, indices, b: np.ndarray) -> None:
        """Complete receives in arrival order until every message of the exchanges ``indices`` is in, sending each
        relayed message whose inputs are then all in (a ``wait`` lap each)."""
        push = self.push
        while not all(self.arrived[index].all() for index in indices):
            arrival = self.transport.wait_any()
            if push:
                push((WAIT, self.clock()))
            self.arrive(*arrival, b)

    def _send(self, ex, message: int, b: np.ndarray) -> None:
        _send_message(self.packer, self.transport, self.laps, ex, message, b)


class BulkSchedule(_Schedule):
    """Every message in before any received row is combined (see the module docstring)."""

    def __init__(
        self, buffers: Buffers, transport: MessageTransport, combine, packer: Packer | None = None, laps: Laps | None = None
    ) -> None:
        super().__init__(buffers, transport, combine, packer, laps)
        self._per_message = _relays_message_by_message(buffers, transport)
        self._relays = _MessageRelays(buffers, transport, self.packer, laps)

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        push, clock = self.push, self.clock
        self.combine.diagonal(b, out)
        if push:
            push((LOCAL, clock()))
        if self._per_message:
            self._relaying(b, out)
        else:
            self._exchange_after_exchange(b, out)
        self.combine.finish(b, out)
        if push:
            push((COMBINE, clock()))

    def _exchange_after_exchange(self, b: np.ndarray, out: np.ndarray) -> None:
        transport, combine, push, clock = self.transport, self.combine, self.push, self.clock
        for ex in self.buffers.exchanges:
            transport.post_receives(ex)
            if push:
                push((POST_RECEIVES, clock()))
            self._send_exchange(ex, b)
            transport.wait_receives(ex)
            if push:
                push((WAIT, clock()))
            combine.exchange_arrived(ex, out)
            if push:
                push((UNPACK, clock()))
            transport.wait_sends(ex)
            if push:
                push((WAIT_SENDS, clock()))

    def _relaying(self, b: np.ndarray, out: np.ndarray) -> None:
        """Every exchange's receives posted at once; a relayed message leaves as soon as the input messages it
        reads are in, so a two-level plan's second hop does not wait for the whole first one (on a shared link its
        aggregated C rows cross while its B rows still arrive); every exchange combined once all are in."""
        transport, exchanges, relays, push, clock = self.transport, self.buffers.exchanges, self._relays, self.push, self.clock
        relays.reset()
        for ex in exchanges:
            transport.post_receives(ex)
            if push:
                push((POST_RECEIVES, clock()))
        for ex in exchanges:
            if ex.input is not None:
                relays.start(ex, b)
                continue
            self._send_exchange(ex, b)
        relays.receive_until(range(len(exchanges)), b)
        for ex in exchanges:
            self.combine.exchange_arrived(ex, out)
            if push:
                push((UNPACK, clock()))
        _wait_sends(transport, exchanges, push, clock)


class OverlapSchedule(_Schedule):
    """Steps in flight while the diagonal block and the previous step are computed (see the
    module docstring)."""

    def __init__(
        self, buffers: Buffers, transport: MessageTransport, combine, packer: Packer | None = None, laps: Laps | None = None
    ) -> None:
        super().__init__(buffers, transport, combine, packer, laps)
        exchanges = buffers.exchanges
        self._finished = np.zeros(len(exchanges), bool)
        # Receives of each exchange whose messages are cut: one per piece.
        self._pieces = [None if ex.recv_pieces is None else sum(len(rows) - 1 for rows in ex.recv_pieces) for ex in exchanges]
        self._per_message = _relays_message_by_message(buffers, transport)
        self._relays = _MessageRelays(buffers, transport, self.packer, laps)

    def _finish(self, index: int, b: np.ndarray, out: np.ndarray) -> None:
        """Every message of exchange ``index`` in (one at a time where some of them feed relays), then its product."""
        if self._finished[index]:
            return
        ex, push = self.buffers.exchanges[index], self.push
        if self._pieces[index] is not None:  # each piece combined as it arrives, while the next ones cross
            for _ in range(self._pieces[index]):
                _, start, stop = self.transport.wait_piece(ex)
                if push:
                    push((WAIT, self.clock()))
                self.combine.rows_arrived(ex, start, stop, out)
                if push:
                    push((UNPACK, self.clock()))
            self._finished[index] = True
            return
        if self._per_message:  # any posted receive may complete first: every exchange's, one at a time
            self._relays.receive_until((index,), b)
        else:
            self.transport.wait_receives(ex)
            if push:
                push((WAIT, self.clock()))
        self.combine.exchange_arrived(ex, out)
        if push:
            push((UNPACK, self.clock()))
        self._finished[index] = True

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        transport, steps, exchanges = self.transport, self.buffers.steps, self.buffers.exchanges
        push, clock = self.push, self.clock
        self._finished[:] = False
        if self._per_message:
            self._relays.reset()
        for position, step in enumerate(steps):
            for index in step:
                ex = exchanges[index]
                transport.post_receives(ex)
                if push:
                    push((POST_RECEIVES, clock()))
                if ex.input is not None and self._per_message:
                    self._relays.start(ex, b)
                    continue
                if ex.input is not None:
                    self._finish(ex.input, b, out)
                self._send_exchange(ex, b)
            if position == 0:
                self.combine.diagonal(b, out, self.transport.progress)  # while the first messages are in flight
                if push:
                    push((LOCAL, clock()))
            else:
                for index in steps[position - 1]:
                    self._finish(index, b, out)
        for index in range(len(exchanges)):
            self._finish(index, b, out)
        _wait_sends(transport, exchanges, push, clock)
        self.combine.finish(b, out)
        if push:
            push((COMBINE, clock()))


class EarlySchedule(_Schedule):
    """Each message combined as it arrives; relays sent message by message (see the module
    docstring)."""

    def __init__(
        self, buffers: Buffers, transport: MessageTransport, combine, packer: Packer | None = None, laps: Laps | None = None
    ) -> None:
        super().__init__(buffers, transport, combine, packer, laps)
        self._relays = _MessageRelays(buffers, transport, self.packer, laps)

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective over the plan's peers."""
        transport, steps, exchanges = self.transport, self.buffers.steps, self.buffers.exchanges
        push, clock = self.push, self.clock
        self._relays.reset()
        for position, step in enumerate(steps):
            for index in step:
                ex = exchanges[index]
                transport.post_receives(ex)
                if push:
                    push((POST_RECEIVES, clock()))
                if ex.input is None:
                    self._send_exchange(ex, b)
                    continue
                self._relays.start(ex, b)
            if position == 0:
                self.combine.diagonal(b, out, self.transport.progress)  # while the first messages are in flight
                if push:
                    push((LOCAL, clock()))
            else:
                self._arrivals_until(steps[position - 1], b, out)
        self._arrivals_until(range(len(exchanges)), b, out)
        _wait_sends(transport, exchanges, push, clock)
        self.combine.finish(b, out)
        if push:
            push((COMBINE, clock()))

    def _arrivals_until(self, indices, b: np.ndarray, out: np.ndarray) -> None:
        """Complete receives in arrival order until every message of the exchanges ``indices``
        has been combined; the relayed messages an arrival completes leave before it is combined, so the
        next hop does not wait for this rank's product (a relay reads the received rows and B, never C)."""
        arrived, push = self._relays.arrived, self.push
        while not all(arrived[i].all() for i in indices):
            index, message = self.transport.wait_any()
            if push:
                push((WAIT, self.clock()))
            self._relays.arrive(index, message, b)
            self.combine.message_arrived(self.buffers.exchanges[index], message, out)
            if push:
                push((EARLY, self.clock()))


def _send_message(packer: Packer, transport: MessageTransport, laps: Laps | None, ex, message: int, b: np.ndarray) -> None:
    """Pack one message of ``ex`` and post its send (a ``pack`` and a ``post send`` lap)."""
    packer.message(ex, message, b)
    if laps is not None:
        laps.push((PACK, laps.clock()))
    transport.start_send(ex, message)
    if laps is not None:
        laps.push((laps.send_code(ex, message), laps.clock()))


def _relays_message_by_message(buffers: Buffers, transport: MessageTransport) -> bool:
    """Whether relays go message by message: the buffers list each relayed message's inputs, and the transport sends
    one message at a time and completes any one receive."""
    return transport.sends_message_by_message and any(any(ex.dependencies) for ex in buffers.exchanges)


def _wait_sends(transport: MessageTransport, exchanges, push, clock) -> None:
    """Every exchange's sends complete (the buffers may be written again), each a ``wait sends`` lap."""
    for ex in exchanges:
        transport.wait_sends(ex)
        if push:
            push((WAIT_SENDS, clock()))
