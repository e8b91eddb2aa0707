"""Lossless index coding of SpGEMM's messages (sparsewire.spgemm.index_coding): bit-exact round trips
on hand-made and random messages (every integer type, widths up to 64 bits, empty messages), sizes as the
layout says; and spgemm with ``--compress index`` and ``auto`` at P = 2..4: C bit-identical to the uncoded run,
the uncoded bytes equal to the prediction, fewer bytes on the wire, and with ``auto`` only on the slow links."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import SHARED_MATRICES, run_mpi, slow_link_topology
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


def _spgemm(ranks: int, algorithm: str, *extra: str) -> dict:
    matrix = str(SHARED_MATRICES[1]) if len(SHARED_MATRICES) > 1 else "rmat:12:8:1"
    args = ["-m", "sparsewire", "spgemm", matrix, "--algorithm", algorithm, "--check", "--json", "--repeat", "1", *extra]
    completed = run_mpi(ranks, args, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert report["check_passed"] and report["exact"], report
    assert report["bytes_moved"] == report["predicted_bytes"], report
    return report


@pytest.mark.mpi
def test_spgemm_with_coded_indices_is_bit_identical():
    plain, coded = _spgemm(2, "1d"), _spgemm(2, "1d", "--compress", "index")
    assert coded["compress"] == "index" and coded["compress_auto"] is None
    assert (coded["nnz_out"], coded["checksum_sum"]) == (plain["nnz_out"], plain["checksum_sum"])
    assert coded["bytes_moved"] == plain["bytes_moved"] == plain["wire_bytes"]
    assert coded["wire_bytes"] < 0.9 * coded["bytes_moved"], (coded["wire_bytes"], coded["bytes_moved"])
    # the integer arrays alone, from their own receive statuses: the same decoded, fewer on the wire
    assert plain["index_wire_bytes"] == plain["index_bytes"] == coded["index_bytes"] > 0
    assert coded["index_wire_bytes"] < 0.7 * coded["index_bytes"], (coded["index_wire_bytes"], coded["index_bytes"])


@pytest.mark.mpi
@pytest.mark.parametrize(("ranks", "algorithm", "groups"), [(3, "1d", [0, 0, 1]), (4, "summa", [0, 0, 1, 1])])
def test_auto_codes_the_indices_of_the_slow_links_only(tmp_path, ranks, algorithm, groups):
    """Under a measured topology of two nodes joined at 1 Gbit/s, ``--compress auto`` codes the messages between the
    nodes (a coded integer saves nanoseconds there, more than coding costs) and not those inside a node (50 GB/s);
    so the integers' wire bytes lie strictly between every link coded and none (SUMMA's 2 x 2 grid: a grid row
    inside a node, a grid column across, whose sub-communicators' ranks the decision must translate). With every
    rank in one node nothing is coded, bitwise as none."""
    topology = slow_link_topology(tmp_path / "slow.json", groups)
    coded = _spgemm(ranks, algorithm, "--compress", "index")
    slow = _spgemm(ranks, algorithm, "--compress", "auto", "--topology", str(topology))
    fast = _spgemm(ranks, algorithm, "--compress", "auto", "--topology", f"nodes:{ranks}")
    for run in (slow, fast):  # (each also checked exact against GraphBLAS)
        assert (run["nnz_out"], run["checksum_sum"], run["bytes_moved"], run["index_bytes"]) == (
            coded["nnz_out"],
            coded["checksum_sum"],
            coded["bytes_moved"],
            coded["index_bytes"],
        )
    links = slow["compress_auto"]["links"]
    assert links["measured inter-node"]["coded"] and not links["measured intra-node"]["coded"], links
    # (index_bytes: the integers as decoded, what every link would carry uncoded)
    assert coded["index_wire_bytes"] < slow["index_wire_bytes"] < coded["index_bytes"], (coded, slow)
    assert not any(entry["coded"] for entry in fast["compress_auto"]["links"].values()), fast["compress_auto"]
    assert fast["wire_bytes"] == fast["bytes_moved"] and fast["index_wire_bytes"] == fast["index_bytes"]


@pytest.mark.mpi
@pytest.mark.parametrize(("ranks", "algorithm"), [(3, "1d"), (4, "summa")])
def test_spgemm_with_bf16_values_is_within_its_bound_on_about_a_quarter_of_the_bytes(tmp_path, rng, ranks, algorithm):
    """Real-valued A (magnitudes over 20 orders) times itself with ``--compress bf16``: ``--check`` passes under the
    bound for the plan's passes (SUMMA 2, 1D 1), the uncoded bytes equal the prediction, and the wire carries
    under 0.3x of them (float64 values to 2 bytes, integers bit-packed)."""
    import scipy.io

    matrix = sp.random_array((2000, 2000), density=0.003, rng=rng, format="coo")
    matrix.data = rng.standard_normal(matrix.nnz) * np.exp(rng.uniform(-23, 23, matrix.nnz))
    scipy.io.mmwrite(tmp_path / "a.mtx", matrix)
    args = ["-m", "sparsewire", "spgemm", str(tmp_path / "a.mtx"), "--algorithm", algorithm, "--compress", "bf16"]
    completed = run_mpi(ranks, [*args, "--check", "--json", "--repeat", "1"], timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert report["check_passed"] and not report["exact"] and report["codec_passes"] == (2 if algorithm == "summa" else 1)
    assert report["bytes_moved"] == report["predicted_bytes"] > 0
    assert report["wire_bytes"] < 0.3 * report["bytes_moved"], (report["wire_bytes"], report["bytes_moved"])
    if ranks == 3:  # a lossy codec where values must be exact is refused, naming the lossless one
        refused = run_mpi(2, [*args, "--semiring", "min_plus"], timeout=120)
        assert refused.returncode == 2 and "compress index" in refused.stderr, refused.stderr[-2000:]
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
