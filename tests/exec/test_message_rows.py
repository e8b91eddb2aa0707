"""Where messages' rows lie: padding for partitions, and the pieces of messages over the slower link, by hand and on
random sizes."""

from __future__ import annotations

import numpy as np
import pytest

from sparsewire.exec.message_rows import offsets, padded_rows, piece_bounds, row_map


def test_pieces_by_hand():
    # 10 rows of 4 float64: 320 bytes in pieces of 100 -> 4 pieces of 2, 3, 2 and 3 rows (linspace rounded down)
    (cut,) = piece_bounds(np.array([5, 15]), 4, 8, [True], 100)
    assert cut.tolist() == [5, 7, 10, 12, 15]
    # not cut, empty, and more pieces asked than rows (one row each)
    whole, empty, rows = piece_bounds(np.array([0, 3, 3, 5]), 4, 8, [False, True, True], 1)
    assert whole.tolist() == [0, 3] and empty.tolist() == [3, 3] and rows.tolist() == [3, 4, 5]
    assert piece_bounds(np.array([0, 8]), 16, 8, [True], 1 << 20)[0].tolist() == [0, 8]  # under one piece: whole
    with pytest.raises(ValueError, match="positive"):
        piece_bounds(np.array([0, 1]), 1, 8, [True], 0)


def test_pieces_cover_each_message_in_order_and_none_is_far_over_the_size(rng):
    for _ in range(200):
        counts = rng.integers(0, 300, int(rng.integers(1, 6)))
        k, itemsize, piece_bytes = int(rng.integers(1, 40)), int(rng.choice([4, 8])), int(rng.integers(1, 20000))
        cut = rng.random(counts.size) < 0.7
        message_offsets = offsets(counts)
        for message, bounds in enumerate(piece_bounds(message_offsets, k, itemsize, cut.tolist(), piece_bytes)):
            assert bounds[0] == message_offsets[message] and bounds[-1] == message_offsets[message + 1]
            sizes = np.diff(bounds)
            assert np.all(sizes >= 0) and (sizes.max() - sizes.min() <= 1 if sizes.size else True)
            if not cut[message] or counts[message] == 0:
                assert sizes.size == 1
                continue
            # as few pieces as keep each within piece_bytes, but never below one row
            assert sizes.size == max(1, min(counts[message], -(-counts[message] * k * itemsize // piece_bytes)))
            assert sizes.min() >= 1 and (sizes.max() - 1) * k * itemsize < piece_bytes


def test_padding_for_partitions_by_hand():
    assert padded_rows(np.array([3, 0, 5]), 2, 4).tolist() == [4, 0, 6]
    plain, padded = offsets(np.array([3, 0, 5])), offsets(padded_rows(np.array([3, 0, 5]), 2, 4))
    assert row_map(plain, padded).tolist() == [0, 1, 2, 4, 5, 6, 7, 8]
