"""Transports: how an exchange's messages move between ranks (PetscSF's split of a communication
graph from the ``-sf_type`` that runs it).

A transport is made once per executor from its :class:`~sparsewire.exec.buffers.Buffers` (it
binds every message to its slice of the send and receive buffers) and offers the schedules one
protocol, in two flavours (:class:`MessageTransport`, :class:`PartitionedTransport`):

* every transport: ``post_receives(ex)``, ``start_sends(ex)`` (begin an exchange's receives or
  all of its sends), ``wait_receives(ex)``, ``wait_sends(ex)`` (complete them), ``free()``;
* whole messages: ``start_send(ex, message)`` (relays sent message by message) and
  ``wait_any()`` (complete any one posted receive); and where a transport also moves pieces of messages
  (:class:`PieceTransport`), ``start_piece(ex, message, piece)`` and ``wait_piece(ex)``;
* partitioned messages (one partition per thread): ``mark_ready(ex, message, partition)``,
  ``partition_arrived(ex, message, partition)``.

Every completed receive is counted in the transport's :class:`ByteLedger` from what the transport
itself knows of it, and ``counted_by`` says what that is. Which modes a transport runs is
explicit (``modes``); the executor refuses another pair.

Implementations: :mod:`sparsewire.exec.transports.mpi` (persistent point-to-point, MPI-4
partitioned, partitioned over point-to-point) and :mod:`sparsewire.exec.transports.torch_distributed`
(torch.distributed: Gloo for CPU tensors; the group it sets up also names NCCL for CUDA tensors
where PyTorch has it, though no backend keeps buffers on CUDA in this version). Which messages
the MPI transport stages through host memory is :mod:`sparsewire.wire.paths`'s rule, per message (``WirePath``).
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import numpy as np

from sparsewire.exec.buffers import Buffers, ExchangeBuffers
from sparsewire.plan.modes import Mode

__all__ = ["ByteLedger", "Transport", "MessageTransport", "PieceTransport", "PartitionedTransport"]


class ByteLedger:
    """Bytes received per source rank in the last multiply, and every message whose size differed
    from the receiving plan's, over all multiplies.

    Attributes:
        bytes_from: payload bytes from each rank (the plan's rows as the receiver reads them;
            reset before every multiply).
        messages_from: messages received from each rank (reset before every multiply).
        wire_bytes_from: the bytes that crossed the wire from each rank (equal to the payload on the
            direct and staged paths, :class:`~sparsewire.wire.paths.WirePath`; fewer on the encoded
            path, where a codec shrinks the message).
        problems: one line per message whose payload differed from the plan's.
        arrived: (exchange index, message) of every message counted in this multiply.
        on_arrival: called after each message is counted (the executor's watchdog), or None.
    """

    def __init__(self, rank: int, n_ranks: int, itemsize: int) -> None:
        self.rank, self.itemsize = rank, itemsize
        self.bytes_from = np.zeros(n_ranks, np.int64)
        self.wire_bytes_from = np.zeros(n_ranks, np.int64)
        self.messages_from = np.zeros(n_ranks, np.int64)
        self.problems: list[str] = []
        self.arrived: set[tuple[int, int]] = set()
        self.on_arrival: Callable[[], None] | None = None

    def reset(self) -> None:
        """Not collective. Start a multiply: zero the byte counts and arrivals (the problems stay)."""
        self.bytes_from[:] = 0
        self.wire_bytes_from[:] = 0
        self.messages_from[:] = 0
        self.arrived.clear()

    def record(self, ex: ExchangeBuffers, message: int, received_elements: int, wire_bytes: int | None = None) -> None:
        """Not collective. Count one received message of ``received_elements`` elements (padding
        included) that took ``wire_bytes`` on the wire (None: its elements' bytes, padding
        excluded); a payload other than the plan's is a delivery problem."""
        payload = received_elements - (ex.recv_elements[message] - ex.expected_elements[message])
        source = ex.recv_ranks[message]
        self.bytes_from[source] += payload * self.itemsize
        self.wire_bytes_from[source] += payload * self.itemsize if wire_bytes is None else wire_bytes
        self.messages_from[source] += 1
        self.arrived.add((ex.index, message))
        if self.on_arrival is not None:
            self.on_arrival()
        if payload != ex.expected_elements[message]:
            self.problems.append(
                f"rank {self.rank} received {payload} elements from rank {source} in exchange {ex.index} but its "
                f"plan expects {ex.expected_elements[message]}; the ranks' plans disagree, so build them together "
                "with build_rank_plan_collective"
            )


class Transport(abc.ABC):
    """What every transport offers the schedules (see the module docstring). Each call involves
    only this rank's messages (Not collective); a multiply as a whole is Collective."""

    #: ``mpi`` or ``torch``.
    name: str = ""
    #: The modes this transport runs.
    modes: frozenset[Mode] = frozenset()
    #: What the ledger's counts come from (reported in the JSON and ``explain()``).
    counted_by: str = ""
    #: Whether those counts are independent of the receiving plan (a receive status) or only the
    #: sizes the receiver posted, checked against the senders' counts once at setup.
    counts_measured: bool = True
    #: Whether it stages the messages the buffers mark (:mod:`sparsewire.wire.paths`);
    #: the others send every message from the buffers.
    stages_messages: bool = False
    #: Whether it sends and receives the pieces the buffers cut messages into (a :class:`PieceTransport`); the
    #: executor asks for pieces only from one that does.
    sends_pieces: bool = False

    def __init__(self, buffers: Buffers, ledger: ByteLedger) -> None:
        self.buffers, self.ledger = buffers, ledger
        #: Set by the executor where its node is oversubscribed (:func:`sparsewire._lib.cores.oversubscribed`): a
        #: transport whose waits poll gives the core away between polls (``sched_yield``) instead of spinning.
        self.yield_while_waiting = False

    @abc.abstractmethod
    def post_receives(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers). Begin every receive of ``ex``."""

    @abc.abstractmethod
    def start_sends(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers). Begin every send of ``ex`` (its send buffer is
        packed; partitioned: open the messages,
        whose partitions are then marked ready one by one)."""

    @abc.abstractmethod
    def wait_receives(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers). Complete every receive of ``ex`` and count it."""

    @abc.abstractmethod
    def wait_sends(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers). Complete every send of ``ex``."""

    def progress(self) -> None:
        """Not collective. Let the library move the messages in flight without completing any, between pieces
        of a long product (:meth:`~sparsewire.exec.combine.StreamingCombine.diagonal`): MPICH moves a message
        over TCP past what the sockets hold only inside an MPI call. Nothing here: a transport that has no
        such call to make."""
        return None

    def incomplete_receives(self, ex: ExchangeBuffers) -> list[int] | None:
        """Not collective. The messages of ``ex`` whose receive has not completed, asked without
        completing anything (for the watchdog's message, from its own thread), or None where the
        transport cannot tell (then every message not yet counted is named)."""
        return None

    @abc.abstractmethod
    def free(self) -> None:
        """Not collective (frees this rank's requests). Release every request (no message may be in flight)."""


class MessageTransport(Transport):
    """Whole messages, which also go one at a time: the bulk, overlap, pipelined and early
    schedules."""

    @property
    def sends_message_by_message(self) -> bool:
        """Not collective. Whether :meth:`start_send` and :meth:`wait_any` may be used (one message at a time) rather
        than only whole exchanges (NCCL's grouped protocol); the bulk, overlap and pipelined schedules relay per
        message where they may."""
        return True

    @abc.abstractmethod
    def start_send(self, ex: ExchangeBuffers, message: int) -> None:
        """Not collective (point to point with the peers). Begin the send of one message of ``ex`` (its rows are packed)."""

    @abc.abstractmethod
    def wait_any(self) -> tuple[int, int]:
        """Not collective (point to point with the peers). Complete one of the posted receives not yet
        completed, count it, and return its
        (exchange, message)."""


class PieceTransport(MessageTransport):
    """Whole messages, and the pieces the buffers cut the messages over the slower link into
    (:mod:`~sparsewire.exec.message_rows`): the overlap schedule's sends and receives of a cut exchange."""

    sends_pieces = True

    @abc.abstractmethod
    def start_piece(self, ex: ExchangeBuffers, message: int, piece: int) -> None:
        """Not collective (point to point with the peers). Begin the send of piece ``piece`` of one message of ``ex``
        (its rows ``ex.send_pieces[message][piece:piece + 2]`` are packed)."""

    @abc.abstractmethod
    def wait_piece(self, ex: ExchangeBuffers) -> tuple[int, int, int]:
        """Not collective (point to point with the peers). Complete one posted receive of ``ex``, whose messages are
        cut (``ex.recv_pieces``), and return its (message, first row, end row); a message is counted once its last
        piece is in."""


class PartitionedTransport(Transport):
    """Messages in T partitions, each sent and received on its own: the partitioned schedule."""

    @property
    def sends_message_by_message(self) -> bool:
        """Not collective. False: the partitioned schedule's threads send partitions of whole exchanges, so a relay
        waits for its step (the cost model's steps follow each other, :attr:`~sparsewire.plan.modes.Mode.steps_in_flight`)."""
        return False

    @abc.abstractmethod
    def mark_ready(self, ex: ExchangeBuffers, message: int, partition: int) -> None:
        """Not collective (point to point with the peers). Partition ``partition`` of sent ``message`` is packed: let it go."""

    @abc.abstractmethod
    def partition_arrived(self, ex: ExchangeBuffers, message: int, partition: int) -> bool:
        """Not collective (point to point with the peers). Whether partition ``partition`` of received
        ``message`` has arrived (thread-safe)."""
