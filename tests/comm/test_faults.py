"""Fault tests under MPI: one rank raises in the middle of a multiply (library under
plain ``python``, and the CLI), raises between multiplies, is sent SIGINT or SIGKILL, or plans
or is started with other arguments than the others. Each job must end within 30 s with the
failing rank's message, a non-zero exit status and no process left behind, at P = 2, 3 and 4.
Each case's time to exit is printed at the end of the run (conftest.pytest_terminal_summary)."""

from __future__ import annotations

import functools
import subprocess
import sys
import time

import pytest

from conftest import CHILD_ENV, EXIT_TIMES, ROOT, mpiexec_path
from sparsewire import testing

DRIVER = str(ROOT / "tests" / "comm" / "fault_driver.py")
LIMIT_S = 30

# case -> what the failing rank's message says
EXPECTED = {
    "raise_in_multiply": "RuntimeError: planted fault in the local product of rank {last}; aborting the job",
    "raise_between": "RuntimeError: planted fault of the program on rank {last}; aborting the job",
    "sigint": "rank {last}: interrupted (SIGINT); aborting the job",
    "sigkill": "EXIT STRING: Killed (signal 9)",
    "disagree_k": "the ranks disagree on k (rank 0 has 4, ",
    "disagree_dtype": "the ranks disagree on dtype (rank 0 has 'float64', ",
    "cli_raise_in_multiply": "rank {last}: RuntimeError: planted fault in the local product of rank {last}; aborting the job",
}


def run_faulty(ranks: int, args: list[str], case: str) -> tuple[testing.Job, float]:
    """Run ``mpiexec -n ranks python ARGS`` (:func:`sparsewire.testing.run_job`) and time it to exit; then no
    process of it may be left."""
    job = testing.run_job(ranks, args, timeout=LIMIT_S + 30, env=CHILD_ENV, cwd=ROOT, settle=0.5)
    assert not job.left_behind, f"processes left behind after {case}: {list(job.left_behind)}"
    EXIT_TIMES.append(f"{case} P={ranks}: exited in {job.seconds:.1f} s (status {job.returncode})")
    return job, job.seconds


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("case", sorted(EXPECTED))
# (in the background, one job at a time: a failing job mostly waits for its ranks to end)
@pytest.mark.prefetch(lambda case, ranks: functools.partial(run_faulty, ranks, [DRIVER, case], case), side=True)
def test_one_failing_rank_ends_the_job_with_its_message(case, ranks, prefetched):
    completed, seconds = prefetched
    output = completed.stdout + completed.stderr
    assert completed.returncode != 0, output
    assert seconds < LIMIT_S, f"{case} took {seconds:.1f} s to end"
    expected = EXPECTED[case].format(last=ranks - 1)
    assert expected in output, output
    assert "the loop ended" not in output


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_ranks_started_with_different_arguments_stop_with_one_error(ranks):
    """An MPMD launch in which the last rank repeats more often than the others."""
    command = [mpiexec_path()]
    for rank in range(ranks):
        repeat = "5" if rank == ranks - 1 else "3"
        command += [
            "-n",
            "1",
            sys.executable,
            "-m",
            "sparsewire",
            "spmm",
            "stencil2d:30",
            "--k",
            "2",
            "--repeat",
            repeat,
            "--partition",
            "even",
        ]
        command += [":"] if rank < ranks - 1 else []
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True, timeout=LIMIT_S + 30, env=CHILD_ENV, cwd=ROOT)
    seconds = time.perf_counter() - start
    EXIT_TIMES.append(f"different --repeat P={ranks}: exited in {seconds:.1f} s (status {completed.returncode})")
    assert completed.returncode == 2 and seconds < LIMIT_S, completed.stdout + completed.stderr
    assert completed.stderr.count("sparsewire: error: the ranks disagree on the argument repeat (rank 0 has 3, ") == 1, (
        completed.stderr
    )
    assert f"rank {ranks - 1} has 5); start every rank with the same command line" in completed.stderr
