"""The executor's parts traced: proxies of the packer, the combine and the transport that
time each call into a :class:`~sparsewire.profile.tracing.Tracer` and delegate.

``SpmmExecutor.start_tracing`` builds a second schedule over these proxies for a trace (events kept) and
for the partitioned mode's threads; a summary alone of the other modes records laps in the schedule
instead (:mod:`sparsewire.profile.laps`: no proxy frame per call). Each call is timed by two clock reads;
while the tracer records, its time and count go into the phase's ``[count, nanoseconds]`` (kept by the
proxy) and, when the tracer keeps events, its span, the message spans and the flow arrows into the
trace. Each method is written out rather than routed through one timing helper: a multiply calls
them about ten times, and a Python frame per call (a few microseconds with the caches cold after a
kernel) is what tracing costs (docs/benchmarks.md, "Profiling").
"""

from __future__ import annotations

from sparsewire.profile.tracing import Tracer

__all__ = ["TracedPacker", "TracedCombine", "TracedTransport"]


class TracedPacker:
    """The packer, each call a ``pack`` span."""

    def __init__(self, inner, tracer: Tracer) -> None:
        self.inner, self.tracer, self.buffers = inner, tracer, inner.buffers
        self._pack = tracer.totals("pack")

    def exchange(self, ex, b) -> None:
        """Not collective. :meth:`Packer.exchange` as a ``pack`` span."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.exchange(ex, b)
        if tracer.recording:
            end = tracer.clock()
            totals = self._pack
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("pack", start, end, {"exchange": ex.index})

    def message(self, ex, message, b) -> None:
        """Not collective. :meth:`Packer.message` as a ``pack`` span."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.message(ex, message, b)
        if tracer.recording:
            end = tracer.clock()
            totals = self._pack
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("pack", start, end, {"exchange": ex.index, "to": int(ex.send_ranks[message])})

    def rows(self, ex, b, start: int, stop: int) -> None:
        """Not collective. :meth:`Packer.rows` (one piece of a message) as a ``pack`` span."""
        tracer = self.tracer
        begin = tracer.clock()
        self.inner.rows(ex, b, start, stop)
        if tracer.recording:
            end = tracer.clock()
            totals = self._pack
            totals[0] += 1
            totals[1] += end - begin
            if tracer.keep_events:
                tracer.span_event("pack", begin, end, {"exchange": ex.index, "rows": stop - start})

    def elements(self, ex, b, start: int, stop: int) -> None:
        """Not collective. The partitioned mode: one thread's share of a message (its own track; the totals under the lock)."""
        tracer = self.tracer
        begin = tracer.clock()
        self.inner.elements(ex, b, start, stop)
        if tracer.recording:
            end = tracer.clock()
            with tracer.lock:
                self._pack[0] += 1
                self._pack[1] += end - begin
            if tracer.keep_events:
                tracer.span_event("pack", begin, end, {"exchange": ex.index})


class TracedCombine:
    """The combine, each call a span (the diagonal product, an exchange's or a message's unpack, the final combine)."""

    def __init__(self, inner, tracer: Tracer) -> None:
        self.inner, self.tracer = inner, tracer
        self._local, self._unpack = tracer.totals("local product"), tracer.totals("unpack")
        self._early, self._combine = tracer.totals("early multiply"), tracer.totals("combine")

    def diagonal(self, b, out, progress=None) -> None:
        """Not collective. The diagonal product as a ``local product`` span."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.diagonal(b, out, progress)
        if tracer.recording:
            end = tracer.clock()
            totals = self._local
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("local product", start, end, {})

    def exchange_arrived(self, ex, out) -> None:
        """Not collective. An exchange's received rows applied, an ``unpack`` span."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.exchange_arrived(ex, out)
        if tracer.recording:
            end = tracer.clock()
            totals = self._unpack
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("unpack", start, end, {"exchange": ex.index})

    def message_arrived(self, ex, message, out) -> None:
        """Not collective. One message's rows applied on arrival, an ``early multiply`` span."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.message_arrived(ex, message, out)
        if tracer.recording:
            end = tracer.clock()
            totals = self._early
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("early multiply", start, end, {"exchange": ex.index})

    def rows_arrived(self, ex, start: int, stop: int, out) -> None:
        """Not collective. One piece's rows applied on arrival, an ``unpack`` span."""
        tracer = self.tracer
        begin = tracer.clock()
        self.inner.rows_arrived(ex, start, stop, out)
        if tracer.recording:
            end = tracer.clock()
            totals = self._unpack
            totals[0] += 1
            totals[1] += end - begin
            if tracer.keep_events:
                tracer.span_event("unpack", begin, end, {"exchange": ex.index, "rows": stop - start})

    def diagonal_rows(self, b, out, thread: int) -> None:
        """Not collective. The partitioned mode: thread ``thread``'s rows of the diagonal product."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.diagonal_rows(b, out, thread)
        if tracer.recording:
            end = tracer.clock()
            with tracer.lock:
                self._local[0] += 1
                self._local[1] += end - start
            if tracer.keep_events:
                tracer.span_event("local product", start, end, {"thread": thread})

    def partition_arrived(self, ex, thread: int, start: int, stop: int, out) -> None:
        """Not collective. The partitioned mode: one received partition applied to thread ``thread``'s rows."""
        tracer = self.tracer
        begin = tracer.clock()
        self.inner.partition_arrived(ex, thread, start, stop, out)
        if tracer.recording:
            end = tracer.clock()
            with tracer.lock:
                self._unpack[0] += 1
                self._unpack[1] += end - begin
            if tracer.keep_events:
                tracer.span_event("unpack", begin, end, {"exchange": ex.index, "thread": thread})

    def finish(self, b, out) -> None:
        """Not collective. The final combine as a ``combine`` span."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.finish(b, out)
        if tracer.recording:
            end = tracer.clock()
            totals = self._combine
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("combine", start, end, {})


class TracedTransport:
    """The transport: post and wait spans; the messages posted, counted per posting phase (``Tracer.sent``); with
    events kept, each message's async spans and its flow arrow."""

    def __init__(self, inner, tracer: Tracer) -> None:
        self.inner, self.tracer = inner, tracer
        self.itemsize = inner.ledger.itemsize
        self._messages: dict[int, tuple] = {}  # exchange index -> its peers and sizes as Python ints, made once
        self._receives, self._wait = tracer.totals("post receives"), tracer.totals("wait")
        self._sends, self._send = tracer.totals("post sends"), tracer.totals("post send")
        self._wait_sends, self._ready = tracer.totals("wait sends"), tracer.totals("post partition")
        self._sent_by_sends, self._sent_by_send = (
            tracer.sent.setdefault("post sends", [0, 0]),
            tracer.sent.setdefault("post send", [0, 0]),
        )

    def __getattr__(self, name):  # everything else (sends_message_by_message, free, ledger, ...) is the transport's
        return getattr(self.inner, name)

    def _of(self, ex) -> tuple[list[int], list[int], int, list[int], list[int]]:
        """(destinations, bytes per send, bytes of all sends, sources, bytes per receive) of exchange ``ex``."""
        known = self._messages.get(ex.index)
        if known is None:
            sizes = ex.payload_bytes(self.itemsize)
            known = self._messages[ex.index] = (
                [int(rank) for rank in ex.send_ranks],
                [int(size) for size in sizes],
                int(sizes.sum()),
                [int(rank) for rank in ex.recv_ranks],
                [int(elements) * self.itemsize for elements in ex.expected_elements],
            )
        return known

    def _sent(self, ex, message: int, at: int) -> None:
        destinations, sizes = self._of(ex)[:2]
        self.tracer.message_event("b", "send", ex.index, destinations[message], sizes[message], at)
        self.tracer.flow("s", ex.index, self.tracer.rank, destinations[message], at)

    def _arrived(self, ex, message: int, at: int) -> None:
        source = self._of(ex)[3][message]
        self.tracer.flow("f", ex.index, source, self.tracer.rank, at)
        self.tracer.message_event("e", "receive", ex.index, source, 0, at)

    def post_receives(self, ex) -> None:
        """Not collective (point to point with the peers). A ``post receives`` span; each receive's start."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.post_receives(ex)
        if tracer.recording:
            end = tracer.clock()
            totals = self._receives
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("post receives", start, end, {"exchange": ex.index})
                _, _, _, sources, sizes = self._of(ex)
                for source, size in zip(sources, sizes):
                    tracer.message_event("b", "receive", ex.index, source, size, start)

    def start_sends(self, ex) -> None:
        """Not collective (point to point with the peers). A ``post sends`` span; each send's start and arrow."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.start_sends(ex)
        if tracer.recording:
            end = tracer.clock()
            totals = self._sends
            totals[0] += 1
            totals[1] += end - start
            destinations, _, size = self._of(ex)[:3]
            sent = self._sent_by_sends
            sent[0] += len(destinations)
            sent[1] += size
            if tracer.keep_events:
                tracer.span_event("post sends", start, end, {"exchange": ex.index})
                for message in range(len(destinations)):
                    self._sent(ex, message, start)

    def start_send(self, ex, message: int) -> None:
        """Not collective (point to point with the peers). A ``post send`` span; the send's start and arrow."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.start_send(ex, message)
        if tracer.recording:
            end = tracer.clock()
            totals = self._send
            totals[0] += 1
            totals[1] += end - start
            sent = self._sent_by_send
            sent[0] += 1
            sent[1] += self._of(ex)[1][message]
            if tracer.keep_events:
                tracer.span_event("post send", start, end, {"exchange": ex.index})
                self._sent(ex, message, start)

    def start_piece(self, ex, message: int, piece: int) -> None:
        """Not collective (point to point with the peers). A ``post send`` span for one piece of a cut message (its
        bytes); the message's start and arrow at its first piece."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.start_piece(ex, message, piece)
        if tracer.recording:
            end = tracer.clock()
            totals = self._send
            totals[0] += 1
            totals[1] += end - start
            rows = ex.send_pieces[message]
            sent = self._sent_by_send
            sent[0] += 1
            sent[1] += int(rows[piece + 1] - rows[piece]) * ex.send_buffer.shape[1] * self.itemsize
            if tracer.keep_events:
                tracer.span_event("post send", start, end, {"exchange": ex.index, "piece": piece})
                if piece == 0:
                    self._sent(ex, message, start)

    def wait_piece(self, ex):
        """Not collective (point to point with the peers). A ``wait`` span for one piece; the message's end and arrow
        head once its last piece is in."""
        tracer = self.tracer
        start = tracer.clock()
        arrival = self.inner.wait_piece(ex)
        if tracer.recording:
            end = tracer.clock()
            totals = self._wait
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("wait", start, end, {"exchange": ex.index})
                rows = ex.recv_pieces[arrival[0]]
                if arrival[2] == rows[-1]:  # the message's last piece: MPI matches its pieces in order
                    self._arrived(ex, arrival[0], end)
        return arrival

    def wait_receives(self, ex) -> None:
        """Not collective (point to point with the peers). A ``wait`` span; each receive's end and arrow head."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.wait_receives(ex)
        if tracer.recording:
            end = tracer.clock()
            totals = self._wait
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("wait", start, end, {"exchange": ex.index})
                for message in range(len(ex.recv_ranks)):
                    self._arrived(ex, message, end)

    def wait_any(self):
        """Not collective (point to point with the peers). A ``wait`` span for one arrival; its end and arrow head."""
        tracer = self.tracer
        start = tracer.clock()
        index, message = self.inner.wait_any()
        if tracer.recording:
            end = tracer.clock()
            totals = self._wait
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("wait", start, end, {})
                self._arrived(self.inner.buffers.exchanges[index], message, end)
        return index, message

    def wait_sends(self, ex) -> None:
        """Not collective (point to point with the peers). A ``wait sends`` span; each send's end."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.wait_sends(ex)
        if tracer.recording:
            end = tracer.clock()
            totals = self._wait_sends
            totals[0] += 1
            totals[1] += end - start
            if tracer.keep_events:
                tracer.span_event("wait sends", start, end, {"exchange": ex.index})
                for destination in self._of(ex)[0]:
                    tracer.message_event("e", "send", ex.index, destination, 0, end)

    def mark_ready(self, ex, message: int, partition: int) -> None:
        """Not collective (point to point with the peers). The partitioned mode: a thread's partition of a sent
        message may go (``MPI_Pready``), a ``post partition`` span."""
        tracer = self.tracer
        start = tracer.clock()
        self.inner.mark_ready(ex, message, partition)
        if tracer.recording:
            end = tracer.clock()
            with tracer.lock:
                self._ready[0] += 1
                self._ready[1] += end - start
            if tracer.keep_events:
                tracer.span_event("post partition", start, end, {"exchange": ex.index, "partition": partition})

    def partition_arrived(self, ex, message: int, partition: int) -> bool:
        """Not collective. The partitioned mode's poll for a received partition: delegated, not recorded (the
        threads spin on it)."""
        return self.inner.partition_arrived(ex, message, partition)
