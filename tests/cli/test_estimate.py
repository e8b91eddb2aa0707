"""The estimate printed before a long run: samples of the rows, the fit and its extrapolation, and the CLI's
lines."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import run_cli
from sparsewire.cli.estimate import SAMPLE_STRIDES, estimate_seconds, every_nth_row, format_seconds


def test_every_nth_row_keeps_those_rows_and_empties_the_rest(rng):
    matrix = sp.random_array((100, 40), density=0.2, format="csr", rng=rng)
    matrix.indices = matrix.indices.astype(np.int32)
    for stride in (1, 3, 32):
        sample = every_nth_row(matrix, stride)
        assert sample.shape == matrix.shape and sample.indices.dtype == np.int32
        kept = np.arange(100) % stride == 0
        assert (sample.toarray()[kept] == matrix.toarray()[kept]).all() and not sample.toarray()[~kept].any()
    hand = sp.csr_array(np.array([[1, 0], [2, 3], [0, 4]]))
    assert every_nth_row(hand, 2).toarray().tolist() == [[1, 0], [0, 0], [0, 4]]


class StandInClock:
    """A timer that the work advances by ``fixed + per_nonzero * nnz``: the estimate must give exactly that
    cost for the whole matrix."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("fixed, per_nonzero", [(0.0, 1e-6), (2.5, 3e-6), (40.0, 0.0)])
def test_estimate_extrapolates_a_fixed_and_a_linear_part_exactly(rng, fixed, per_nonzero):
    matrix = sp.random_array((5000, 5000), density=0.002, format="csr", rng=rng)
    clock = StandInClock()
    seen = []

    def work(sample):
        seen.append(sample.nnz)
        clock.now += fixed + per_nonzero * sample.nnz

    estimate = estimate_seconds(work, matrix, clock)
    assert len(seen) == len(SAMPLE_STRIDES) and seen[0] < seen[1] < matrix.nnz
    assert estimate.seconds == pytest.approx(fixed + per_nonzero * matrix.nnz, rel=1e-9)
    assert estimate.sample_fractions == pytest.approx([n / matrix.nnz for n in seen])


def test_estimate_when_the_larger_sample_ran_faster():
    """Noise can make the larger sample the faster one: then the cost is taken not to grow (the slower sample's)."""
    matrix = sp.random_array((3000, 3000), density=0.003, format="csr", rng=np.random.default_rng(1))
    clock, times = StandInClock(), iter([5.0, 1.0])

    def work(sample):
        clock.now += next(times)

    estimate = estimate_seconds(work, matrix, clock)
    assert estimate.seconds == 5.0


def test_format_seconds():
    assert [format_seconds(s) for s in (0.42, 12.4, 80, 7325)] == ["0.4 s", "12 s", "1 min 20 s", "2 h 02 min"]


def test_analyze_estimates_a_long_run_before_it_starts_and_says_how_it_went():
    result = run_cli(["analyze", "rmat:17:16", "--ranks", "16", "--strategies", "column,joint"])
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    estimate = next(i for i, line in enumerate(lines) if line.startswith("estimate: planning 2 strategies will take about"))
    assert estimate < next(i for i, line in enumerate(lines) if line.startswith("planning column"))
    assert any(line.startswith("planned 2 strategies in ") and "(estimated " in line for line in lines)
    small = run_cli(["analyze", "rmat:10:8", "--ranks", "4"])  # moments: no estimate
    assert small.returncode == 0 and "estimate" not in small.stderr


def test_netsparse_estimates_only_when_asked():
    asked = run_cli(["netsparse", "rmat:10:8", "--nodes", "8", "--rack", "4", "--estimate"])
    assert asked.returncode == 0, asked.stderr
    assert "estimate: the simulation will take about" in asked.stderr and "(estimated " in asked.stderr
    plain = run_cli(["netsparse", "rmat:10:8", "--nodes", "8", "--rack", "4"])
    assert plain.returncode == 0 and "estimate" not in plain.stderr
    assert plain.stdout.splitlines()[:-1] == asked.stdout.splitlines()[:-1]  # the same report but its elapsed time
