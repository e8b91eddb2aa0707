"""The job harness every MPI test starts its jobs with (sparsewire.testing.run_job): output and exit
status come back, a job past its time limit raises instead of hanging, and a process a job leaves
behind is found by the job's own token and killed (a planted orphan)."""

from __future__ import annotations

import os
import subprocess

import pytest

from sparsewire import testing

pytestmark = pytest.mark.mpi


def test_a_job_reports_its_output_and_status(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text(
        "from mpi4py import MPI\nimport sys\nrank = MPI.COMM_WORLD.Get_rank()\n"
        "if rank == 1:\n    print('rank', rank, 'of', MPI.COMM_WORLD.Get_size(), flush=True)\nsys.exit(3)\n"
    )
    job = testing.run_job(2, [str(script)], timeout=120)
    assert job.returncode == 3 and job.stdout == "rank 1 of 2\n"
    assert job.left_behind == () and job.seconds > 0


def test_a_job_past_its_limit_raises_and_leaves_nothing(tmp_path):
    token_file = tmp_path / "token"
    script = tmp_path / "hang.py"
    script.write_text(
        "import os, sys, time\n"
        f"open({str(token_file)!r}, 'w').write(os.environ['{testing.jobs.TOKEN_VARIABLE}'])\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        testing.run_job(1, [str(script)], timeout=5)
    assert testing.left_behind(token_file.read_text()) == []


def test_a_planted_orphan_is_found_and_killed(tmp_path):
    """A rank starts a process of its own and exits: the job ends, the orphan carries the job's token."""
    script = tmp_path / "orphan.py"
    # its output elsewhere, as a daemon's would be: the job's pipes close when the rank exits
    script.write_text(
        "import subprocess\nsubprocess.Popen(['sleep', '120'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    )
    job = testing.run_job(1, [str(script)], timeout=60, settle=0.2)
    assert job.returncode == 0 and len(job.left_behind) == 1
    pid = job.left_behind[0]
    # killed (gone, or a zombie until its parent, the launcher's, reaps it)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] in ("Z", "X")


WAITER = """
import time
from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()
cpu = time.process_time()
if comm.Get_rank() == 0:
    time.sleep(1.0)
comm.Barrier()  # rank 1 waits here for a second
if comm.Get_rank() == 1:
    print(f"{time.process_time() - cpu:.3f}", flush=True)
"""


@pytest.mark.alone  # (the spinning rank's share of a core is what is measured: nothing beside it)
def test_with_sleeping_waits_a_waiting_rank_sleeps_and_without_them_it_spins(tmp_path):
    """Rank 1 waits a second in a barrier for rank 0: with ``SLEEPING_WAITS`` its CPU time in that second, as the
    kernel counts it, is under half of it (0.26-0.39 s seen: MPICH's yield is a short sleep, and a wait that finds
    nothing still costs the rank its wake-ups); with MPICH's own settings (the planted fault) the rank spins, over
    0.6 s of it (1.0 s seen)."""
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    sleeping = testing.run_job(2, [str(script)], timeout=120, env=testing.SLEEPING_WAITS)
    spinning = testing.run_job(2, [str(script)], timeout=120)
    assert sleeping.returncode == 0 and spinning.returncode == 0, sleeping.stderr + spinning.stderr
    assert float(sleeping.stdout) < 0.5, sleeping.stdout
    assert float(spinning.stdout) > 0.6, spinning.stdout
