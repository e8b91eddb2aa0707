"""The in-place sort on several threads (sparsewire._lib.parallel_sort) and sort_in_place's choice of it."""

from __future__ import annotations

import numpy as np
import pytest

from sparsewire._lib import distinct as distinct_module
from sparsewire._lib.parallel_sort import SAMPLE_PER_PART, _split, split_sort


@pytest.mark.parametrize("threads", [2, 3, 4, 8])
def test_split_sort_equals_numpys_sort(rng, threads):
    """Random sizes around the sample's, few and many distinct values, negative keys, 32 and 64 bits, views."""
    for trial in range(6):
        size = int(rng.integers(1, 12 * SAMPLE_PER_PART))
        high = int(rng.choice([2, 7, 1000, 2**40]))
        dtype = np.int64 if high > 2**31 or trial % 2 else np.int32
        keys = rng.integers(-high, high, size).astype(dtype)
        expected = np.sort(keys)
        mine = keys.copy()
        split_sort(mine, threads)
        assert mine.dtype == dtype and np.array_equal(mine, expected), (trial, size, high)
    backing = rng.integers(0, 100, 6 * SAMPLE_PER_PART)
    view = backing[SAMPLE_PER_PART : 5 * SAMPLE_PER_PART]  # a view sorts in place, the rest untouched
    head, tail, expected = backing[:SAMPLE_PER_PART].copy(), backing[5 * SAMPLE_PER_PART :].copy(), np.sort(view)
    split_sort(view, threads)
    assert np.array_equal(view, expected)
    assert np.array_equal(backing[:SAMPLE_PER_PART], head) and np.array_equal(backing[5 * SAMPLE_PER_PART :], tail)


def test_split_sort_of_one_value_and_of_sorted_keys():
    same = np.full(5 * SAMPLE_PER_PART, 9)
    split_sort(same, 2)
    assert (same == 9).all()
    ascending = np.arange(10 * SAMPLE_PER_PART)[::-1].copy()
    split_sort(ascending, 4)
    assert np.array_equal(ascending, np.arange(10 * SAMPLE_PER_PART))


def test_split_parts_keys_around_the_pivot(rng):
    """By hand, then on random keys: every key before the cut is below the pivot, none after it."""
    keys = np.array([5, 1, 9, 3, 7, 3])
    cut = _split(keys, 4)
    assert cut == 3 and sorted(keys[:3].tolist()) == [1, 3, 3] and sorted(keys[3:].tolist()) == [5, 7, 9]
    for _ in range(20):
        keys = rng.integers(0, 50, int(rng.integers(0, 200)))
        pivot = int(rng.integers(-1, 52))
        before = np.sort(keys)
        cut = _split(keys, pivot)
        assert (keys[:cut] < pivot).all() and (keys[cut:] >= pivot).all() and np.array_equal(np.sort(keys), before)


def test_sort_in_place_takes_the_threads_from_its_threshold(monkeypatch, rng):
    """Below PARALLEL_SORT_FROM, or on one core, or for floats, NumPy's sort; above, the split sort on every core."""
    from sparsewire._lib import parallel_sort

    calls = []
    monkeypatch.setattr(parallel_sort, "split_sort", lambda keys, threads: (calls.append(threads), keys.sort()))
    monkeypatch.setattr(distinct_module, "PARALLEL_SORT_FROM", 1000)
    monkeypatch.setattr("sparsewire._lib.cores.node_cores", lambda: 3)
    for size, dtype, expected_calls in ((999, np.int64, []), (1000, np.int64, [3]), (5000, np.float64, [3])):
        keys = rng.integers(0, 10**6, size).astype(dtype)
        mine = keys.copy()
        distinct_module.sort_in_place(mine)
        assert np.array_equal(mine, np.sort(keys)) and calls == expected_calls, size
    monkeypatch.setattr("sparsewire._lib.cores.node_cores", lambda: 1)
    mine = rng.integers(0, 10**6, 5000)
    distinct_module.sort_in_place(mine)
    assert calls == [3] and (np.diff(mine) >= 0).all()


def test_distinct_through_the_split_sort_equals_numpys_unique(monkeypatch, rng):
    monkeypatch.setattr(distinct_module, "PARALLEL_SORT_FROM", 2 * SAMPLE_PER_PART)
    monkeypatch.setattr("sparsewire._lib.cores.node_cores", lambda: 2)
    values = rng.integers(0, 3000, 9 * SAMPLE_PER_PART)
    expected, counts = np.unique(values, return_counts=True)
    assert np.array_equal(distinct_module.distinct(values), expected)
    found, found_counts = distinct_module.distinct_counts(values)
    assert np.array_equal(found, expected) and np.array_equal(found_counts, counts)


def test_workers_take_every_item_once_and_a_workers_error_reaches_the_caller():
    """cores.in_turn hands each item to exactly one of the threads that on_threads starts; an exception in a
    worker is raised in the caller."""
    import threading

    from sparsewire._lib.cores import in_turn, on_threads

    for threads in (1, 3):
        take, taken, lock = in_turn(range(500)), [], threading.Lock()

        def worker(take=take, taken=taken, lock=lock):
            for item in iter(take, None):
                with lock:
                    taken.append(item)

        on_threads(worker, threads)
        assert sorted(taken) == list(range(500)), threads

    def failing():
        raise ValueError("worker failed")

    with pytest.raises(ValueError, match="worker failed"):
        on_threads(failing, 2)


def test_map_on_threads_keeps_the_order_of_the_items_and_raises_a_workers_error():
    from sparsewire._lib.cores import map_on_threads

    for threads in (1, 2, 5):
        assert map_on_threads(lambda item: item * item, range(40), threads) == [item * item for item in range(40)]
    assert map_on_threads(abs, [], 3) == []
    with pytest.raises(ZeroDivisionError):
        map_on_threads(lambda item: 1 // item, [3, 0, 2], 2)
