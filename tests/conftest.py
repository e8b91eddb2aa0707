"""Shared fixtures: a printed random seed, paths, and helpers that run the CLI and mpiexec."""

from __future__ import annotations

import functools
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from session_results import RESULTS_VARIABLE

from sparsewire import testing
from sparsewire.testing.jobs import JOB_ENVIRONMENT

# The processes the tests start keep their bytecode: where the caller's environment says not to write it
# (PYTHONDONTWRITEBYTECODE), every rank compiled sparsewire and rewrote the collective cases anew, 3 s of each
# rank's start in a suite that starts several hundred.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
SHARED_MATRICES = sorted(SHARED_DATA.glob("*.mtx.gz")) if SHARED_DATA.is_dir() else []

# One BLAS/OpenMP thread per rank, idle OpenMP threads asleep: busy-waiting threads starve MPI progress when ranks
# outnumber cores.
CHILD_ENV = {**os.environ, **JOB_ENVIRONMENT}


#: The warning filters the interpreter started with (before any test's): what a command run in a process of its
#: own would see.
STARTUP_WARNING_FILTERS = list(__import__("warnings").filters)

#: What tests/comm/test_faults.py measured: each fault case's time to exit, printed after the run.
EXIT_TIMES: list[str] = []
#: What tests/io/test_fuzz.py ran: the number of inputs and the seed, printed after the run.
FUZZ_LINES: list[str] = []


#: What starts ``mpiexec`` in a test's own source: such a test is marked ``mpi`` at collection.
_MPI_CALLS = ("run_mpi(", "mpiexec_path(", "run_faulty(", "driver_json(", "job_of(")
_CURRENT: list = [None]  # the test running now (run_mpi refuses to start mpiexec for one not marked mpi)


COLLECTIVE = ROOT / "tests" / "mpi"

_RESULTS: list[Path] = []
_RESULTS_LOCK = threading.Lock()


def results_folder() -> Path:
    """The session's folder for what its collective jobs leave for other tests (tests/session_results.py), made at
    the first call (from the prefetch thread or the main one) and removed at the session's end."""
    with _RESULTS_LOCK:
        if not _RESULTS:
            _RESULTS.append(Path(tempfile.mkdtemp(prefix="sparsewire-session-results-")))
        return _RESULTS[0]


def pytest_unconfigure(config):
    for folder in _RESULTS:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_ignore_collect(collection_path, config):
    """tests/mpi holds collective cases: they run on every rank of a job that tests/test_collective.py
    starts (or that a person starts with ``mpiexec -n P python -m pytest tests/mpi/...``), never inside
    this process's plain run of the suite."""
    if Path(collection_path) != COLLECTIVE:
        return None
    named = any(Path(arg.split("::")[0]).resolve().is_relative_to(COLLECTIVE) for arg in config.args)
    return None if named else True


#: The collective job that starts before collection (:meth:`_Prefetch.pytest_sessionstart`).
HEAD_START = "tests/test_collective.py::test_collective_cases[1]"
#: Seconds one collective job may take: every case at that P in turn (each case has pytest-timeout's 300 s as well).
COLLECTIVE_JOB_SECONDS = 1500


def collective_job(ranks: int, files: tuple[str, ...] = ("tests/mpi",)) -> testing.Job:
    """``mpiexec -n RANKS python -m pytest FILES`` (tests/test_collective.py: the cases of tests/mpi, or of some of its
    files) with the seed the whole run prints, and the session's folder for what its cases leave for other tests."""
    # (no case uses Hypothesis: its plugin's import at the end cost 3 s of each rank's time)
    arguments = ["-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    environment = {"SPARSEWIRE_TEST_SEED": str(_seed()), RESULTS_VARIABLE: str(results_folder())}
    # (their ranks share the cores with the session's other tests: those that wait sleep instead of spinning)
    environment.update(testing.SLEEPING_WAITS)
    return testing.run_job(ranks, arguments, timeout=COLLECTIVE_JOB_SECONDS, env=environment, cwd=ROOT)


def _prefetch_run(item):
    """The call that runs ``item``'s ``prefetch`` command: ``subprocess.run`` with its arguments, or the command itself
    where it is a function (a job of :func:`sparsewire.testing.run_job`)."""
    marker = item.get_closest_marker("prefetch")
    command = marker.args[0](**(item.callspec.params if hasattr(item, "callspec") else {}))
    if callable(command):
        return command
    options = dict(capture_output=True, text=True, timeout=marker.kwargs.get("timeout", 600), env=CHILD_ENV, cwd=ROOT)
    return functools.partial(subprocess.run, [str(arg) for arg in command], **options)


def _run_here(item) -> Future:
    """``item``'s command run in this thread, as a finished future."""
    done = Future()
    try:
        done.set_result(_prefetch_run(item)())
    except Exception as error:  # (raised again where its test asks for the result)
        done.set_exception(error)
    return done


class _Prefetch:
    """Commands that tests run in processes of their own (the analyses of the shared matrices, the fuzzers, the
    collective cases' jobs), started in the background while the session goes on, one at a time (a test that needs
    one the lane has not started runs it itself, and one that waits for the lane runs the lane's next ones). A test
    marked ``prefetch(command, timeout=...)``, where ``command(**its parameters)`` gives the argument vector (or a
    function that runs the job), gets the finished process from the ``prefetched`` fixture. The session runs the
    tests that start no mpiexec first, then the prefetched ones (whose processes are done by then), then those that
    start mpiexec themselves, then the prefetched ones marked ``prefetch(..., last=True)`` (the collective jobs at P
    > 1, run in the background meanwhile: the mpiexec tests leave a core idle for much of their time) or
    ``side=True``, and last those marked ``alone``: they time links or a job's end, so nothing runs beside them. The
    jobs marked ``side`` (the fault jobs, which mostly wait for a failing job to end) run in a second lane, one at a
    time, from the first mpiexec test on."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        self.side = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch-side")
        self.futures: dict = {}
        self.groups: dict = {}  # node id: "soon" or "late" (what a waiting test may run of the lane's queue)
        self.items: dict = {}  # node id: item, for the commands of the lane
        self.waiting: list = []  # the second lane's items, until the first mpiexec test starts them
        self.second_phase: set = set()  # the node ids from the first mpiexec test on

    def pytest_sessionstart(self, session):
        """The one-rank collective job starts now, before collection, where the session runs the whole suite (no
        paths, -k or -m given): the longest of the first commands, on a core that collection leaves idle."""
        config = session.config
        whole = config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.option.keyword
        if whole and not config.option.markexpr and not config.option.collectonly and not config.option.lf:
            self.futures[HEAD_START] = self.pool.submit(collective_job, 1)

    def result(self, item):
        """The finished process of ``item``'s command: run here if the lane has not started it; else, while the lane
        runs it, the lane's next commands of the same group not yet started are run here (their processes kept for
        their tests), so that neither core waits while work is queued."""
        future = self.futures.pop(item.nodeid, None)
        if future is None or future.cancel():  # (cancel() succeeds only for a command not started)
            return _prefetch_run(item)()
        group = self.groups.get(item.nodeid)
        while group is not None and not future.done():
            # (a future neither running nor done has not started)
            queued = [
                node
                for node, other in self.futures.items()
                if self.groups.get(node) == group and not (other.running() or other.done())
            ]
            if not queued:
                break
            if self.futures[queued[0]].cancel():
                self.futures[queued[0]] = _run_here(self.items[queued[0]])
        return future.result()

    def start_side(self) -> None:
        """Start the second lane's jobs (once)."""
        waiting, self.waiting = self.waiting, []
        self.futures.update({item.nodeid: self.side.submit(_prefetch_run(item)) for item in waiting})

    def pytest_runtest_setup(self, item):
        if item.nodeid in self.second_phase:
            self.start_side()

    @pytest.hookimpl(trylast=True)  # after -k and -m have deselected: only what runs is started
    def pytest_collection_modifyitems(self, config, items):
        if config.option.collectonly:
            return

        def prefetch(item):
            return item.get_closest_marker("prefetch") is not None

        def mpi(item):
            return item.get_closest_marker("mpi") is not None

        def marked(item, name):
            return prefetch(item) and item.get_closest_marker("prefetch").kwargs.get(name, False)

        def alone(item):
            return item.get_closest_marker("alone") is not None

        first = [item for item in items if not prefetch(item) and not mpi(item)]
        soon = [item for item in items if prefetch(item) and not marked(item, "last") and not marked(item, "side")]
        soon.sort(key=mpi)  # (stable: the tests of the one-rank jobs after the others)
        own = [item for item in items if not prefetch(item) and mpi(item)]
        late = [item for item in items if marked(item, "last")]
        self.waiting = [item for item in items if marked(item, "side")]
        second = [item for item in own if not alone(item)] + late + self.waiting
        items[:] = first + soon + second + [item for item in own if alone(item)]
        self.second_phase = {item.nodeid for item in second}
        # in the order the session needs them (after the head start)
        queue = soon + late
        self.items = {item.nodeid: item for item in queue}
        self.groups = {item.nodeid: "soon" for item in soon} | {item.nodeid: "late" for item in late}
        started = {nodeid: future for nodeid, future in self.futures.items() if nodeid in {item.nodeid for item in items}}
        for nodeid in set(self.futures) - set(started):  # (a head start collection left out: dropped if not yet started)
            self.futures[nodeid].cancel()
        runs = [(item.nodeid, _prefetch_run(item)) for item in queue if item.nodeid not in started]
        self.futures = started | {nodeid: self.pool.submit(run) for nodeid, run in runs}  # (commands made before any)

    def pytest_unconfigure(self, config):
        self.pool.shutdown(cancel_futures=True)
        self.side.shutdown(cancel_futures=True)


def pytest_collection_finish(session):
    """What the process holds once the tests are collected (PyTorch, SciPy, the test modules: most of its objects)
    lives until the session ends, so the garbage collector's full passes stop walking it (``gc.freeze``): the
    collections of a one-rank collective job took 2.2 s of CPU, 1.0 s with this, on cores the suite keeps busy."""
    gc.collect()
    gc.freeze()


def pytest_configure(config):
    _seed()  # in the main thread, after a collective job's ranks agreed on it, before any prefetch thread starts
    config.addinivalue_line(
        "markers", "prefetch(command, timeout=600, last=False, side=False): run command(**params) in the background"
    )
    config.addinivalue_line("markers", "alone: an mpiexec test run last, nothing beside it (it times links or messages)")
    config.pluginmanager.register(_Prefetch(), "sparsewire-prefetch")


@pytest.fixture
def prefetched(request) -> subprocess.CompletedProcess:
    """The finished process of this test's ``prefetch`` command (:meth:`_Prefetch.result`)."""
    plugin = request.config.pluginmanager.get_plugin("sparsewire-prefetch")
    if request.node.get_closest_marker("prefetch").kwargs.get("side", False):
        plugin.start_side()  # (a test of the second lane where no mpiexec test ran before it)
    return plugin.result(request.node)


def pytest_collection_modifyitems(config, items):
    """Mark ``mpi`` every test whose function starts mpiexec (see :data:`_MPI_CALLS`), so that
    ``pytest -m "not mpi"`` is the fast tier; a test that starts it indirectly is marked by hand,
    and :func:`run_mpi` fails a test that is not marked."""
    import inspect

    for item in items:
        function = getattr(item, "function", None)
        try:
            source = inspect.getsource(function) if function is not None else ""
        except (OSError, TypeError):
            source = ""
        if any(call in source for call in _MPI_CALLS):
            item.add_marker(pytest.mark.mpi)


@pytest.fixture(autouse=True)
def _current_test(request):
    _CURRENT[0] = request.node
    yield
    _CURRENT[0] = None


def _require_mpi_marker() -> None:
    node = _CURRENT[0]
    if node is not None and node.get_closest_marker("mpi") is None:
        raise AssertionError(
            f"{node.nodeid} starts mpiexec but is not marked mpi; add @pytest.mark.mpi so that -m 'not mpi' skips it"
        )


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"sparsewire test seed: {_seed()} (SPARSEWIRE_TEST_SEED={_seed()} reproduces this run's inputs)")
    for title, lines in (
        ("fault tests, time to exit (limit 30 s):", EXIT_TIMES),
        ("fuzzing (readers, argument vectors):", FUZZ_LINES),
    ):
        if lines:
            terminalreporter.write_line(title)
            for line in lines:
                terminalreporter.write_line(f"  {line}")


def pytest_report_header(config):
    return f"sparsewire test seed: {_seed()} (set SPARSEWIRE_TEST_SEED to reproduce)"


_SESSION_SEED: list[int] = []


def _seed() -> int:
    # Read (or drawn) once, at configure (pytest -q shows no header), and kept: nothing that changes the environment
    # later can change it.
    if not _SESSION_SEED:
        os.environ.setdefault("SPARSEWIRE_TEST_SEED", str(np.random.SeedSequence().entropy % 2**31))
        _SESSION_SEED.append(int(os.environ["SPARSEWIRE_TEST_SEED"]))
    return _SESSION_SEED[0]


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the printed session seed and the test's name."""
    return np.random.default_rng([_seed(), sum(map(ord, request.node.nodeid))])


def cuda_devices() -> int:
    """CUDA devices PyTorch sees here (0 without PyTorch or a GPU)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def on_devices(*devices: str) -> list:
    """``devices`` as pytest parameters, ``cuda`` ones skipped where PyTorch sees no GPU (as PyG's
    ``withCUDA``), so the skip is listed in the summary."""
    gpu = pytest.mark.skipif(cuda_devices() == 0, reason="CUDA absent: no GPU here")
    return [pytest.param(device, marks=gpu) if device.startswith("cuda") else device for device in devices]


def planted_fuzzer(patch: str, fuzzer: Path, examples: int) -> list[str]:
    """The argument vector of a process that runs ``patch`` (Python source planting a fault), then ``fuzzer`` with
    ``--examples EXAMPLES --seed 7 --no-shrink``: the fuzzer's run must end reporting the fault."""
    argv = [str(fuzzer), "--examples", str(examples), "--seed", "7", "--no-shrink"]
    run = f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_path({str(fuzzer)!r}, run_name='__main__')\n"
    return [sys.executable, "-c", patch + run]


def mpiexec_path() -> str:
    _require_mpi_marker()
    return testing.mpiexec_path()


def run_cli(args: list[str]) -> subprocess.CompletedProcess:
    """``sparsewire ARGS`` without mpiexec, in this process (a new interpreter per command was most of the
    fast tier's time): ``sparsewire.cli.main`` with its output captured, its exit status as the shell would
    see it (an exception that escapes it printed as the interpreter would, status 1), the warning filters
    the interpreter started with, and what it sets for the whole process (the one-line warnings, the
    exception hook, signal handlers, the environment) put back after it. Its time is pytest-timeout's to
    bound. Tests of what only a process shows (signals, a closed pipe, resource limits) start one
    themselves."""
    import contextlib
    import io
    import signal
    import traceback
    import warnings

    from sparsewire.cli import main

    out, err = io.StringIO(), io.StringIO()
    environment, hook = dict(os.environ), sys.excepthook
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.filters[:] = STARTUP_WARNING_FILTERS  # no test's filters; entering catch_warnings forgot what was shown
        try:
            status = main([str(arg) for arg in args])
        except SystemExit as end:  # argparse: --help, or a usage error
            status = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
            if not isinstance(end.code, (int, type(None))):
                print(end.code, file=sys.stderr)
        except Exception:
            traceback.print_exc()
            status = 1
    # Only what the command changed is put back: the prefetch thread reads the environment meanwhile (a job's
    # variables), and a cleared one would hand it nothing.
    for name in set(os.environ) - set(environment):
        del os.environ[name]
    for name, value in environment.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    sys.excepthook = hook
    for number, handler in handlers.items():
        signal.signal(number, handler)
    return subprocess.CompletedProcess(["sparsewire", *map(str, args)], status, out.getvalue(), err.getvalue())


def run_mpi(ranks: int, args: list[str], timeout: float = 180, env: dict | None = None, launcher: str = "mpiexec") -> testing.Job:
    """``mpiexec -n RANKS python ARGS`` (or ``torchrun``'s) through :func:`sparsewire.testing.run_job`: a deadlock
    becomes a TimeoutExpired failure, not a hang, and nothing of the job is left behind. Its waiting ranks sleep
    (``SLEEPING_WAITS``: the collective jobs run beside it), but for a test marked ``alone``, which times its
    messages. Only a test marked ``mpi`` may call it."""
    _require_mpi_marker()
    node = _CURRENT[0]
    timed = node is not None and node.get_closest_marker("alone") is not None
    environment = {**({} if timed else testing.SLEEPING_WAITS), **(env or {})}
    return testing.run_job(ranks, args, timeout=timeout, env=environment, cwd=ROOT, launcher=launcher)


def one_rank_beside(args, timeout: float = 180, launcher: str = "mpiexec"):
    """The parameter ``ranks = 1`` of a test whose job is ``ARGS`` on one rank, started on the second core while
    the tests that start no mpiexec run (``prefetch``); the test takes it from :func:`job_of`."""
    job = functools.partial(testing.run_job, 1, [str(arg) for arg in args], timeout=timeout, cwd=ROOT, launcher=launcher)
    return pytest.param(1, marks=pytest.mark.prefetch(lambda ranks: job))


def job_of(request, ranks: int, args, timeout: float = 180, launcher: str = "mpiexec") -> testing.Job:
    """The job of ``ARGS`` on ``ranks`` ranks: the one started beside the other tests where the case is
    :func:`one_rank_beside`'s, else started now."""
    if request.node.get_closest_marker("prefetch") is not None:
        return request.getfixturevalue("prefetched")
    return run_mpi(ranks, [str(arg) for arg in args], timeout=timeout, launcher=launcher)
