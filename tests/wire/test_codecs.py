"""Payload codecs (sparsewire.wire.codecs): every entry of bf16, fp16 and int8 within the stated
bound on random and adversarial rows, NaN and Inf kept (bf16) or their rows sent whole, overflowing rows sent
whole, bf16 on float32 rounded exactly as the bit formula of round-to-nearest-even, int8's rounding unbiased.
The commands on coded messages at P = 2..4 are collective cases in tests/mpi/test_codecs_command.py."""

from __future__ import annotations

import numpy as np
import pytest

from sparsewire.errors import InputError
from sparsewire.exec.options import ExecOptions
from sparsewire.wire import codecs

CODED = ("bf16", "fp16", "int8")


def _round_trip(rows: np.ndarray, name: str = "bf16", rng=None) -> tuple[np.ndarray, np.ndarray, int]:
    message = np.zeros(codecs.max_message_bytes(name, *rows.shape, rows.itemsize), np.uint8)
    size = codecs.encode(name, rows, message, rng)
    decoded = np.empty_like(rows)
    assert codecs.decode(name, message[:size], decoded) == rows.shape
    return decoded, message, size


def _adversarial(dtype, rng) -> np.ndarray:
    """Rows of zeros, a constant, denormals (float32's and bf16's), huge values, NaN and Inf, mixed signs."""
    info = np.finfo(dtype)
    k = 9
    rows = [
        np.zeros(k),
        np.full(k, 3.0),
        np.full(k, -(2.0**-130)),  # below bf16's smallest normal
        np.array([info.smallest_subnormal, -info.smallest_subnormal, 2.0**-133, 2.0**-134, 3 * 2.0**-135, 0, 1, -1, 2]),
        np.array([np.nan, np.inf, -np.inf, 1.5, -0.0, 0.0, 1e30, -1e-30, 7.0]),
        np.full(k, float(info.max)),  # float64: past bf16's range, sent whole; float32: rounds within it or whole
        np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-9, 1 - 2.0**-10, 255.5, 256.5, 257.0, -257.0, 1 + 2.0**-20]),
        rng.standard_normal(k) * 10.0 ** rng.integers(-30, 30),
    ]
    return np.array(rows).astype(dtype)


def _assert_within_bound(rows: np.ndarray, decoded: np.ndarray, name: str) -> None:
    x, y = rows.astype(np.float64), decoded.astype(np.float64)
    finite = np.isfinite(x)
    assert np.array_equal(np.isnan(y), np.isnan(x))
    assert np.array_equal(y[np.isinf(x)], x[np.isinf(x)])
    error = np.abs(y[finite] - x[finite])
    bound = codecs.error_bound(name, rows)[finite]
    assert (error <= bound).all(), (name, x[finite][error > bound], y[finite][error > bound], bound[error > bound])


def _pad8(size: int) -> int:
    return -(-size // 8) * 8


@pytest.mark.parametrize("name", CODED)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_entry_is_within_the_stated_bound(name, dtype, rng):
    random = (rng.standard_normal((300, 16)) * np.exp2(rng.integers(-140, 120, (300, 1)))).astype(dtype)
    shifted = (rng.standard_normal((300, 16)) + rng.standard_normal((300, 1)) * 1e3).astype(dtype)  # far from 0
    for rows in (random, shifted, _adversarial(dtype, rng)):
        decoded, message, size = _round_trip(rows, name, rng)
        _assert_within_bound(rows, decoded, name)
        n, k = rows.shape
        whole = message[8 : 8 + n].astype(bool)
        assert np.array_equal(decoded[whole], rows[whole], equal_nan=True)  # rows sent whole come back bitwise
        if name != "bf16":  # their NaN and Inf rows go whole
            assert whole[~np.isfinite(rows).all(axis=1)].all()
        width, meta = {"bf16": (2, 0), "fp16": (2, 4), "int8": (1, 2 * rows.itemsize)}[name]
        coded = 8 + _pad8(n) + _pad8(meta * n) + _pad8(width * n * k)
        assert size == coded + int(whole.sum()) * k * rows.itemsize


def test_float32_rounds_to_nearest_even_exactly(rng):
    """Against the bit formula of round-to-nearest-even on float32 (add 0x7FFF plus the kept lowest bit, keep the
    top 16 bits): a codec that truncates or rounds ties away from even fails here."""
    rows = rng.standard_normal((200, 32)).astype(np.float32)
    bits = rows.view(np.uint32)
    rows[:50] = ((bits[:50] & 0xFFFF0000) | 0x8000).view(np.float32)  # exact ties
    bits = rows.view(np.uint32).astype(np.uint64)
    expected = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    decoded, _, _ = _round_trip(rows, "bf16")
    assert np.array_equal(decoded, expected)


def test_int8_rounding_is_unbiased(rng):
    """The mean of 4000 codings of one row is within 5 standard errors of the row (deterministic rounding to the
    nearest level would be off by up to half a step on every entry), and each coding is one of the two levels."""
    row = rng.uniform(-1, 1, (1, 64))
    row[0, :2] = (-1.0, 1.0)  # the range, so the levels are -1 + j 2/255
    step = 2 / 255
    codings = np.array([_round_trip(row, "int8", rng)[0][0] for _ in range(4000)])
    assert (np.abs(codings - row) <= step * (1 + 1e-9)).all()
    spread = step / 2 / np.sqrt(len(codings))
    assert (np.abs(codings.mean(axis=0) - row[0]) <= 5 * spread).all()


def test_fp16_keeps_2_to_the_minus_11_relative_across_scales(rng):
    for exponent in (-300, -20, 0, 40, 300):
        rows = rng.uniform(0.5, 1.0, (50, 8)) * 2.0**exponent
        decoded, _, _ = _round_trip(rows, "fp16")
        assert (np.abs(decoded - rows) <= 2.0**-11 * rows).all(), exponent


def test_float64_is_rounded_once_not_through_float32():
    """1 + 2^-8 + 2^-30 rounds up to 1 + 2^-7 in one step; through float32 first it would be a tie (1 + 2^-8) and
    go down to 1."""
    rows = np.array([[1 + 2.0**-8 + 2.0**-30, -(1 + 2.0**-8 + 2.0**-30)]])
    decoded, _, _ = _round_trip(rows, "bf16")
    assert decoded.tolist() == [[1 + 2.0**-7, -(1 + 2.0**-7)]]


def test_overflowing_rows_go_whole_and_the_others_shrink():
    rows = np.array([[1.0, 2.0], [1e300, 1.0], [3.0, -4.0]])
    decoded, message, size = _round_trip(rows, "bf16")
    assert message[8:11].tolist() == [0, 1, 0] and np.array_equal(decoded, rows)
    assert size == 8 + 8 + 16 + 2 * 8
    wide = np.array([[-1e308, 1e308], [1.0, 2.0]])  # int8: the range overflows
    decoded, message, _ = _round_trip(wide, "int8")
    assert message[8:10].tolist() == [1, 0] and np.array_equal(decoded[0], wide[0])


def test_fp16_bits_equal_numpys_correctly_rounded_float16(rng):
    """The compiled fp16 rounding against NumPy's float64 -> float16 conversion (correctly rounded, ties to even) of
    the same scaled row: a kernel that truncates, rounds ties away from even or mis-packs a subnormal fails."""
    rows = rng.standard_normal((400, 16)) * np.exp2(rng.integers(-60, 60, (400, 1)))
    rows[:100] *= np.exp2(rng.integers(-40, 0, (100, 16)))  # entries far below the row's largest: float16 subnormals
    odd = rng.integers(1024, 2048, (50, 16)) * 2 + 1  # 12 significant bits, the last one set: ties for 11 bits
    rows[100:150] = odd * np.exp2(rng.integers(-8, 8, (50, 16))) * np.exp2(rng.integers(-30, 30, (50, 1)))
    rows[170:180] = (rng.integers(0, 1024, (10, 16)) * 2 + 1) * 2.0**-25  # ties between float16 subnormals ...
    rows[170:180, 0] = 2.0**14  # ... when the row's largest is 2^14 (scale 1)
    rows[150:160, 3] = 0.0
    rows[160:170, 5] = -0.0
    _, message, _ = _round_trip(rows, "fp16")
    n, k = rows.shape
    meta = 8 + _pad8(n)
    exponents = message[meta : meta + 4 * n].view(np.int32)
    start = meta + _pad8(4 * n)
    bits = message[start : start + 2 * n * k].view(np.uint16).reshape(n, k)
    expected = np.ldexp(rows, -exponents[:, None]).astype(np.float16).view(np.uint16)
    assert np.array_equal(bits, expected)


@pytest.mark.parametrize("kernel", ["bf16_encode", "fp16_encode", "int8_encode", "fp16_decode", "int8_decode"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_kernels_equal_their_python(kernel, dtype, rng):
    """Each kernel of exec/codec_kernels.py compiled by Numba writes what its plain Python writes, bit for bit."""
    from sparsewire.wire import codec_kernels

    block = np.concatenate([_adversarial(dtype, rng), (rng.standard_normal((6, 9)) * 1e3).astype(dtype)])
    block = block[~(np.abs(block.astype(np.float64)) > 1e300).any(axis=1)]  # plain math.ldexp raises past float64's range
    n, k = block.shape
    halves, exponents = rng.integers(0, 0x7C00, (n, k)).astype(np.uint16), rng.integers(-30, 30, n).astype(np.int32)
    codes, lo_step = rng.integers(0, 256, (n, k)).astype(np.uint8), rng.standard_normal((n, 2)).astype(dtype)

    def arguments() -> tuple:  # fresh outputs (and fp16_encode's scratch row with its bits view) per call
        scaled = np.zeros(k)
        return {
            "bf16_encode": (block, np.zeros((n, k), np.uint16), np.zeros(n, np.uint8), scaled, scaled.view(np.uint64)),
            "fp16_encode": (block, np.zeros((n, k), np.uint16), np.zeros(n, np.int32), np.zeros(n, np.uint8), 1e300)
            + (scaled, scaled.view(np.uint64)),
            "int8_encode": (block, np.zeros((n, k), np.uint8), np.zeros((n, 2), dtype), np.zeros(n, np.uint8))
            + (dtype == np.float32, 12345),
            "fp16_decode": (halves, exponents, np.zeros((n, k), dtype), codecs._float16_values()),
            "int8_decode": (codes, lo_step, np.zeros((n, k), dtype)),
        }[kernel]

    plain, fast = arguments(), arguments()
    with np.errstate(all="ignore"):
        getattr(codec_kernels, kernel)(*plain)
    getattr(codec_kernels.compiled(), kernel)(*fast)
    for mine, theirs in zip(plain, fast):
        if isinstance(mine, np.ndarray):
            assert np.array_equal(mine.view(np.uint8), theirs.view(np.uint8)), kernel


@pytest.mark.parametrize("name", CODED)
def test_a_message_for_another_shape_is_refused(name):
    message = np.zeros(codecs.max_message_bytes(name, 4, 3, 8), np.uint8)
    size = codecs.encode(name, np.ones((4, 3)), message)
    with pytest.raises(InputError, match="4 x 3 entries but its receive buffer is 3 x 3"):
        codecs.decode(name, message[:size], np.empty((3, 3)))


def test_the_product_bound_grows_with_the_passes():
    scale, row_scale, operands, terms = np.array([1.0, 100.0]), np.array([2.0, 200.0]), np.array([1.0, 1.0]), np.array([1, 1])
    assert codecs.product_error_bound("none", 2, scale, row_scale, operands, terms).tolist() == [0.0, 0.0]
    one = codecs.product_error_bound("bf16", 1, scale, row_scale, operands, terms)
    two = codecs.product_error_bound("bf16", 2, scale, row_scale, operands, terms)
    assert np.allclose(one, 2.0**-8 * scale) and (two > one).all()
    assert np.allclose(codecs.product_error_bound("int8", 1, scale, row_scale, operands, terms), 2 / 255 * row_scale)


def test_options_refuse_compress_where_it_is_not_built():
    with pytest.raises(InputError, match="unknown compress 'zstd'"):
        ExecOptions(compress="zstd")
    for where in ({"transport": "torch"}, {"mode": "partitioned"}, {"device": "cuda"}):
        with pytest.raises(InputError, match="compress 'int8' is built for the MPI transport"):
            ExecOptions(compress="int8", **where)
    assert ExecOptions(compress="fp16").as_dict()["compress"] == "fp16"


def test_compress_names_a_codec_and_optionally_the_links_between_groups():
    assert codecs.parse_compress("bf16") == ("bf16", "all")
    assert codecs.parse_compress("inter:int8") == ("int8", "inter")
    assert codecs.parse_compress("auto") == ("bf16", "auto")
    assert codecs.parse_compress("auto:int8") == ("int8", "auto")
    for wrong in ("zstd", "inter:none", "intra:bf16", "inter:", ":bf16", "auto:none", "auto:", "auto:auto", "inter:auto"):
        assert "unknown compress" in codecs.parse_compress(wrong), wrong
    assert ExecOptions(compress="inter:fp16").codec == "fp16"
