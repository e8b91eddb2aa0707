"""Lossless index coding of SpGEMM's messages (sparsewire.spgemm.index_coding): bit-exact round trips
on hand-made and random messages (every integer type, widths up to 64 bits, empty messages), sizes as the
layout says; a lossy codec refused where values must be exact. spgemm with ``--compress index`` and ``auto`` at
P = 2..4 (C bit-identical to the uncoded run, fewer bytes on the wire, ``auto`` only on the slow links) is a
collective case in tests/mpi/test_codecs_command.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import run_mpi
from sparsewire.spgemm.index_coding import BLOCK, decode_indices, encode_indices
from sparsewire.spgemm.local import pack_row_ranges, to_graphblas


def _round_trip(ints: np.ndarray, listed: int) -> np.ndarray:
    message = encode_indices(ints, listed)
    back = decode_indices(message, listed, ints.dtype, ints.size - 2 * listed)
    assert back.dtype == ints.dtype and np.array_equal(back, ints)
    return message


def test_a_hand_made_message_codes_to_its_deltas_exactly():
    # rows 3 and 7 (of a range); lengths 2 and 3; columns (5, 9) and (0, 1, 4)
    ints = np.array([3, 7, 2, 3, 5, 9, 0, 1, 4], np.int32)
    message = _round_trip(ints, 2)
    # deltas 3, 4 | 2, 3 | 5, 4, 0, 1, 3: one block of width 3 (largest 5): 9 values x 3 bits = 27 bits, one word
    assert message[:8].view(np.int64)[0] == 9 and message[8] == 3 and message.size == 8 + 8 + 8 * 2
    word = int(message[16:24].view(np.uint64)[0])
    assert [(word >> (3 * i)) & 7 for i in range(9)] == [3, 4, 2, 3, 5, 4, 0, 1, 3]


@pytest.mark.parametrize("itype", [np.int32, np.int64, np.uint32, np.uint64])
def test_random_messages_round_trip_bit_for_bit(itype, rng):
    top = np.iinfo(itype).max
    for _ in range(20):
        listed = int(rng.integers(0, 400))
        lengths = rng.integers(0, 30, listed)
        rows = np.sort(rng.choice(min(top, 10**6), listed, replace=False))
        width = int(rng.integers(1, 63 if np.iinfo(itype).bits == 64 else 31))
        columns = [np.unique(rng.integers(0, min(top, 2**width), int(n), dtype=np.uint64)) for n in lengths]
        lengths = np.array([len(c) for c in columns], np.int64)
        ints = np.concatenate([rows, lengths, *columns] if listed else [np.zeros(0)]).astype(itype)
        _round_trip(ints, listed)


def test_extremes_round_trip():
    big = np.iinfo(np.uint64).max
    _round_trip(np.array([big, 2, 0, big], np.uint64), 1)  # a 64-bit row id and a 64-bit column delta
    _round_trip(np.zeros(0, np.int32), 0)  # an empty message
    _round_trip(np.array([0, 0], np.int32), 1)  # a listed row without entries
    many = np.concatenate([[5], [3 * BLOCK], np.arange(3 * BLOCK) * 7]).astype(np.int64)  # blocks of one width
    _round_trip(many, 1)


def test_real_matrix_messages_shrink(rng):
    matrix = sp.random_array(
        (2000, 2000), density=0.01, random_state=np.random.default_rng(int(rng.integers(2**31))), format="csr"
    )
    pieces = pack_row_ranges(to_graphblas(matrix, np.float64), np.array([0, 700, 1300, 2000]), np.dtype(np.int32))
    for ints, _, listed in pieces:
        message = _round_trip(ints, listed)
        assert message.nbytes < 0.7 * ints.nbytes  # columns of 2000 need 11 bits, not 32


@pytest.mark.mpi
def test_a_lossy_codec_where_values_must_be_exact_is_refused_naming_the_lossless_one():
    """A refusal ends its job, so it runs in a job of its own; the coded runs are collective cases
    (tests/mpi/test_codecs_command.py)."""
    args = ["-m", "sparsewire", "spgemm", "rmat:8:6:1", "--compress", "bf16", "--semiring", "min_plus"]
    refused = run_mpi(2, args, timeout=120)
    assert refused.returncode == 2 and "compress index" in refused.stderr, refused.stderr[-2000:]
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
