"""One MPI job per rank count for many test cases: a pool that runs script after script in the same
``mpiexec -n P`` processes, so a test suite pays MPI's start-up (and Python's imports, and Numba's
kernels loading) once per P instead of once per case.

The parent (a test process) starts ``mpiexec -n P python -m sparsewire.testing.pool`` and hands it one
case at a time on its standard input, a JSON line ``{"args": [...], "env": {...}, "cwd": ...}``. Rank
0 reads it and broadcasts it; every rank runs the case as ``python ARGS`` would (a script by
:func:`runpy.run_path`, ``-m module`` by :func:`runpy.run_module`, ``-c code``), with ``sys.argv``, the
extra environment and the working directory set, its standard output and error captured, its
warnings fresh (a warning shown once per process is shown once per case); ``SystemExit`` gives its
status, an exception status 1 and its traceback on that rank's error. Then rank 0 gathers every
rank's output, in rank order, and answers with one JSON line. A case that deadlocks or aborts ends
the pool: the parent sees no answer within the case's time limit (or the end of the output), kills
the job, reports the case as failed (:class:`subprocess.TimeoutExpired` on a time-out) and starts a
fresh pool for the next case.

A case must leave the processes as it found them for the next one: communicators freed (the plans
and the SpGEMM objects do), no torch.distributed process group (one per process), no environment
read once at start-up. Cases that must fail, be killed, change MPI's start-up or run under the
emulated cluster start their own job (:func:`sparsewire.testing.run_job`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import subprocess
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass

from sparsewire.testing.jobs import JOB_ENVIRONMENT, Job, mpiexec_path

__all__ = ["Pool", "serve"]

_ANSWER = "sparsewire-pool-answer "
_TAG = 7301  # the pool's own messages, apart from any a case sends
_STARTUP_FILTERS = list(warnings.filters)  # as the interpreter set them, before any case


def _run_case(request: dict) -> tuple[int, str, str]:
    """Not collective (every rank runs it). One case: (exit status, standard output, standard error)."""
    args = list(request["args"])
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    saved_env = {name: os.environ.get(name) for name in request.get("env", {})}
    out, err = io.StringIO(), io.StringIO()
    status = 0
    try:
        os.environ.update(request.get("env", {}))
        if request.get("cwd"):
            os.chdir(request["cwd"])
        # catch_warnings starts the once-shown registries over and restores the filters and showwarning after
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.filters[:] = _STARTUP_FILTERS  # a fresh process's filters
            try:
                if args[0] == "-m":
                    sys.argv = [args[1], *args[2:]]
                    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
                elif args[0] == "-c":
                    sys.argv = ["-c", *args[2:]]
                    exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
                else:
                    sys.argv = list(args)
                    sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
                    runpy.run_path(args[0], run_name="__main__")
            except SystemExit as exit_:
                code = exit_.code
                status = code if isinstance(code, int) else (0 if code is None else 1)
                if not isinstance(code, int) and code is not None:
                    print(code, file=sys.stderr)
            except BaseException:  # the case's failure, reported as a process would report it
                traceback.print_exc()
                status = 1
            sys.stdout.flush()
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return status, out.getvalue(), err.getvalue()


def _next_request(comm) -> dict | None:
    """Collective. The next case: rank 0 reads it (blocking on its standard input) and sends it to the
    others, which poll with a sleep between tests (a wait in a collective would spin on a core while
    the parent runs other tests)."""
    if comm.Get_rank() == 0:
        line = sys.stdin.readline()
        request = json.loads(line) if line and line.strip() else None
        for other in range(1, comm.Get_size()):
            comm.send(request, dest=other, tag=_TAG)
        return request
    pending = comm.irecv(source=0, tag=_TAG)
    while True:
        done, request = pending.test()
        if done:
            return request
        time.sleep(0.005)


def serve() -> None:
    """Collective over MPI_COMM_WORLD. Run cases from rank 0's standard input until it ends."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    real_stdout = sys.stdout
    while True:
        request = _next_request(comm)
        if request is None:
            return
        status, out, err = _run_case(request)
        results = comm.gather((status, out, err), root=0)
        if rank == 0:
            answer = {
                "returncode": max((s for s, _, _ in results), key=abs),
                "stdout": "".join(o for _, o, _ in results),
                "stderr": "".join(e for _, _, e in results),
            }
            real_stdout.write(_ANSWER + json.dumps(answer) + "\n")
            real_stdout.flush()


@dataclass
class _Running:
    process: subprocess.Popen
    lines: list
    done: threading.Event
    errors: list


class Pool:
    """Not collective. Pools of ``mpiexec -n P`` jobs, one per rank count, started on first use
    (``env`` and ``cwd``: what every pool starts with)."""

    def __init__(self, env: dict | None = None, cwd: str | os.PathLike | None = None) -> None:
        """Not collective."""
        self._env = {**os.environ, **JOB_ENVIRONMENT, **(env or {})}
        self._cwd = cwd
        self._jobs: dict[int, _Running] = {}

    def _start(self, ranks: int) -> _Running:
        process = subprocess.Popen(
            [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "sparsewire.testing.pool"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env,
            cwd=self._cwd,
            start_new_session=True,  # so that a time-out kills the launcher and every rank
        )
        running = _Running(process, [], threading.Event(), [])

        def read() -> None:
            for line in process.stdout:
                running.lines.append(line)
                if line.startswith(_ANSWER):
                    running.done.set()
            running.done.set()  # the pool ended

        def drain() -> None:  # what the ranks write outside a case's capture (MPI's own messages, an abort's)
            for line in process.stderr:
                running.errors.append(line)
                del running.errors[:-1000]

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=drain, daemon=True).start()
        return running

    def _stop(self, ranks: int) -> str:
        running = self._jobs.pop(ranks, None)
        if running is None:
            return ""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running.process.pid, 9)
        running.process.wait(timeout=30)
        time.sleep(0.1)  # the reader threads take the last lines
        return "".join(running.errors)

    def run(self, ranks: int, args: list[str], *, timeout: float, env: dict | None = None, cwd=None) -> Job:
        """Not collective (it drives the pool of ``ranks``). Run ``python ARGS`` on ``ranks`` ranks in the pool,
        as :func:`sparsewire.testing.run_job` would in a job of its own.

        Raises:
            subprocess.TimeoutExpired when the case runs past ``timeout`` (the pool is ended first).
        """
        running = self._jobs.get(ranks)
        if running is None or running.process.poll() is not None:
            running = self._jobs[ranks] = self._start(ranks)
        running.done.clear()
        running.lines.clear()
        running.errors.clear()
        request = {"args": list(map(str, args)), "env": env or {}, "cwd": str(cwd) if cwd else None}
        started = time.perf_counter()
        try:
            running.process.stdin.write(json.dumps(request) + "\n")
            running.process.stdin.flush()
        except BrokenPipeError:
            pass
        if not running.done.wait(timeout):
            self._stop(ranks)
            raise subprocess.TimeoutExpired(["pool", str(ranks), *request["args"]], timeout)
        seconds = time.perf_counter() - started
        answers = [line for line in running.lines if line.startswith(_ANSWER)]
        if not answers:  # the pool ended inside the case (an abort): report it as the job's end
            stderr = self._stop(ranks)
            return Job(running.process.returncode or 1, "".join(running.lines), stderr, seconds, ())
        answer = json.loads(answers[-1][len(_ANSWER) :])
        stray = "".join(running.errors)  # what the ranks wrote past the capture, as a job's error would hold it
        return Job(answer["returncode"], answer["stdout"], answer["stderr"] + stray, seconds, ())

    def close(self) -> None:
        """Not collective. End every pool: an empty line tells the ranks to stop."""
        for ranks, running in list(self._jobs.items()):
            with contextlib.suppress(BrokenPipeError, OSError):
                running.process.stdin.write("\n")
                running.process.stdin.flush()
            try:
                running.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._stop(ranks)
            self._jobs.pop(ranks, None)


if __name__ == "__main__":
    serve()
