"""Bit-packing (sparsewire._lib.bitpacking) and the planner's coded all-to-all (plan.records.exchange_boxes with
``coded``): lossless on random, extreme and real planner boxes; a message cut short is refused."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire._lib.bitpacking import BLOCK, pack, pack_words, unpack, unpack_words
from sparsewire.errors import PlanMismatchError
from sparsewire.partition import even_rows
from sparsewire.plan import build_plan
from sparsewire.plan.records import _code_boxes, _decode_boxes


def test_words_round_trip_bit_for_bit(rng):
    extremes = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1, 1, np.iinfo(np.int64).min], np.int64)
    cases = [
        np.zeros(0, np.int64),
        extremes,
        rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 1000, dtype=np.int64),  # every step wraps some
        rng.standard_normal(3 * BLOCK + 5).view(np.int64),  # float64 bits
        np.sort(rng.integers(0, 10**6, 5000)),
    ]
    for words in cases:
        assert np.array_equal(unpack_words(pack_words(words)), words)


def test_a_hand_made_run_packs_to_its_zigzag_steps():
    # steps 3, -1, 0, 2 -> zigzag 6, 1, 0, 4: one block of width 3, 12 bits in one word
    message = pack_words(np.array([3, 2, 2, 4], np.int64))
    assert message[:8].view(np.int64)[0] == 4 and message[8] == 3 and message.size == 8 + 8 + 8 * 2
    word = int(message[16:24].view(np.uint64)[0])
    assert [(word >> (3 * i)) & 7 for i in range(4)] == [6, 1, 0, 4]


def test_a_message_cut_short_is_refused(rng):
    message = pack(rng.integers(0, 2**40, 500, dtype=np.uint64))
    with pytest.raises(PlanMismatchError, match="shorter"):
        unpack(message[:-16])
    with pytest.raises(PlanMismatchError, match="header"):
        unpack(message[:4])


def test_the_planners_boxes_round_trip_and_shrink(rng, monkeypatch):
    """Real boxes: every rank's records for its peers while planning a random matrix at P = 5 (``deliver_all`` of
    the one-process planner wrapped), packed into words as the collective planner packs them, coded box by box:
    the words come back bit for bit, in under a fifth of their bytes."""
    import sparsewire.plan.plan as planner
    from sparsewire.plan.records import packed_outboxes

    real_deliver, sizes_seen = planner.deliver_all, []

    def coded_deliver(owned, n_ranks):
        for rank, records in owned.items():
            words, sizes = packed_outboxes(records, rank, n_ranks)
            coded, coded_sizes = _code_boxes(words, sizes)
            back, back_sizes = _decode_boxes(coded, coded_sizes)
            assert np.array_equal(back, words) and np.array_equal(back_sizes, sizes)
            sizes_seen.append((coded.nbytes, words.nbytes))
        return real_deliver(owned, n_ranks)

    monkeypatch.setattr(planner, "deliver_all", coded_deliver)
    n = 600
    seed = int(rng.integers(2**31))
    matrix = sp.random_array((n, n), density=0.02, random_state=np.random.default_rng(seed), format="csr")
    partition = even_rows(n, 5)
    for strategy in ("column", "joint"):
        build_plan(matrix, partition, partition, strategy)
    coded, plain = np.sum(sizes_seen, axis=0)
    assert plain > 0 and coded < plain / 5, (coded, plain)
