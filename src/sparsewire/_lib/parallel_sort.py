"""An in-place sort of a large integer array on all of this node's cores: split the array around pivots
drawn from a sample (a compiled, in-place Hoare partition, one pass per level), then sort the parts
concurrently (NumPy's sort releases the GIL). The first levels of a quicksort, done once, so that the
parts that follow need no merge. In a module of its own so that Numba is loaded only for large arrays
(:func:`sparsewire._lib.distinct.sort_in_place` decides)."""

from __future__ import annotations

import numpy as np

from sparsewire._lib.cores import map_on_threads
from sparsewire._lib.jit import njit

__all__ = ["split_sort"]

#: Keys drawn per part to choose its pivot (the median of the draw).
SAMPLE_PER_PART = 4096


@njit(nogil=True, cache=True)
def _split(keys: np.ndarray, pivot) -> int:
    """Reorder ``keys`` so that ``keys[:s] < pivot <= keys[s:]``; returns s (Hoare's scheme, in place)."""
    low = 0
    high = keys.size - 1
    while True:
        while low <= high and keys[low] < pivot:
            low += 1
        while low <= high and keys[high] >= pivot:
            high -= 1
        if low >= high:
            return low
        keys[low], keys[high] = keys[high], keys[low]
        low += 1
        high -= 1


def _halves(part: np.ndarray) -> list[np.ndarray]:
    """``part`` split in place around the median of a sample of it: the two views, either possibly empty."""
    sample = np.sort(part[np.random.default_rng(part.size).integers(0, part.size, SAMPLE_PER_PART)])
    pivot = sample[SAMPLE_PER_PART // 2]
    if pivot == sample[0]:  # a pivot equal to the least key would leave the lower part empty: take the next larger one
        larger = sample[sample > pivot]
        if larger.size == 0:
            return [part]  # (almost) one value: a single part to sort
        pivot = larger[0]
    cut = _split(part, pivot)
    return [part[:cut], part[cut:]]


def split_sort(keys: np.ndarray, threads: int) -> None:
    """Not collective. ``keys.sort()`` (1-D integer ``keys``, in place) on ``threads`` threads.

    Algorithm: ``ceil(log2 threads)`` levels of quicksort partitioning around sample medians (each level's parts
    split concurrently), then every part sorted by NumPy concurrently. The result is the same array as one
    ``keys.sort()``; no memory beyond the sample. The sample is drawn with the part's size as seed: the result does
    not depend on it, only the balance of the parts."""
    if threads < 2 or keys.size < 2 * SAMPLE_PER_PART:
        keys.sort()
        return
    parts = [keys]
    while len(parts) < threads:
        splits = map_on_threads(lambda part: _halves(part) if part.size >= 2 * SAMPLE_PER_PART else [part], parts, threads)
        new_parts = [piece for pieces in splits for piece in pieces]
        if len(new_parts) == len(parts):
            break
        parts = new_parts
    map_on_threads(np.ndarray.sort, parts, threads)
