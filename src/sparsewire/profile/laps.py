"""The summary's own path: a schedule that stamps the end of each phase into a flat list,
folded into the :class:`~sparsewire.profile.tracing.Tracer`'s per-phase totals later.

Why not the traced parts' proxies (:mod:`sparsewire.exec.traced_parts`, which the full trace uses): a
proxy is one more Python frame around each of the ten or so calls of a multiply, and with the caches
cold after a kernel those frames are what a summary costs (``bench/overhead.py trace`` measures it). A lap is
one append of (code, clock read) to a list, inline in the schedule after
the call it closes; the schedule tests one local for None when the summary is off.

Each lap closes a phase that began at the previous lap of the multiply (boundary stamps: one clock
read per phase, not two), so the schedule's own bookkeeping between two calls (a relay's count of
the inputs still missing, a loop's test) is counted in the phase that follows it; the multiply
opens with a ``START`` lap and ends with a ``MULTIPLY`` lap, whose span is the whole multiply. A
code is ``phase + PHASES * key``: the key of a post of a whole exchange's sends is the exchange,
of one message's post ``exchange + exchanges * message``, and of one piece of a cut message a key after those
(:meth:`Laps.piece_code`), so the fold knows the messages and bytes posted (the plan's rows, as the proxies count
them).

Folding is vectorised over the stamps (NumPy) and runs when they pass :data:`FOLD_EVERY` or when tracing
stops, so a long run holds a bounded list.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Laps", "PHASE_NAMES", "FOLD_EVERY", "START", "PACK", "MULTIPLY"]

#: Phase names, by code (as the traced parts name their spans); ``START`` opens a multiply.
PHASE_NAMES = (
    "start",
    "local product",
    "post receives",
    "pack",
    "post sends",
    "post send",
    "wait",
    "unpack",
    "early multiply",
    "wait sends",
    "combine",
    "multiply",
)
START, LOCAL, POST_RECEIVES, PACK, POST_SENDS, POST_SEND, WAIT, UNPACK, EARLY, WAIT_SENDS, COMBINE, MULTIPLY = range(12)
PHASES = 16  # code = phase + PHASES * key

#: Stamps past which they are folded during the run.
FOLD_EVERY = 1 << 16


class Laps:
    """Not collective. One executor's stamps while a summary (without events) records into ``tracer``.

    ``push`` is the list's ``append``: a schedule writes ``push((code, clock()))`` after each call; the
    executor opens a recorded multiply with ``START`` and closes it with ``MULTIPLY`` (and folds once the
    stamps pass :data:`FOLD_EVERY`).
    """

    def __init__(self, tracer, buffers, itemsize: int) -> None:
        self.tracer, self.clock = tracer, tracer.clock
        self.stamps: list[tuple[int, int]] = []
        self.push = self.stamps.append
        self.exchanges = len(buffers.exchanges)
        most = max((len(ex.send_ranks) for ex in buffers.exchanges), default=0)
        # Per exchange the messages and bytes of all its sends; per (exchange, message) one message's bytes.
        self._messages = np.array([len(ex.send_ranks) for ex in buffers.exchanges], np.int64)
        self._bytes = np.zeros(self.exchanges, np.int64)
        self._message_bytes = np.zeros(self.exchanges * max(most, 1), np.int64)
        for ex in buffers.exchanges:
            sizes = ex.payload_bytes(itemsize)
            self._bytes[ex.index] = sizes.sum()
            self._message_bytes[ex.index + self.exchanges * np.arange(len(sizes))] = sizes
        # A piece of a cut message (ExchangeBuffers.send_pieces) is a message of its own, with a key after those.
        self._piece_codes: dict[tuple[int, int, int], int] = {}
        piece_bytes = []
        for ex in buffers.exchanges:
            for message, rows in enumerate(ex.send_pieces or ()):
                for piece, count in enumerate(np.diff(rows).tolist()):
                    key = self._message_bytes.size + len(piece_bytes)
                    self._piece_codes[(ex.index, message, piece)] = POST_SEND + PHASES * key
                    piece_bytes.append(count * buffers.k * itemsize)
        self._message_bytes = np.concatenate([self._message_bytes, np.array(piece_bytes, np.int64)])

    def send_code(self, ex, message: int) -> int:
        """Not collective. The code of one message's post (``POST_SEND``)."""
        return POST_SEND + PHASES * (ex.index + self.exchanges * message)

    def piece_code(self, ex, message: int, piece: int) -> int:
        """Not collective. The code of one piece's post (``POST_SEND``; its bytes are the piece's)."""
        return self._piece_codes[(ex.index, message, piece)]

    def fold(self) -> None:
        """Not collective. Add the stamps to the tracer's totals (``phases``: count and nanoseconds; ``sent``: messages and bytes)
        and empty the list."""
        if not self.stamps:
            return
        pairs = np.array(self.stamps, np.int64)
        self.stamps.clear()
        codes, times = pairs[:, 0], pairs[:, 1]
        kinds, keys = codes % PHASES, codes // PHASES
        since_previous = np.diff(times, prepend=times[0])
        opened = np.maximum.accumulate(np.where(kinds == START, np.arange(len(kinds)), 0))
        spans = np.where(kinds == MULTIPLY, times - times[opened], since_previous)
        for kind in np.unique(kinds):
            if kind == START:
                continue
            name, chosen = PHASE_NAMES[kind], kinds == kind
            totals = self.tracer.totals(name)
            totals[0] += int(chosen.sum())
            totals[1] += int(spans[chosen].sum())
            if kind == POST_SENDS:
                self._add_sent(name, int(self._messages[keys[chosen]].sum()), int(self._bytes[keys[chosen]].sum()))
            elif kind == POST_SEND:
                self._add_sent(name, int(chosen.sum()), int(self._message_bytes[keys[chosen]].sum()))

    def _add_sent(self, name: str, messages: int, size: int) -> None:
        sent = self.tracer.sent.setdefault(name, [0, 0])
        sent[0] += messages
        sent[1] += size
