"""A pytest plugin for collective tests: pytest itself runs on every rank of one job,
``mpiexec -n P python -m pytest -p sparsewire.testing.collective TESTS`` (or a ``conftest.py`` that star-imports
this module); one case runs alone by its name, as in any pytest run.

Every rank collects the same cases in the same order (checked by a digest) and runs each one; a case that
needs another P than the job's is left out (``@pytest.mark.ranks(1, 3, 4)``: the rank counts it runs at).
After each phase of a case the ranks agree on its outcome, on a communicator of the harness's own: a failure
on any rank fails the case on every rank, and rank 0, the only rank that reports, names the ranks and shows
their tracebacks; so one rank's failed assertion does not leave the others at the next case's first
collective. A phase that blocks past its time limit (a deadlock) is ended by faulthandler, which prints every
thread's stack, the case's own frame among them, and ends the rank; the launcher then ends the job. MPI
starts only when pytest loads the plugin, not when this module is imported.
"""

from __future__ import annotations

import faulthandler
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

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

#: The job: its communicator, this rank, the size, and the harness's own duplicate of the communicator (so that
#: the agreement never pairs with a case's collectives), set when pytest loads the plugin.
_JOB: dict = {}
_LIMIT = pytest.StashKey[float]()
_DUMP = pytest.StashKey[object]()


@pytest.hookimpl(tryfirst=True)  # before pytest-timeout reads its settings and before any seed is drawn
def pytest_configure(config) -> None:
    """Collective: duplicates COMM_WORLD and agrees on the session seed (``SPARSEWIRE_TEST_SEED``, drawn by rank 0
    where the launcher gave none). Registers the ``ranks`` marker and takes over the time limits."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    _JOB.update(comm=world, rank=world.Get_rank(), size=world.Get_size(), harness=world.Dup())
    if "SPARSEWIRE_TEST_SEED" not in os.environ:
        import secrets

        drawn = secrets.randbelow(2**31) if _JOB["rank"] == 0 else None
        os.environ["SPARSEWIRE_TEST_SEED"] = str(_JOB["harness"].bcast(drawn))
    config.addinivalue_line("markers", "ranks(*counts): the numbers of ranks this collective case runs at (default: any)")
    # A rank blocked in a collective holds the interpreter's lock (mpi4py's pickled collectives do), so neither
    # SIGALRM's handler nor pytest-timeout's thread could run: faulthandler's C thread keeps the time instead.
    try:
        config.stash[_LIMIT] = float(config.getini("timeout") or 300)  # pytest-timeout's setting, where installed
    except ValueError:
        config.stash[_LIMIT] = 300.0
    config.option.timeout = 0
    # The dump goes to the rank's real standard error, not to the captured one that the exit would lose.
    capturing = getattr(config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
    saved = getattr(getattr(capturing, "err", None), "targetfd_save", None)
    config.stash[_DUMP] = os.fdopen(os.dup(saved if saved is not None else 2), "w")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session) -> None:
    """Not collective. Only rank 0 reports: the other ranks' failures reach it through the agreement."""
    if _JOB["rank"] != 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            session.config.pluginmanager.unregister(reporter)


def pytest_collection_modifyitems(config, items) -> None:
    """Collective: leaves out the cases marked for other rank counts, then checks that every rank holds the same
    cases in the same order (else the collectives of different cases would pair up)."""
    kept, left = [], []
    for item in items:
        marker = item.get_closest_marker("ranks")
        (kept if marker is None or _JOB["size"] in marker.args else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    digest = hashlib.sha256("\n".join(item.nodeid for item in items).encode()).hexdigest()
    digests = _JOB["harness"].allgather(digest)
    if len(set(digests)) != 1:
        raise pytest.UsageError(f"the ranks collected different cases (digests {digests}); give every rank the same arguments")


def _timed(item):
    """A phase past its limit (``@pytest.mark.timeout(S)``, else the ini's ``timeout``, else 300 s) dumps the
    stacks and ends the rank. The agreement is left out of the time, so the rank that dumps is one that waits
    inside the case."""
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else item.config.stash[_LIMIT]
    faulthandler.dump_traceback_later(limit, exit=True, file=item.config.stash[_DUMP])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Not collective. The case's set-up, under its time limit."""
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Not collective. The case itself, under its time limit."""
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Not collective. The case's tear-down, under its time limit."""
    yield from _timed(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Collective: the ranks agree on the phase's outcome; failed on any rank is failed on every rank, and rank 0's
    report names the ranks and holds their tracebacks."""
    outcome = yield
    report = outcome.get_result()
    everyone = _JOB["harness"].allgather((report.failed, str(report.longrepr) if report.failed else ""))
    failing = [rank for rank, (failed, _) in enumerate(everyone) if failed]
    if failing:
        report.outcome = "failed"
        if _JOB["rank"] == 0:
            shown = "\n\n".join(f"---- rank {rank} of {_JOB['size']} ----\n{everyone[rank][1]}" for rank in failing)
            report.longrepr = f"failed on rank(s) {failing} of {_JOB['size']} in {report.when}\n{shown}"


@pytest.fixture
def comm():
    """Not collective. The job's communicator (COMM_WORLD)."""
    return _JOB["comm"]


@pytest.fixture
def shared_tmp() -> Path:
    """Collective: a directory every rank sees (rank 0 makes it, the others are told its name), removed after the
    case."""
    harness = _JOB["harness"]
    path = Path(harness.bcast(tempfile.mkdtemp(prefix="sparsewire-collective-") if _JOB["rank"] == 0 else None))
    yield path
    harness.Barrier()
    if _JOB["rank"] == 0:
        shutil.rmtree(path, ignore_errors=True)


def pytest_report_header(config) -> str:
    """Not collective. The rank count and the session seed, in the header of rank 0's report."""
    return f"collective cases on {_JOB['size']} rank(s), session seed {os.environ['SPARSEWIRE_TEST_SEED']}"
