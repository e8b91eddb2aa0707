"""SpGEMM's transfers traced: the same :class:`~sparsewire.profile.tracing.Tracer` as SpMM's.

A SpGEMM message is three sends on one tag (header, integers, values:
:mod:`sparsewire.spgemm.transfer`); the trace shows it as one message: a ``post send`` span and the
sender's async span from the first send's post to :meth:`TracedTransfer.finish_sends`, a ``post
receives`` span for the header's receive and the receiver's async span from there to the payload's
arrival (its bytes, as MPI counted them, on the span's end), ``post payload`` (the header's wait and
the payload's posts) and ``wait`` spans, and a flow arrow from the send to the payload's arrival. Its
flow id is ``multiply:stage:source:destination`` in ranks of the plan's communicator (SUMMA sends
along grid rows and columns: their sub-communicators' ranks are translated), so both ends agree.
"""

from __future__ import annotations

from mpi4py import MPI

from sparsewire.profile.tracing import Tracer
from sparsewire.spgemm.transfer import Incoming, SparseTransfer

__all__ = ["TracedTransfer"]


class TracedTransfer:
    """Not collective by itself. A :class:`~sparsewire.spgemm.transfer.SparseTransfer` whose calls record into
    ``tracer``; the trace names ranks of the plan's communicator (:meth:`SparseTransfer.plan_rank`)."""

    def __init__(self, inner: SparseTransfer, tracer: Tracer) -> None:
        self.inner, self.tracer = inner, tracer
        self._sent: list[tuple[int, int]] = []  # (tag, destination) of the sends since the last finish_sends

    @property
    def bytes_received(self) -> int:
        """Bytes MPI delivered to this rank through the transfer (its receive statuses)."""
        return self.inner.bytes_received

    @property
    def payload_bytes_received(self) -> int:
        """The same messages' bytes uncoded (:attr:`SparseTransfer.payload_bytes_received`)."""
        return self.inner.payload_bytes_received

    @property
    def index_bytes_received(self) -> int:
        """The integer arrays' bytes on the wire (:attr:`SparseTransfer.index_bytes_received`)."""
        return self.inner.index_bytes_received

    @property
    def index_payload_bytes_received(self) -> int:
        """The integer arrays' bytes decoded (:attr:`SparseTransfer.index_payload_bytes_received`)."""
        return self.inner.index_payload_bytes_received

    def _rank(self, comm: MPI.Comm, peer: int) -> int:
        """``peer`` of ``comm`` as a rank of the plan's communicator."""
        return self.inner.plan_rank(comm, peer)

    def _timed(self, name: str, call, *args, tag: int):
        start = self.tracer.clock()
        result = call(*args)
        end = self.tracer.clock()
        if self.tracer.recording:
            self.tracer.span(name, start, end, stage=tag)
        return result, start, end

    def send(self, comm: MPI.Comm, destination: int, tag: int, message) -> None:
        """Not collective. :meth:`SparseTransfer.send`, a ``post send`` span and the message's start."""
        _, start, _ = self._timed("post send", self.inner.send, comm, destination, tag, message, tag=tag)
        if self.tracer.recording:
            ints, values, _ = message
            size = 16 + ints.nbytes + values.nbytes  # header, integers, values
            totals = self.tracer.sent.setdefault("post send", [0, 0])
            totals[0] += 1
            totals[1] += size
            peer = self._rank(comm, destination)
            self._sent.append((tag, peer))
            self.tracer.message_event("b", "send", tag, peer, size, start)
            self.tracer.flow("s", tag, self.tracer.rank, peer, start)

    def post_header(self, comm: MPI.Comm, source: int, tag: int) -> Incoming:
        """Not collective. :meth:`SparseTransfer.post_header`, a ``post receives`` span and the message's start."""
        incoming, start, _ = self._timed("post receives", self.inner.post_header, comm, source, tag, tag=tag)
        if self.tracer.recording:
            self.tracer.message_event("b", "receive", tag, self._rank(comm, source), None, start)
        return incoming

    def wait_header(self, incoming: Incoming) -> tuple[int, int]:
        """Not collective. :meth:`SparseTransfer.wait_header` as a ``wait header`` span."""
        return self._timed("wait header", self.inner.wait_header, incoming, tag=incoming.tag)[0]

    def post_payload(self, incoming: Incoming, values=None) -> None:
        """Not collective. :meth:`SparseTransfer.post_payload` (the header's wait, the payload's posts) as a span."""
        self._timed("post payload", self.inner.post_payload, incoming, values, tag=incoming.tag)

    def wait(self, incoming: Incoming):
        """Not collective. :meth:`SparseTransfer.wait` as a ``wait`` span; the message's end and its arrow's."""
        before = self.inner.payload_bytes_received
        result, _, end = self._timed("wait", self.inner.wait, incoming, tag=incoming.tag)
        if self.tracer.recording:
            source = self._rank(incoming.comm, incoming.source)
            size = 16 + self.inner.payload_bytes_received - before  # the header (16 bytes) and the payload MPI delivered
            self.tracer.flow("f", incoming.tag, source, self.tracer.rank, end)
            self.tracer.message_event("e", "receive", incoming.tag, source, size, end)
        return result

    def finish_sends(self) -> None:
        """Not collective. :meth:`SparseTransfer.finish_sends` as a ``wait sends`` span; the sent messages' ends."""
        _, _, end = self._timed("wait sends", self.inner.finish_sends, tag=-1)
        if self.tracer.recording:
            for tag, peer in self._sent:
                self.tracer.message_event("e", "send", tag, peer, 0, end)
        self._sent.clear()
