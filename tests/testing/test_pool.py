"""The pool of jobs the MPI tests run in (sparsewire.testing.Pool): one start-up per rank count, each
case's output and status as a job of its own would give them, its environment and warnings its own,
and a case that deadlocks or aborts costs its pool, not the next case."""

from __future__ import annotations

import subprocess

import pytest

from sparsewire import testing

pytestmark = pytest.mark.mpi

CASE = """
import os, sys, warnings
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + int(sys.argv[1]), op=MPI.SUM)
warnings.warn("shown once per case", UserWarning)
print(f"rank {comm.Get_rank()} of {comm.Get_size()}: {total} {os.environ.get('POOL_TEST', '-')} {os.getpid()}")
sys.exit(int(sys.argv[2]))
"""


@pytest.fixture
def pool(tmp_path):
    pool = testing.Pool(cwd=tmp_path)
    yield pool
    pool.close()


def test_cases_share_one_job_and_nothing_else(pool, tmp_path, rng):
    script = tmp_path / "case.py"
    script.write_text(CASE)
    base = int(rng.integers(0, 1000))
    first = pool.run(3, [str(script), str(base), "0"], timeout=120, env={"POOL_TEST": "set"})
    second = pool.run(3, [str(script), str(base + 1), "4"], timeout=120)
    expected = sum(range(3)) + 3 * base
    assert first.returncode == 0 and second.returncode == 4
    lines = [line.split() for line in first.stdout.splitlines()]
    assert [line[:4] for line in lines] == [["rank", str(r), "of", "3:"] for r in range(3)]
    assert {line[4] for line in lines} == {str(expected)} and {line[5] for line in lines} == {"set"}
    again = [line.split() for line in second.stdout.splitlines()]
    assert {line[4] for line in again} == {str(expected + 3)} and {line[5] for line in again} == {"-"}  # env restored
    assert {line[6] for line in lines} == {line[6] for line in again}  # the same processes
    assert first.stderr.count("shown once per case") == 3 and second.stderr.count("shown once per case") == 3


def test_a_deadlocked_case_times_out_and_the_next_gets_a_fresh_pool(pool, tmp_path):
    hang = tmp_path / "hang.py"
    hang.write_text("from mpi4py import MPI\nif MPI.COMM_WORLD.Get_rank() == 0:\n    MPI.COMM_WORLD.recv(source=1, tag=99)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        pool.run(2, [str(hang)], timeout=10)
    script = tmp_path / "case.py"
    script.write_text(CASE)
    after = pool.run(2, [str(script), "0", "0"], timeout=120)
    assert after.returncode == 0 and after.stdout.count("of 2:") == 2


def test_an_aborting_case_fails_and_the_next_runs(pool, tmp_path):
    abort = tmp_path / "abort.py"
    abort.write_text("from mpi4py import MPI\nMPI.COMM_WORLD.Abort(5)\n")
    failed = pool.run(2, [str(abort)], timeout=60)
    assert failed.returncode != 0
    script = tmp_path / "case.py"
    script.write_text(CASE)
    assert pool.run(2, [str(script), "1", "0"], timeout=120).returncode == 0
