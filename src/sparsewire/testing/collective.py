"""A pytest plugin for collective tests: pytest itself runs on every rank of one job,
``mpiexec -n P python -m pytest -p sparsewire.testing.collective TESTS`` (one case runs alone by its name, as
with any pytest run). Not collective itself: every rank loads it.

Every rank collects the same cases in the same order and runs each one; a case that needs a
different P than the job's is left out (``@pytest.mark.ranks(1, 3, 4)``: the rank counts it runs at).
After each phase of a case the ranks agree on its outcome: a failure on any rank fails the case on
every rank, and rank 0, the only rank that reports, names the ranks and shows their tracebacks. So one
rank's failed assertion does not leave the others at the next case's first collective. A rank that
blocks for good (a deadlock) is ended at the case's time limit by faulthandler, which prints the stacks, the
case's own frame among them; the launcher then ends the job.
"""

from __future__ import annotations

import faulthandler
import hashlib
import os
import tempfile
from pathlib import Path

import pytest
from mpi4py import MPI

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
# The harness's own messages go on a communicator of their own, so that they never pair with a case's collectives
# (a case that leaves one rank behind then blocks until its time limit, instead of going on with mixed-up messages).
HARNESS = COMM.Dup()

# One session seed for every rank, where the launcher gave none (a test suite draws its inputs from it).
if "SPARSEWIRE_TEST_SEED" not in os.environ:
    import secrets

    os.environ["SPARSEWIRE_TEST_SEED"] = str(HARNESS.bcast(secrets.randbelow(2**31) if RANK == 0 else None))


__all__ = [
    "pytest_configure",
    "pytest_sessionstart",
    "pytest_collection_modifyitems",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_runtest_makereport",
    "pytest_report_header",
    "comm",
    "shared_tmp",
]

_LIMIT = pytest.StashKey[float]()
_DUMP = pytest.StashKey[object]()


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads its settings
def pytest_configure(config):
    config.addinivalue_line("markers", "ranks(*counts): the numbers of ranks this collective case runs at (default: any)")
    # A rank blocked in a collective holds the interpreter's lock (mpi4py's pickled collectives do), so neither
    # SIGALRM's handler nor pytest-timeout's thread could run: faulthandler's C thread keeps the time instead.
    try:
        config.stash[_LIMIT] = float(config.getini("timeout") or 300)  # pytest-timeout's setting, where it is installed
    except ValueError:
        config.stash[_LIMIT] = 300.0
    config.option.timeout = 0
    # The dump goes to the rank's real standard error, not to the captured one that the exit would lose.
    capturing = getattr(config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
    saved = getattr(getattr(capturing, "err", None), "targetfd_save", None)
    config.stash[_DUMP] = os.fdopen(os.dup(saved if saved is not None else 2), "w")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """Only rank 0 reports: the other ranks' failures reach it through the agreement after each phase."""
    if RANK != 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            session.config.pluginmanager.unregister(reporter)


def _timed(item):
    """A phase of a case past its time limit (``@pytest.mark.timeout(S)``, else the ini's ``timeout``, else 300 s)
    dumps every thread's stack to standard error, the case's own frame among them, and ends the rank; the
    launcher then ends the job. The agreement is left out of the time, so that the rank that dumps is one that
    waits inside the case."""
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else item.config.stash[_LIMIT]
    faulthandler.dump_traceback_later(limit, exit=True, file=item.config.stash[_DUMP])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield from _timed(item)


def pytest_collection_modifyitems(config, items):
    kept, left = [], []
    for item in items:
        marker = item.get_closest_marker("ranks")
        (kept if marker is None or SIZE in marker.args else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    # Every rank must walk the same cases in the same order, or the collectives pair up wrongly.
    digest = hashlib.sha256("\n".join(item.nodeid for item in items).encode()).hexdigest()
    digests = HARNESS.allgather(digest)
    if len(set(digests)) != 1:
        raise pytest.UsageError(f"the ranks collected different cases (digests {digests}); give every rank the same arguments")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    failed = report.failed
    text = str(report.longrepr) if failed else ""
    everyone = HARNESS.allgather((failed, text))
    failing = [rank for rank, (failed_here, _) in enumerate(everyone) if failed_here]
    if failing and RANK == 0:
        shown = "\n\n".join(f"---- rank {rank} of {SIZE} ----\n{everyone[rank][1]}" for rank in failing)
        report.outcome = "failed"
        report.longrepr = f"failed on rank(s) {failing} of {SIZE} in {report.when}\n{shown}"
    elif failing:
        report.outcome = "failed"


@pytest.fixture
def comm() -> MPI.Intracomm:
    """The job's communicator."""
    return COMM


@pytest.fixture
def shared_tmp(request) -> Path:
    """A directory every rank sees (rank 0 makes it, the others are told its name); removed after the case."""
    path = tempfile.mkdtemp(prefix="sparsewire-collective-") if RANK == 0 else None
    path = Path(HARNESS.bcast(path))
    yield path
    HARNESS.Barrier()
    if RANK == 0:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


def pytest_report_header(config):
    return f"collective cases on {SIZE} rank(s), session seed {os.environ['SPARSEWIRE_TEST_SEED']}"
