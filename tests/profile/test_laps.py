"""The summary's laps (sparsewire.profile.laps): folded stamps give each phase's count and time, and the
messages and bytes posted, exactly (hand-made stamps), also on random multiplies against a plain loop."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from sparsewire.profile.laps import (
    MULTIPLY,
    PACK,
    PHASE_NAMES,
    PHASES,
    POST_SEND,
    POST_SENDS,
    START,
    UNPACK,
    WAIT,
    Laps,
)
from sparsewire.profile.tracing import Tracer


def _buffers(sizes_per_exchange, pieces=None, k=1):
    """Stand-in buffers: exchange e sends messages of the given byte sizes (itemsize 1), cut into the row bounds
    ``pieces[e]`` of k elements where given."""
    exchanges = []
    for index, sizes in enumerate(sizes_per_exchange):
        sizes = np.array(sizes, np.int64)
        exchanges.append(
            SimpleNamespace(
                index=index,
                send_ranks=tuple(range(len(sizes))),
                payload_bytes=lambda itemsize, s=sizes: s * itemsize,
                send_pieces=(pieces or {}).get(index),
            )
        )
    return SimpleNamespace(exchanges=tuple(exchanges), k=k)


def test_hand_made_stamps_fold_to_exact_totals():
    tracer = Tracer(0, keep_events=False)
    # exchange 2's one message, 20 bytes of 5 rows of 4, goes in two pieces of 2 and 3 rows: 8 and 12 bytes
    laps = Laps(tracer, _buffers([[8, 16], [40], [20]], pieces={2: (np.array([0, 2, 5]),)}, k=4), itemsize=1)
    second, third = SimpleNamespace(index=1), SimpleNamespace(index=2)
    for begin in (100, 1000):  # two multiplies
        laps.stamps.extend(
            [
                (START, begin),
                (PACK, begin + 5),  # 5 ns of pack
                (POST_SENDS + PHASES * 0, begin + 7),  # exchange 0's two messages, 24 bytes
                (laps.send_code(second, 0), begin + 10),  # exchange 1's one message, alone: 40 bytes
                (laps.piece_code(third, 0, 0), begin + 12),  # a piece of 8 bytes
                (laps.piece_code(third, 0, 1), begin + 13),  # a piece of 12 bytes
                (WAIT, begin + 30),
                (UNPACK, begin + 31),
                (MULTIPLY, begin + 40),
            ]
        )
    laps.fold()
    assert laps.stamps == []
    assert tracer.phases == {
        "pack": [2, 10],
        "post sends": [2, 4],
        "post send": [6, 12],
        "wait": [2, 34],
        "unpack": [2, 2],
        "multiply": [2, 80],
    }
    assert tracer.sent == {"post sends": [4, 48], "post send": [6, 120]}


def test_random_multiplies_fold_as_a_plain_loop_adds(rng):
    sizes = [list(rng.integers(1, 100, rng.integers(1, 5))) for _ in range(4)]
    buffers = _buffers(sizes)
    tracer = Tracer(0, keep_events=False)
    laps = Laps(tracer, buffers, itemsize=8)
    expected: dict[str, list[int]] = {}
    sent: dict[str, list[int]] = {}
    now = int(rng.integers(10**12))
    for _ in range(int(rng.integers(1, 30))):
        laps.stamps.append((START, now))
        opened = now
        for _ in range(int(rng.integers(0, 12))):
            now += int(rng.integers(0, 1000))
            kind = int(rng.integers(START + 1, MULTIPLY))  # any phase of a multiply
            if kind == POST_SENDS:
                ex = int(rng.integers(len(sizes)))
                code = kind + PHASES * ex
                posted = sent.setdefault("post sends", [0, 0])
                posted[0] += len(sizes[ex])
                posted[1] += 8 * sum(sizes[ex])
            elif kind == POST_SEND:
                ex = int(rng.integers(len(sizes)))
                message = int(rng.integers(len(sizes[ex])))
                code = laps.send_code(SimpleNamespace(index=ex), message)
                posted = sent.setdefault("post send", [0, 0])
                posted[0] += 1
                posted[1] += 8 * sizes[ex][message]
            else:
                code = kind
            totals = expected.setdefault(PHASE_NAMES[kind], [0, 0])
            totals[0] += 1
            totals[1] += now - laps.stamps[-1][1]
            laps.stamps.append((code, now))
        now += int(rng.integers(0, 1000))
        laps.stamps.append((MULTIPLY, now))
        whole = expected.setdefault("multiply", [0, 0])
        whole[0] += 1
        whole[1] += now - opened
    laps.fold()
    assert tracer.phases == expected
    assert tracer.sent == sent
