"""The local CSR x dense kernel (exec/kernels.py): exact on integer data for every register block
and column tail, the same bits with and without B-row prefetching and streamed stores, on any
number of threads, float32 summed in float32, and row ranges that compose."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire._lib.aligned import empty_aligned, zeros_aligned
from sparsewire.errors import InputError
from sparsewire.kernels import compiled as kernels
from sparsewire.kernels import numba_csr as kernels_numba


@pytest.fixture(autouse=True)
def _one_thread_afterwards():
    yield
    kernels.set_threads(1)


def _integer_matrix(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = rng.integers(-9, 10, matrix.nnz).astype(np.float64)
    return sp.csr_array(matrix)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
# k = 8, 16, 32 fill exactly 1, 2, 4 float64 registers (the rows-of-one-block paths); 24, 40 and
# 64 loop over blocks; 3, 67 and 1 leave scalar columns (float32 registers hold 16: 16, 32 and 64
# are one block of one, two and four, 67 one of four and 3 columns). Half a register (4 float64,
# 8 float32) has a loop of its own, and 12 ends in a half register (float64) or starts with one.
@pytest.mark.parametrize("k", [1, 3, 4, 8, 12, 16, 24, 32, 40, 64, 67])
def test_csr_product_exact_with_and_without_prefetch(k, dtype):
    rng = np.random.default_rng()
    matrix = _integer_matrix(rng, (300, 250), 0.05)
    x = rng.integers(-9, 10, (250, k)).astype(dtype)
    expected = (matrix @ x.astype(np.float64)).astype(dtype)
    for threads in (1, 2, 3):
        kernels.set_threads(threads)
        operand = kernels.CsrOperand.from_matrix(matrix, dtype, threads)
        results = []
        for prefetch in (False, True):
            out = np.full((300, k), np.nan, dtype)
            kernels.multiply(dataclasses.replace(operand, prefetch=prefetch), x, out)
            np.testing.assert_array_equal(out, expected)
            kernels.multiply(dataclasses.replace(operand, prefetch=prefetch), x, out, accumulate=True)
            np.testing.assert_array_equal(out, 2 * expected)
            results.append(out)
        assert results[0].tobytes() == results[1].tobytes()


@pytest.mark.parametrize("pool_threads", [1, 2, 3])
def test_row_chunks_are_each_computed_once_whichever_thread_takes_them(pool_threads):
    """Work stealing: an operand cut for 4 threads runs on a pool of 1, 2 or 3, so threads take
    chunks of shares whose own thread is late or absent. Accumulating products show a chunk taken
    twice (a row at 3x or more) or never (a row left at its start); each call must reset the
    counters (a second call would otherwise find every chunk taken)."""
    rng = np.random.default_rng()
    matrix = _integer_matrix(rng, (rng.integers(150, 400), 120), 0.05)
    n_rows = matrix.shape[0]
    operand = kernels.CsrOperand.from_matrix(matrix, np.float64, 4)
    chunks, bounds = operand.chunks, operand.bounds
    assert chunks[0] == 0 and chunks[-1] == n_rows and np.all(np.diff(chunks) >= 0)
    assert chunks.size == 4 * kernels.CHUNKS_PER_THREAD + 1
    np.testing.assert_array_equal(chunks[:: kernels.CHUNKS_PER_THREAD], bounds)  # shares are the threads' ranges
    kernels.set_threads(pool_threads)
    out = np.full((n_rows, 32), np.nan)
    for x in (rng.integers(-9, 10, (120, 32)).astype(np.float64) for _ in range(3)):
        expected = matrix @ x
        kernels.multiply(operand, x, out)
        np.testing.assert_array_equal(out, expected)
        kernels.multiply(operand, x, out, accumulate=True)
        kernels.multiply(operand, x, out, accumulate=True)
        np.testing.assert_array_equal(out, 3 * expected)


def test_prefetch_leaves_random_products_bitwise_unchanged_and_row_ranges_compose():
    rng = np.random.default_rng()
    matrix = sp.csr_array(sp.random_array((500, 400), density=0.02, rng=rng, format="csr"))
    x = rng.standard_normal((400, 32))
    operand = kernels.CsrOperand.from_matrix(matrix, np.float64, 1)
    whole = np.empty((500, 32))
    kernels.multiply(operand, x, whole)
    np.testing.assert_allclose(whole, matrix @ x, rtol=1e-12, atol=1e-12)
    cut = int(rng.integers(1, 499))
    for prefetch in (False, True):
        pieces = np.empty((500, 32))
        flagged = dataclasses.replace(operand, prefetch=prefetch)
        kernels.multiply_rows(flagged, x, pieces, 0, cut)
        kernels.multiply_rows(flagged, x, pieces, cut, 500)
        assert pieces.tobytes() == whole.tobytes()


def test_prefetch_is_chosen_for_short_rows_only():
    rng = np.random.default_rng()
    short = sp.random_array((1000, 1000), density=4 / 1000, rng=rng, format="csr")
    long = sp.random_array((1000, 1000), density=40 / 1000, rng=rng, format="csr")
    assert kernels.CsrOperand.from_matrix(short, np.float64, 1).prefetch
    assert not kernels.CsrOperand.from_matrix(long, np.float64, 1).prefetch
    assert kernels.CsrOperand.from_matrix(sp.csr_array((0, 5)), np.float64, 1).prefetch


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [3, 8, 24, 32, 67])
def test_streamed_stores_give_the_same_bits_and_need_an_aligned_out(k, dtype):
    """``stream`` writes registers with non-temporal stores only into an ``out`` whose rows start
    on cache lines; into a misaligned view it must fall back to ordinary stores (a streamed store
    to a misaligned address would fault)."""
    rng = np.random.default_rng()
    matrix = _integer_matrix(rng, (200, 150), 0.05)
    x = rng.integers(-9, 10, (150, k)).astype(dtype)
    expected = (matrix @ x.astype(np.float64)).astype(dtype)
    for threads in (1, 2):
        kernels.set_threads(threads)
        op = kernels.CsrOperand.from_matrix(matrix, dtype, threads)
        aligned = empty_aligned((200, k), dtype)
        shifted = np.empty(200 * k + 1, dtype)[1:].reshape(200, k)  # one element off a line
        for out in (aligned, shifted):
            out[:] = np.nan
            kernels_numba.csr_dense_threads(
                op.indptr, op.indices, op.data, x, out, op.chunks, op.claimed, False, op.prefetch, True
            )
            np.testing.assert_array_equal(out, expected)
            kernels_numba.csr_dense_range(op.indptr, op.indices, op.data, x, out, 0, 200, True, op.prefetch, True)
            np.testing.assert_array_equal(out, 2 * expected)


def test_multiply_streams_a_large_aligned_out_with_the_same_bits():
    rng = np.random.default_rng()
    rows = kernels.STREAM_AT_LEAST_BYTES // (32 * 8) + 100
    matrix = sp.csr_array(sp.random_array((rows, 3000), density=5 / 3000, rng=rng, format="csr"))
    x = rng.standard_normal((3000, 32))
    op = kernels.CsrOperand.from_matrix(matrix, np.float64, 2)
    kernels.set_threads(2)
    streamed, plain = empty_aligned((rows, 32), np.float64), np.empty(rows * 32 + 1)[1:].reshape(rows, 32)
    kernels.multiply(op, x, streamed)
    kernels.multiply(op, x, plain)
    assert streamed.tobytes() == plain.tobytes()
    np.testing.assert_allclose(streamed, matrix @ x, rtol=1e-12, atol=1e-12)


def test_float32_rows_are_summed_in_float32_in_stored_order():
    """2**24 + 1 + 1: float32 rounds each partial sum back to 2**24, float64 reaches 2**24 + 2
    (which float32 can hold); the registers and the scalar column (k = 17) must both round as
    float32 does."""
    matrix = sp.csr_array((np.ones(3), np.array([0, 1, 2]), np.array([0, 3])), shape=(1, 3))
    operand = kernels.CsrOperand.from_matrix(matrix, np.float32, 1, keep_order=True)
    for k in (17, 8, 16, 12):  # a register and a scalar column, half a register, one, one half and scalars
        x = np.repeat(np.array([[2.0**24], [1.0], [1.0]], np.float32), k, axis=1)
        out = np.empty((1, k), np.float32)
        kernels.multiply(operand, x, out)
        np.testing.assert_array_equal(out, np.full((1, k), 2.0**24, np.float32))


def test_empty_rows_are_zero_whatever_b_holds():
    matrix = sp.csr_array(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))
    for k in (3, 32, 35):
        x = np.vstack([np.ones((1, k)), np.full((1, k), np.inf)])
        out = np.full((3, k), np.nan)
        kernels.multiply(kernels.CsrOperand.from_matrix(matrix, np.float64, 1), x, out)
        np.testing.assert_array_equal(out, np.vstack([np.zeros(k), np.ones(k), np.zeros(k)]))
    out = np.full((3, 32), np.nan)
    kernels.multiply(kernels.CsrOperand.from_matrix(sp.csr_array((3, 0)), np.float64, 1), np.empty((0, 32)), out)
    np.testing.assert_array_equal(out, np.zeros((3, 32)))


def test_column_indices_are_four_bytes_and_give_the_same_bits_as_eight():
    rng = np.random.default_rng()
    matrix = sp.csr_array(sp.random_array((400, 300), density=0.03, rng=rng, format="csr"))
    x = rng.standard_normal((300, 32))
    narrow = kernels.CsrOperand.from_matrix(matrix, np.float64, 2)
    assert narrow.indices.dtype == np.int32
    wide = dataclasses.replace(narrow, indices=narrow.indices.astype(np.int64))  # as for > 2**31 columns
    kernels.set_threads(2)
    results = []
    for operand in (narrow, wide):
        out = np.empty((400, 32))
        kernels.multiply(operand, x, out)
        results.append(out.tobytes())
    assert results[0] == results[1]
    np.testing.assert_allclose(np.frombuffer(results[0]).reshape(400, 32), matrix @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_empty_aligned_starts_on_a_cache_line(dtype):
    for shape in [(0, 4), (1, 1), (7, 3), (1000, 32), 5]:
        array = empty_aligned(shape, dtype)
        assert array.shape == (shape if isinstance(shape, tuple) else (shape,))
        assert array.dtype == dtype and array.flags.c_contiguous
        assert array.size == 0 or array.ctypes.data % 64 == 0
        zeros = zeros_aligned(shape, dtype)
        assert zeros.size == 0 or (zeros.ctypes.data % 64 == 0 and not zeros.any())


def test_generated_b_starts_on_a_cache_line_whatever_its_rows():
    from sparsewire.io.generators import deterministic_dense, deterministic_dense_rows

    for start, stop, k in [(0, 10, 32), (3, 1000, 8), (17, 18, 3)]:
        block = deterministic_dense(start, stop, k)
        assert block.ctypes.data % 64 == 0 and block.flags.c_contiguous and block.shape == (stop - start, k)
    block = deterministic_dense_rows(np.array([5, 1, 123456]), 8, np.float32)
    assert block.ctypes.data % 64 == 0 and block.dtype == np.float32
    assert block[2, 7] == np.float32(0.331205268856138)


def test_blocks_whose_rows_are_not_contiguous_are_refused():
    matrix = sp.csr_array(np.eye(4))
    operand = kernels.CsrOperand.from_matrix(matrix, np.float64, 1)
    with pytest.raises(InputError, match="rows of contiguous elements"):
        kernels.multiply(operand, np.asfortranarray(np.ones((4, 8))), np.empty((4, 8)))
    with pytest.raises(InputError, match="rows of contiguous elements"):
        kernels.multiply_rows(operand, np.ones((4, 8)), np.empty((8, 4)).T, 0, 4)
    wide = np.arange(4 * 16, dtype=np.float64).reshape(4, 16)
    out = np.empty((4, 8))
    kernels.multiply(operand, wide[:, :8], out)  # rows strided apart but each contiguous: fine
    np.testing.assert_array_equal(out, wide[:, :8])


def _message_case(k, dtype):
    """A fresh integer 300 x 120 matrix, a received buffer, C's starting rows and the exact
    ``start + matrix @ buffer`` (integers: any summation order gives these bits)."""
    rng = np.random.default_rng()
    matrix = _integer_matrix(rng, (300, 120), 0.06)
    buffer = rng.integers(-9, 10, (120, k)).astype(dtype)
    start = rng.integers(-9, 10, (300, k)).astype(dtype)
    return rng, matrix, buffer, start, (start.astype(np.float64) + matrix @ buffer.astype(np.float64)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
# k = 8, 16, 32 (float64) and 16, 32, 64 (float32) keep the received row in 1, 2, 4 registers;
# 3 and 40 take the scalar loop.
@pytest.mark.parametrize("k", [3, 8, 16, 32, 40, 64])
def test_csc_message_products_add_exactly_on_any_threads(k, dtype):
    """``apply_columns``: C += A[:, cols] @ buffer[cols] one message (column range) at a time,
    thread t adding only into its own C rows; exact on integer data, whatever the order of the
    messages."""
    rng, matrix, buffer, start, expected = _message_case(k, dtype)
    cuts = np.sort(rng.choice(np.arange(1, 120), 3, replace=False))
    messages = list(zip([0, *cuts], [*cuts, 120]))
    for threads in (1, 2, 3):
        kernels.set_threads(threads)
        bounds = kernels.balanced_bounds(matrix.indptr.astype(np.int64), threads)
        operand = kernels.CscOperand.from_matrix(matrix, dtype, bounds)
        out = start.copy()
        for lo, hi in reversed(messages):
            kernels.apply_columns(operand, buffer, out, int(lo), int(hi))
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", [3, 8, 16, 32, 40, 64])
def test_partition_products_match_the_message_product_bit_for_bit(k, dtype):
    """``apply_elements``: the partitioned mode's product of one partition of a flattened buffer,
    cut anywhere (inside rows, within one row, whole rows), on every thread's rows. Exact on
    integer data, and on random reals bitwise equal to ``apply_columns`` on the whole message (B
    rows are applied in ascending order wherever the cuts fall)."""
    rng, matrix, buffer, start, expected = _message_case(k, dtype)
    real_buffer, real_start = rng.standard_normal((120, k)).astype(dtype), rng.standard_normal((300, k)).astype(dtype)
    real_matrix = matrix.astype(np.float64)
    real_matrix.data = rng.standard_normal(real_matrix.nnz)
    # Cuts inside a row, two in one row (a partition shorter than a row) and on row boundaries.
    cuts = np.unique(np.concatenate([rng.choice(np.arange(1, 120 * k), 5, replace=False), [5 * k + 1, 5 * k + 2, 9 * k, 10 * k]]))
    partitions = list(zip([0, *cuts], [*cuts, 120 * k]))
    for threads in (1, 2, 3):
        kernels.set_threads(threads)
        bounds = kernels.balanced_bounds(matrix.indptr.astype(np.int64), threads)
        for a, b, c0, exact in ((matrix, buffer, start, True), (real_matrix, real_buffer, real_start, False)):
            operand = kernels.CscOperand.from_matrix(a, dtype, bounds)
            out = c0.copy()
            for lo, hi in partitions:
                for thread in range(threads):
                    kernels.apply_elements(operand, thread, b.reshape(-1), k, out, int(lo), int(hi))
            if exact:
                np.testing.assert_array_equal(out, expected)
            else:
                whole = c0.copy()
                kernels.apply_columns(operand, b, whole, 0, 120)
                np.testing.assert_array_equal(out, whole)


@pytest.mark.parametrize("dtype, k", [(np.float32, 8), (np.float32, 16), (np.float64, 4), (np.float64, 8)])
def test_rows_taken_in_pairs_give_the_bits_of_one_row_at_a_time(dtype, k):
    """One register or half of one per C row: rows go in interleaved pairs; each row must still
    sum its nonzeros in stored order, so the bits equal those of each row alone (random values,
    rows of every length including empty ones, an odd row count)."""
    rng = np.random.default_rng()
    lengths = rng.integers(0, 9, 301)
    lengths[rng.choice(301, 40, replace=False)] = 0
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.sort(rng.choice(200, n, replace=False)) for n in lengths]).astype(np.int64)
    matrix = sp.csr_array((rng.standard_normal(indptr[-1]), indices, indptr), shape=(301, 200))
    operand = kernels.CsrOperand.from_matrix(matrix, dtype, 1, keep_order=True)
    x = rng.standard_normal((200, k)).astype(dtype)
    together, alone = np.full((301, k), np.nan, dtype), np.full((301, k), np.nan, dtype)
    kernels.multiply_rows(operand, x, together, 0, 301)
    for row in range(301):
        kernels.multiply_rows(operand, x, alone, row, row + 1)
    assert together.tobytes() == alone.tobytes()
    np.testing.assert_allclose(together, matrix @ x.astype(np.float64), rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-4)


def test_unchecked_element_reads_contiguous_and_strided_arrays_alike():
    """``simd.element`` (the kernels' load without Numba's negative-index wraparound) reads
    ``array[i]`` of a contiguous array and of a strided view, on random data and positions."""
    from numba import njit

    from sparsewire.kernels.simd import element

    @njit
    def read_all(array, positions):
        out = np.empty(positions.size, array.dtype)
        for r in range(positions.size):
            out[r] = element(array, positions[r])
        return out

    rng = np.random.default_rng()
    for dtype in (np.int32, np.float64):  # (4- and 8-byte elements; each dtype and layout is a compile of its own)
        base = rng.integers(-1000, 1000, 301).astype(dtype)
        for array in (base, base[::3], base[5:200:7]):
            positions = rng.integers(0, array.size, 50)
            np.testing.assert_array_equal(read_all(array, positions), array[positions])
    np.testing.assert_array_equal(read_all(np.arange(4.0), np.array([0, 3, 1])), [0.0, 3.0, 1.0])
