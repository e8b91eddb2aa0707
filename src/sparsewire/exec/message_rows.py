"""Where each message's rows lie in an exchange's buffers: offsets, padding for partitions, and pieces over the
slower link.

Padding (the partitioned mode): a message's rows are padded so that ``rows * k`` elements split into T equal
partitions; the row maps say where every plan row moved.

Pieces (the overlap schedule), where the bytes, not the cores, set a multiply's time. A whole message is packed
before its first byte leaves and combined after its last byte arrives. Over a link that several peers share, the
messages into a rank all finish near the end, so the receiver's whole unpack and the sender's first pack add to
the time the bytes take. Cut into pieces of about :data:`PIECE_BYTES`, each its own point-to-point message, a
piece is packed while the one before it crosses and combined while the one after it crosses; what is left outside
the bytes is one piece's pack and one piece's unpack.

Both ends cut a message alike from what both know (its rows, k and the element size), and MPI's non-overtaking rule
matches the pieces in order (same source, tag and communicator), so no piece carries a header. Only messages to and
from another group are cut (the buffers' ``first_peers``); the overlap schedule cuts them where the plan relays
nothing (:meth:`~sparsewire.exec.executor.SpmmExecutor`'s choice, the same on every rank).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PIECE_BYTES", "offsets", "padded_rows", "row_map", "piece_bounds"]

#: Payload bytes of one piece: about 1 ms at 1 Gbit/s, so a message of a megabyte is 8 pieces; each piece costs a
#: rendezvous and a call of the unpack kernel (tens of microseconds).
PIECE_BYTES = 1 << 17


def offsets(counts: np.ndarray) -> np.ndarray:
    """Not collective. ``[0, c0, c0 + c1, ...]`` as int64."""
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def padded_rows(rows: np.ndarray, k: int, partitions: int) -> np.ndarray:
    """Not collective. Fewest rows >= ``rows`` whose ``rows * k`` elements split into ``partitions``
    equal parts."""
    padded = np.asarray(rows, np.int64).copy()
    for position, count in enumerate(padded):
        while (count * k) % partitions:
            count += 1
        padded[position] = count
    return padded


def row_map(plain: np.ndarray, padded: np.ndarray) -> np.ndarray:
    """Not collective. New position of every row when each message's rows move from offset ``plain``
    to ``padded``."""
    shift = np.repeat(padded[:-1] - plain[:-1], np.diff(plain))
    return np.arange(plain[-1], dtype=np.int64) + shift


def piece_bounds(
    message_offsets: np.ndarray, k: int, itemsize: int, cut: Sequence[bool], piece_bytes: int
) -> tuple[np.ndarray, ...]:
    """Not collective. The row bounds of every message's pieces: message m holds rows
    ``message_offsets[m]:message_offsets[m + 1]``;
    where ``cut[m]`` it is cut into ``ceil(rows * k * itemsize / piece_bytes)`` pieces whose row counts differ by at
    most one (``numpy.linspace``, rounded down), else it is one piece. Each array runs from the message's first row
    to its end; a message of no rows is one empty piece."""
    if piece_bytes < 1:
        raise ValueError(f"piece_bytes must be positive (got {piece_bytes})")
    bounds = []
    for message, cut_here in enumerate(cut):
        start, stop = int(message_offsets[message]), int(message_offsets[message + 1])
        rows = stop - start
        pieces = max(1, min(rows, -(-rows * k * itemsize // piece_bytes))) if cut_here else 1
        bounds.append(start + np.linspace(0, rows, pieces + 1).astype(np.int64))
    return tuple(bounds)
