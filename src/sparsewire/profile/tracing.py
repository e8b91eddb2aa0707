"""A per-rank trace of every multiply in the Chrome Trace Event format (Perfetto, chrome://tracing).

What is recorded: one process per rank (``rank r @ host``), a track per thread; complete spans (``ph: X``)
for the diagonal product, each pack, each post of receives and sends, each wait, each combine of
an exchange or a message and the final combine; each message in flight as an async span on the
sender (post to completion, ``cat: send``) and on the receiver (post to arrival, ``cat:
receive``) with peer, bytes, exchange and link class; and a flow arrow (``ph: s`` / ``f``) from
every send's post to the completion of its receive. A flow's id names the multiply, the exchange
and both ranks, so the two ends match across processes. A message is stamped at the start of the
call that posts it and at the end of the wait that completes it (a wait for a whole exchange
returns when its last message is in), so its arrow never points back in time.

How: for a trace, the executor's parts (the packer, the transport, the combine) are wrapped in proxies
(:mod:`sparsewire.exec.traced_parts`) that time each call (``time.perf_counter_ns``) into a
:class:`Tracer` and delegate; a summary alone (no events) is recorded by the schedule itself, one lap
per phase (:mod:`sparsewire.profile.laps`: no proxy frame per call); tracing off leaves the parts
unwrapped and the laps off (one test of a local per call). Only multiplies in
the window ``[first, stop)`` are recorded, and recording stops at ``limit`` events (said in the
trace's metadata, ``truncated``, and by the command line's warning).

Clocks: :func:`align_clocks` runs ping-pongs against rank 0 at the start and the end of the
trace (Cristian's method: the sample of the smallest round trip is kept, offset = rank 0's time -
the round trip's midpoint), fits offset + drift x time through them and reports the residual
(half the best round trip, the bound on the error of each sample). :func:`write_trace` shifts
every rank's events to rank 0's clock and writes one file.

Every mode is traced (bulk, overlap, pipelined, early on both transports, MPI and
torch.distributed; partitioned on MPI, each of its threads on a track of its own). SpGEMM
(:mod:`sparsewire.spgemm.traced`: its transfers and products) and GNN training
(:class:`~sparsewire.gnn.propagate.GraphOperator`: epochs, layers, propagations and the multiplies
of its plans) record into the same :class:`Tracer`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path

from sparsewire._lib.atomic import atomic_write
from sparsewire.comm.runtime import agree_on_error, agreed
from sparsewire.errors import InputError

__all__ = ["trace", "region", "Tracer", "align_clocks", "write_trace", "measure_costs", "DEFAULT_EVENT_LIMIT"]

#: Events per rank past which recording stops (a trace of about 100 MB).
DEFAULT_EVENT_LIMIT = 1_000_000


@contextlib.contextmanager
def trace(
    plan,
    directory=None,
    *,
    window=(0, None),
    limit: int = DEFAULT_EVENT_LIMIT,
    clock=time.perf_counter_ns,
    name="trace.json",
    summary: bool = True,
):
    """Collective. Record what ``plan`` does inside the block: the multiplies of an
    :class:`~sparsewire.SpmmPlan` (or its executor) or a :class:`~sparsewire.SpgemmPlan`, window
    ``[first, stop)`` of them; or the training of a :class:`~sparsewire.gnn.GraphOperator`'s graph, window
    ``[first, stop)`` of its epochs (each epoch, layer forward and backward and propagation, and the multiplies
    inside). With a ``directory``, every event is kept and one Chrome trace ``directory/name`` is written on
    rank 0 when the block ends (clocks aligned at its start and end: :func:`align_clocks`); without, only each
    phase's count and time are kept. With ``summary`` the block's -log_view summary
    (:func:`~sparsewire.profile.log_view.summarize`) is computed at the end. Yields the :class:`Tracer`; after
    the block its ``path`` (rank 0), ``metadata`` (offsets, drift, residual per rank) and ``summary`` (rank 0)
    are set. Nothing is written when the block raises."""
    from sparsewire.profile.log_view import summarize

    if getattr(plan, "closed", False):  # closing is collective: every rank refuses alike
        raise agreed(InputError(f"sparsewire.trace: this {type(plan).__name__} was closed; trace an open one"))
    target = getattr(plan, "executor", plan)  # an SpmmPlan's executor; SpgemmPlan and GraphOperator trace themselves
    comm = target.comm
    if directory is not None:  # rank 0 writes the trace: every rank learns of a path it cannot write before recording
        problem = None
        if comm.Get_rank() == 0:
            folder = Path(directory)
            if folder.exists() and not folder.is_dir():
                problem = f"sparsewire.trace: {directory} is a file; give a directory for the trace"
            elif (folder / name).is_dir():
                problem = f"sparsewire.trace: {folder / name} is a directory; give another name"
        agree_on_error(comm, problem)
    unit = getattr(target, "trace_unit", "multiply")
    tracer = Tracer(comm.Get_rank(), target.link_of, window, clock, limit, keep_events=directory is not None, unit=unit)
    start = align_clocks(comm, clock) if directory is not None else (0, 0)
    start_at = clock()
    target.start_tracing(tracer)
    try:
        yield tracer
    finally:
        target.stop_tracing()
    if directory is not None:
        end = align_clocks(comm, clock)
        tracer.path, tracer.metadata = write_trace(comm, tracer, directory, start, end, start_at, clock(), name)
    if summary:
        predicted = getattr(plan, "predicted_communication_seconds", None) if hasattr(plan, "stats") else None
        tracer.summary = summarize(comm, tracer, measure_costs(tracer), predicted)


def region(tracer, name: str, **args):
    """Not collective. A context whose block is one span ``name`` of ``tracer`` when it records (a no-op context
    when ``tracer`` is None): the phases traced from inside an algorithm (SpGEMM's products, a layer)."""
    if tracer is None:
        return contextlib.nullcontext()
    return _region(tracer, name, args)


@contextlib.contextmanager
def _region(tracer, name: str, args: dict):
    start = tracer.clock()
    yield
    if tracer.recording:
        tracer.span(name, start, tracer.clock(), **args)


def measure_costs(tracer) -> tuple[float, float]:
    """Not collective. Seconds of one clock read and of one record (a span of the traced parts, or a summary's lap:
    :mod:`~sparsewire.profile.laps`; its clock read not counted), measured now on a scratch copy in this thread's CPU
    time (wall time would count the moments an oversubscribed core ran another rank)."""
    clock, reads = tracer.clock, 10_000
    started = time.thread_time()
    for _ in range(reads):
        clock()
    timer = (time.thread_time() - started) / reads
    if tracer.records_laps:
        from sparsewire.profile.laps import PACK

        push = [].append
        started = time.thread_time()
        for at in range(reads):
            push((PACK, at))
        return timer, (time.thread_time() - started) / reads
    scratch = Tracer(tracer.rank, tracer.link_of, clock=clock, keep_events=tracer.keep_events)
    scratch.begin_multiply()
    started = time.thread_time()
    for _ in range(reads):
        scratch.span("pack", 0, 1, exchange=0)
    return timer, (time.thread_time() - started) / reads


class Tracer:
    """Not collective. Records this rank's events (see the module docstring).

    Args:
        rank: this rank; ``link_of(peer)``: the link class name of a peer (for the message spans).
        window: multiplies (``unit`` multiply) or epochs (``unit`` epoch: :meth:`begin_epoch`) ``[first, stop)``
            to record, counted from 0 when tracing starts.
        clock: nanoseconds of a monotonic clock (tests plant an offset clock).
        limit: events past which recording stops.
    """

    def __init__(
        self,
        rank: int,
        link_of=None,
        window=(0, None),
        clock=time.perf_counter_ns,
        limit=DEFAULT_EVENT_LIMIT,
        keep_events=True,
        unit: str = "multiply",
    ):
        first, stop = window
        if first < 0 or (stop is not None and stop <= first):
            raise InputError(f"trace window [{first}, {stop}) holds no multiply; give 0 <= first < stop")
        self.rank, self.link_of, self.clock, self.limit = rank, link_of or (lambda peer: "network"), clock, limit
        self.first, self.stop = first, stop
        self.events: list[dict] = []
        self.multiply = self.epoch = -1
        self.unit = unit
        self.recording = False
        self.truncated = False
        self.keep_events = keep_events
        self.path = self.metadata = self.summary = None
        self.phases: dict[str, list[int]] = {}  # name -> [count, nanoseconds] over the window
        self.sent: dict[str, list[int]] = {}  # posting phase -> [messages, bytes]
        self.multiplies = self.epochs = 0  # recorded
        self.records_laps = False  # set by an executor whose summary records laps (sparsewire.profile.laps), not spans
        self.lock = threading.Lock()  # the partitioned mode's threads add to shared totals
        self._tracks = {threading.get_ident(): 0}  # OS thread -> track (tid); the tracing thread is 0

    def _inside(self, count: int) -> bool:
        return count >= self.first and (self.stop is None or count < self.stop) and not self.truncated

    def begin_multiply(self) -> None:
        """Not collective. A multiply starts (every rank counts them alike: the flow ids number them)."""
        self.multiply += 1
        if self.unit == "multiply":
            self.recording = self._inside(self.multiply)
        self.multiplies += self.recording

    def begin_epoch(self) -> None:
        """Not collective. A training epoch starts (the window of a tracer whose ``unit`` is epoch)."""
        self.epoch += 1
        self.recording = self._inside(self.epoch)
        self.epochs += self.recording

    def add(self, event: dict) -> None:
        """Not collective. Keep ``event`` (a trace event of this rank), unless only counts are kept or the limit is reached."""
        if not self.keep_events:
            return
        if len(self.events) >= self.limit:
            self.truncated, self.recording = True, False
            return
        event["pid"] = self.rank
        event["tid"] = self.track()
        self.events.append(event)

    def track(self) -> int:
        """Not collective. The track (``tid``) of the calling thread: 0 for the one that started tracing, then
        1, 2, ... in the order other threads (the partitioned mode's) first record."""
        thread = threading.get_ident()
        track = self._tracks.get(thread)
        if track is None:
            with self.lock:
                track = self._tracks.setdefault(thread, len(self._tracks))
        return track

    def totals(self, name: str) -> list[int]:
        """Not collective. Phase ``name``'s [count, nanoseconds] over the window (the list the summary reads; the
        traced parts keep it and add to it in place)."""
        totals = self.phases.get(name)
        if totals is None:
            totals = self.phases[name] = [0, 0]
        return totals

    def span(self, name: str, start: int, end: int, **args) -> None:
        """Not collective. A complete span of this thread, from ``start`` to ``end`` (clock nanoseconds)."""
        totals = self.totals(name)
        totals[0] += 1
        totals[1] += end - start
        if self.keep_events:
            self.span_event(name, start, end, args)

    def span_event(self, name: str, start: int, end: int, args: dict) -> None:
        """Not collective. The trace event of a span (its time is counted by the caller)."""
        self.add({"ph": "X", "name": name, "cat": "phase", "ts": start / 1e3, "dur": (end - start) / 1e3, "args": args})

    def flow_id(self, exchange: int, source: int, destination: int) -> str:
        """Not collective. The id both ends of a message give it: ``multiply:exchange:source:destination``
        (``exchange``: the plan's exchange, or SpGEMM's stage, that carries it)."""
        return f"{self.multiply}:{exchange}:{source}:{destination}"

    def message_event(self, phase: str, side: str, exchange: int, peer: int, size: int | None, at: int) -> None:
        """Not collective. Async begin (``b``) or end (``e``) of a message on its sender (``side`` send) or receiver;
        ``size`` (bytes) goes into the begin's arguments (None: not known yet, SpGEMM's receives; given at the end)."""
        source, destination = (self.rank, peer) if side == "send" else (peer, self.rank)
        event = {"ph": phase, "name": f"{side} {source}->{destination}", "cat": side, "ts": at / 1e3}
        event["id"] = self.flow_id(exchange, source, destination)
        if phase == "b":
            event["args"] = {"peer": peer, "bytes": size, "exchange": exchange, "link": self.link_of(peer)}
        elif size:
            event["args"] = {"bytes": size}
        self.add(event)

    def flow(self, phase: str, exchange: int, source: int, destination: int, at: int) -> None:
        """Not collective. The arrow of one message: ``s`` at its send's post, ``f`` at its receive's completion."""
        event = {"ph": phase, "name": "message", "cat": "flow", "id": self.flow_id(exchange, source, destination), "ts": at / 1e3}
        if phase == "f":
            event["bp"] = "e"  # bound to the enclosing slice (the wait)
        self.add(event)


def align_clocks(comm, clock=time.perf_counter_ns, rounds: int = 50, most: int = 2000, good_ns: int = 4000) -> tuple[int, int]:
    """Collective. This rank's offset to rank 0's clock (nanoseconds to add) and the half round trip of
    the sample it came from (its error bound), from ping-pongs with rank 0 keeping the fastest
    (Cristian's method; rank 0 itself: (0, 0)): at least ``rounds``, and on until one round trip is
    under ``good_ns`` or ``most`` were made (on a busy node, threads of other ranks or of Gloo can
    delay every one of the first fifty). Ranks not in the ping-pong wait asleep, so on an
    oversubscribed node they do not take the cores the two need."""
    rank = comm.Get_rank()
    best = (0, 0)
    for peer in range(1, comm.Get_size()):
        if rank == 0:
            while comm.recv(source=peer, tag=977):
                comm.send(clock(), dest=peer, tag=978)
        elif rank == peer:
            fastest, made = None, 0
            while made < rounds or (fastest[0] > good_ns and made < most):
                sent = clock()
                comm.send(True, dest=0, tag=977)
                reference = comm.recv(source=0, tag=978)
                received = clock()
                made += 1
                if fastest is None or received - sent < fastest[0]:
                    fastest = (received - sent, reference - (sent + received) // 2)
                if made % rounds == 0:
                    time.sleep(0.001)  # let whatever delays the round trips run, then try again
            comm.send(False, dest=0, tag=977)
            best = (fastest[1], fastest[0] // 2)
        done = comm.Ibarrier()
        while not done.Test():
            time.sleep(0.0002)
    return best


def write_trace(comm, tracer: Tracer, directory, start, end, start_at: int, end_at: int, name: str = "trace.json"):
    """Collective. Shift every rank's events to rank 0's clock (offset fitted linearly through the
    alignments ``start`` measured at ``start_at`` and ``end`` at ``end_at``, clock nanoseconds) and write
    ``name`` in ``directory`` on rank 0; its path there (None elsewhere) and the metadata."""
    drift = (end[0] - start[0]) / max(end_at - start_at, 1)
    if abs(drift) * (end_at - start_at) <= 2 * (start[1] + end[1]):  # within the samples' errors: not a drift
        drift = 0.0
    for event in tracer.events:
        local = event["ts"] * 1e3
        event["ts"] = (local + start[0] + drift * (local - start_at)) / 1e3
        if "dur" in event:  # the same affine map for the end, so spans stay nested
            event["dur"] *= 1 + drift
    host = socket.gethostname()
    mine = {
        "rank": tracer.rank,
        "host": host,
        "offset_ns": start[0],
        "drift_ns_per_s": drift * 1e9,
        "residual_us": max(start[1], end[1]) / 1e3,
        "events": len(tracer.events),
        "truncated": tracer.truncated,
    }
    gathered = comm.gather((tracer.events, mine), root=0)
    if comm.Get_rank() != 0:
        return None, None
    events, ranks = [], []
    for rank_events, meta in gathered:
        ranks.append(meta)
        events.append(
            {"ph": "M", "name": "process_name", "pid": meta["rank"], "args": {"name": f"rank {meta['rank']} @ {meta['host']}"}}
        )
        events.append({"ph": "M", "name": "process_sort_index", "pid": meta["rank"], "args": {"sort_index": meta["rank"]}})
        for track in sorted({event["tid"] for event in rank_events}):
            label = {"name": "calling thread" if track == 0 else f"schedule thread {track}"}
            events.append({"ph": "M", "name": "thread_name", "pid": meta["rank"], "tid": track, "args": label})
        events.extend(rank_events)
    metadata = {
        "ranks": ranks,
        "window": [tracer.first, tracer.stop],
        "unit": tracer.unit,
        "multiplies_seen": tracer.multiply + 1,
        "epochs_seen": tracer.epoch + 1,
        "clock": "perf_counter_ns, aligned to rank 0",
    }
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    target = path / name
    with atomic_write(target, "w") as handle:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms", "otherData": metadata}, handle)
    return os.fspath(target), metadata
