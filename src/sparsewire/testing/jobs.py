"""Starting an MPI job from a test: ``mpiexec -n P python ARGS`` with a bound on its time, and no
process of it left behind.

A job that deadlocks becomes a :class:`subprocess.TimeoutExpired` at ``timeout`` seconds instead of
hanging the test run (``subprocess.run`` kills ``mpiexec``, and the sweep below what it left).
Every job carries a token of its own in its environment (:data:`TOKEN_VARIABLE`, which the launcher
passes to every rank), so the processes of that job alone can be found afterwards and killed
(:func:`left_behind`): a test of a rank that dies asserts there were none.
Each rank runs one BLAS and OpenMP thread unless asked otherwise: busy-waiting BLAS threads starve
MPI's progress when ranks outnumber cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "JOB_ENVIRONMENT",
    "SLEEPING_WAITS",
    "TOKEN_VARIABLE",
    "Job",
    "mpiexec_path",
    "run_job",
    "left_behind",
    "still_running",
]

#: The environment variable that holds a job's token.
TOKEN_VARIABLE = "SPARSEWIRE_JOB_TOKEN"

#: The environment every job's ranks start with, beside the caller's: one BLAS/OpenMP thread per rank, and idle
#: OpenMP threads that sleep (a test job's ranks share the cores; a rank that imports PyTorch loads its OpenMP before
#: sparsewire could ask for that, and spinning threads made a two-level plan's test at P = 3 on 2 cores 3x slower).
JOB_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}

#: MPICH's settings for a job whose processes outnumber the cores: a rank that has polled 100 times for a message
#: without one sleeps (nanosleep) instead of spinning, so a rank with work gets a whole core (three ranks on 2 cores,
#: two of them waiting: the one computing ran at 0.6 of a core, at 1.0 with these). Each wait then lasts about 0.1 ms
#: longer, so a job that times its messages leaves these out.
SLEEPING_WAITS = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1", "MPIR_CVAR_POLLS_BEFORE_YIELD": "100"}


@dataclass(frozen=True)
class Job:
    """What a job did: its exit status, standard output and error, its wall time, and the processes of
    it that were still there after it ended (killed then)."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    left_behind: tuple[int, ...]


def mpiexec_path() -> str:
    """Not collective. The ``mpiexec`` beside this Python (the MPICH wheel's), else the one on PATH."""
    candidate = Path(sys.executable).parent / "mpiexec"
    return str(candidate) if candidate.exists() else "mpiexec"


def left_behind(token: str) -> list[int]:
    """Not collective. The processes whose environment holds ``token`` (this process excepted)."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if needle in handle.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def still_running(pids: list[int], within: float) -> list[int]:
    """Not collective. Those of ``pids`` still running after at most ``within`` seconds, polled every 20 ms: a bound,
    not a pause (signals are delivered asynchronously, and most processes end at once)."""
    deadline = time.monotonic() + within
    alive = [pid for pid in pids if _running(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [pid for pid in alive if _running(pid)]
    return alive


def run_job(
    ranks: int,
    args: list[str],
    *,
    timeout: float,
    env: dict | None = None,
    cwd: str | os.PathLike | None = None,
    settle: float = 0.0,
    launcher: str = "mpiexec",
) -> Job:
    """Not collective (it starts the job). Run ``mpiexec -n RANKS python ARGS`` (``launcher="torchrun"``:
    ``torchrun --standalone --nproc-per-node RANKS ARGS``, its processes joined by torch.distributed alone) and wait
    at most ``timeout`` seconds; then kill whatever of the job is still there ``settle`` seconds later (found by its
    token) and report it in :attr:`Job.left_behind`.

    Raises:
        subprocess.TimeoutExpired when the job runs past ``timeout`` (its processes are killed first).
    """
    token = f"sparsewire-job-{uuid.uuid4().hex}"
    environment = {**os.environ, **JOB_ENVIRONMENT, **(env or {}), TOKEN_VARIABLE: token}
    started = time.perf_counter()
    try:
        if launcher == "torchrun":
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *args]
        else:
            command = [mpiexec_path(), "-n", str(ranks), sys.executable, *args]
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
            cwd=cwd,
        )
    finally:
        seconds = time.perf_counter() - started
        left = left_behind(token)
        settled = time.monotonic() + settle
        while left and time.monotonic() < settled:  # (those that end within ``settle`` are not left behind)
            time.sleep(0.02)
            left = left_behind(token)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        still_running(left, 5.0)  # until the killed are gone
    return Job(completed.returncode, completed.stdout, completed.stderr, seconds, tuple(left))
