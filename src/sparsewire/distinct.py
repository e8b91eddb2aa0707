"""Distinct values of integer arrays by sorting.

``np.unique`` without ``return_*`` flags takes a hash-table path since NumPy 2.3 that is far slower
than a sort on this project's int64 keys (NumPy 2.4.6, this machine: 10 million keys 14.5 s against
0.13 s; 10,000 keys 7 ms against 0.1 ms), so every plain distinct-values call goes through here.
The default sort, not the stable one: equal keys are indistinguishable, and it is 3x faster
(20 million int64 keys: 0.55 s against 1.8 s)."""

from __future__ import annotations

import numpy as np

__all__ = ["distinct", "distinct_counts"]


def distinct(values: np.ndarray, in_place: bool = False) -> np.ndarray:
    """Not collective. The distinct values of ``values`` (flattened), ascending: ``np.unique(values)`` for integers.
    ``in_place``: sort ``values`` (1-D) itself rather than a copy, for callers that hold the only large copy."""
    if in_place and values.ndim == 1:
        values.sort()
        ordered = values
    else:
        ordered = np.sort(np.ravel(values))
    return ordered[_first_of_each(ordered)]


def distinct_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. The distinct values of ``values`` (flattened), ascending, and how often each occurs:
    ``np.unique(values, return_counts=True)`` for integers."""
    ordered = np.sort(np.ravel(values))
    starts = np.flatnonzero(_first_of_each(ordered))
    return ordered[starts], np.diff(np.append(starts, ordered.size))


def _first_of_each(ordered: np.ndarray) -> np.ndarray:
    """True at the first of every run of equal values in sorted ``ordered``."""
    first = np.empty(ordered.size, bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first
