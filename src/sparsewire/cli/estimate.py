"""An estimate, before a long run, of how long it will take, measured rather than guessed: the same work is
timed on two samples of the matrix's rows and the time extrapolated to the whole matrix.

A sample keeps every ``s``-th row and empties the others, so the matrix's shape, its partitions and every
rank stay as they are (whatever grows with the ranks is in both samples) while the nonzeros shrink about
s-fold. With the times ``t1``, ``t2`` of samples holding the fractions ``f1 < f2`` of the nonzeros, the
run is taken to cost ``a + b f`` (a part that does not grow with the nonzeros and one that grows linearly,
the shape `bench/planner/planning_scale.py` measures), so the whole takes ``t2 + (t2 - t1) (1 - f2) / (f2 - f1)``.
Where the larger sample ran faster (noise over a run that hardly grows with the nonzeros) it is ``max(t1, t2)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

__all__ = ["ESTIMATE_FROM_NONZEROS", "Estimate", "every_nth_row", "estimate_seconds", "format_seconds"]

#: Runs on matrices with at least this many nonzeros are estimated first. The samples cost 3/64 of the work that
#: grows with the nonzeros and twice the part that does not: 9 s of 83 s at ``analyze rmat:22:16 --ranks 16384``.
ESTIMATE_FROM_NONZEROS = 1_000_000

#: Keep every 64th, then every 32nd row.
SAMPLE_STRIDES = (64, 32)


@dataclass(frozen=True)
class Estimate:
    """The extrapolated seconds of the whole run, and what it came from."""

    seconds: float
    sample_seconds: tuple[float, float]
    sample_fractions: tuple[float, float]

    def describe(self, what: str) -> str:
        """Not collective. One line for the user: the estimate and how it was measured."""
        measured = sum(self.sample_seconds)
        return (
            f"estimate: {what} will take about {format_seconds(self.seconds)} on this machine (the same work on "
            f"1/{SAMPLE_STRIDES[0]} and on 1/{SAMPLE_STRIDES[1]} of the rows took {measured:.1f} s)"
        )


def every_nth_row(matrix: sp.csr_array, stride: int) -> sp.csr_array:
    """Not collective. ``matrix`` with every row but ``0, stride, 2 stride, ...`` emptied: same shape, same
    column indices (dtype kept) in the rows that stay."""
    lengths = np.diff(matrix.indptr)
    keep = np.zeros(matrix.shape[0], bool)
    keep[::stride] = True
    indptr = np.zeros(matrix.shape[0] + 1, matrix.indptr.dtype)
    np.cumsum(np.where(keep, lengths, 0), out=indptr[1:])
    taken = np.repeat(keep, lengths)
    return sp.csr_array((matrix.data[taken], matrix.indices[taken], indptr), shape=matrix.shape)


def estimate_seconds(
    work: Callable[[sp.csr_array], object], matrix: sp.csr_array, clock: Callable[[], float] = time.perf_counter
) -> Estimate:
    """Not collective. Time ``work`` on the two samples of :data:`SAMPLE_STRIDES` and extrapolate (module
    docstring). ``clock`` is the timer (a test gives a stand-in)."""
    matrix = sp.csr_array(matrix)
    seconds, fractions = [], []
    for stride in SAMPLE_STRIDES:
        sample = every_nth_row(matrix, stride)
        fractions.append(sample.nnz / max(matrix.nnz, 1))
        started = clock()
        work(sample)
        seconds.append(clock() - started)
        del sample
    (t1, t2), (f1, f2) = seconds, fractions
    if f2 > f1 and t2 >= t1:
        whole = t2 + (t2 - t1) * (1.0 - f2) / (f2 - f1)
    else:  # the larger sample ran faster: the part that does not grow dominates and the noise hides the rest
        whole = max(t1, t2)
    return Estimate(max(whole, t2), (t1, t2), (f1, f2))


def format_seconds(seconds: float) -> str:
    """Not collective. ``4 s``, ``1 min 20 s``, ``2 h 05 min``."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
