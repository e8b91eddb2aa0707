"""The collective cases of tests/mpi, one job per rank count (two at P = 3, by file): ``mpiexec -n P python -m
pytest tests/mpi``.

A failing case is named in the job's summary (``FAILED tests/mpi/...::case``) with the ranks it failed on;
one case runs alone as ``mpiexec -n P python -m pytest tests/mpi/FILE::CASE``. Jobs that must fail, be
killed or run on the emulated cluster start their own ``mpiexec`` (``sparsewire.testing.run_job``)."""

from __future__ import annotations

import functools
import re

import pytest

from conftest import COLLECTIVE, COLLECTIVE_JOB_SECONDS, collective_job, run_mpi

#: The rank counts the collective cases run at; each case says which of them it needs (``@pytest.mark.ranks``).
#: (P = 4 before the longest, P = 3: each job leaves the losses that tests/test_torchrun.py's job at its P is
#: held to, and the torchrun tests run while these jobs run, in this order)
RANK_COUNTS = (1, 2, 4, 3)
#: P = 3, the last and longest job, runs as two: the cases of these files in the second, so that the session, waiting
#: for the first at its end, runs the second meanwhile (conftest's prefetch) and both cores work.
SECOND_AT_THREE = (
    "test_executor.py",
    "test_spgemm.py",
    "test_partitions.py",
    "test_transfer_paths.py",
    "test_sddmm.py",
    "test_torch_plans.py",
)


def jobs() -> list:
    """``(ranks, files)`` of each collective job, as test parameters (``3`` and ``3-second`` at P = 3)."""
    second = tuple(f"tests/mpi/{name}" for name in SECOND_AT_THREE)
    first = tuple(f"tests/mpi/{path.name}" for path in sorted(COLLECTIVE.glob("test_*.py")) if path.name not in SECOND_AT_THREE)
    parts = [(ranks, ("tests/mpi",), str(ranks)) for ranks in RANK_COUNTS if ranks != 3] + [
        (3, first, "3"),
        (3, second, "3-second"),
    ]
    return [pytest.param(ranks, files, id=name, marks=beside(ranks)) for ranks, files, name in parts]


def beside(ranks: int):
    """The jobs run in the background (conftest's prefetch): the one-rank job beside the tests that start no mpiexec,
    the others beside those that start their own."""
    return pytest.mark.prefetch(lambda ranks, files: functools.partial(collective_job, ranks, files), last=ranks > 1)


@pytest.mark.mpi
@pytest.mark.timeout(COLLECTIVE_JOB_SECONDS + 60)
@pytest.mark.parametrize("ranks, files", jobs())
def test_collective_cases(ranks, files, request):
    job = request.getfixturevalue("prefetched")
    summary = job.stdout.strip().splitlines()[-1] if job.stdout.strip() else ""
    failures = [line for line in job.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    # (the standard error's last 30,000 characters: every rank's stack dump where a case ran past its limit)
    where = f"P = {ranks}, {' '.join(files)}"
    assert job.returncode == 0, "\n".join([f"{where}: {summary}", *failures, job.stdout[-12000:], job.stderr[-30000:]])
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) > 0, job.stdout[-3000:]
    assert "failed" not in summary and "error" not in summary, summary


PLANTED = """
import pytest


def test_fails_on_rank_one(comm):
    value = comm.allreduce(1)
    assert comm.Get_rank() != 1 or value == 0, "planted on rank one"


def test_runs_after_the_failure(comm):
    assert comm.allreduce(1) == comm.Get_size()


@pytest.mark.ranks(3)
def test_only_at_three_ranks(comm):
    assert comm.Get_size() == 3


@pytest.mark.timeout(5)
def test_leaves_rank_one_behind(comm):
    if comm.Get_rank() != 1:
        comm.allreduce(1)
"""


@pytest.mark.mpi
def test_the_harness_names_a_failure_on_one_rank_and_a_deadlock(tmp_path):
    """Planted faults: an assertion that fails on rank 1 only fails its case on every rank, rank 0 naming rank 1
    and the next case still runs; a case that leaves rank 1 out of a collective ends the job at its 5 s limit with
    the case's frame in the dump, instead of hanging; a case for 3 ranks is left out at 2."""
    (tmp_path / "conftest.py").write_text("from sparsewire.testing.collective import *  # noqa: F403\n")
    (tmp_path / "test_planted.py").write_text(PLANTED)
    arguments = ["-m", "pytest", str(tmp_path / "test_planted.py"), "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    failing = run_mpi(2, [*arguments, "-k", "not behind"], timeout=120)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "FAILED" in failing.stdout and "test_fails_on_rank_one" in failing.stdout
    assert "failed on rank(s) [1] of 2 in call" in failing.stdout and "planted on rank one" in failing.stdout
    assert "1 failed, 1 passed, 2 deselected" in failing.stdout  # -k, and the 3-rank case
    assert failing.stdout.count("passed") == 1  # rank 0 alone reports
    hung = run_mpi(2, [*arguments, "-k", "behind"], timeout=120)
    assert hung.returncode != 0 and hung.seconds < 60, (hung.seconds, hung.stderr[-2000:])
    assert "Timeout (0:00:05)!" in hung.stderr and "in test_leaves_rank_one_behind" in hung.stderr, hung.stderr[-3000:]
