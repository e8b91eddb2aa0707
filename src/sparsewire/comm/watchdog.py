"""A bound on waiting: a rank whose messages make no progress for ``timeout`` seconds ends the job.

Why: a link that goes down for good (or a peer that stops) leaves MPI waiting forever: neither
MPICH nor mpi4py raises, and Linux TCP gives up only after about 15 minutes
(``../shared/research/emulated-cluster``). torch.distributed bounds its waits the same way (the
process group's ``timeout``).

How: the executor arms its :class:`Watchdog` for each multiply and reports every message that
arrives (:meth:`Watchdog.progress`); one daemon thread per process wakes every
``min(1 s, timeout / 20)`` and, when an armed watchdog has seen no progress for ``timeout``
seconds, prints the watchdog's description of what it waits for (rank, peers, link classes, bytes
outstanding) and aborts the job (``MPI_Abort`` on ``COMM_WORLD``: the launcher ends every rank; if
the abort itself cannot reach the launcher, the process exits after 5 s). The waits themselves are
unchanged (MPI releases Python's lock while it waits), so an armed watchdog costs two clock reads
per multiply and one per message.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable

__all__ = ["Watchdog", "DEFAULT_WAIT_TIMEOUT", "MIN_WAIT_TIMEOUT", "abort_stalled_job"]

#: Seconds without any message arriving before a multiply ends the job: far above any healthy
#: multiply (the slowest seen in the benches over a 1 Gbit/s link is under 1 s).
DEFAULT_WAIT_TIMEOUT = 300.0
#: The smallest timeout the options accept: a job's first messages set up connections, and a
#: smaller bound ended healthy runs (the argument fuzzer's --wait-timeout 1e-6).
MIN_WAIT_TIMEOUT = 1.0

_EXIT_STATUS = 3  # distinct from an error (1) and Ctrl-C (130)


def abort_stalled_job(message: str) -> None:
    """Not collective. Print ``sparsewire: error: <message>`` and end the job (``MPI_Abort`` on
    ``COMM_WORLD``; this process exits after 5 s if the abort cannot reach the launcher)."""
    print(f"sparsewire: error: {message}; aborting the job", file=sys.stderr, flush=True)
    threading.Timer(5.0, os._exit, (_EXIT_STATUS,)).start()
    time.sleep(0.25)  # let the launcher read this rank's last lines first
    from mpi4py import MPI

    MPI.COMM_WORLD.Abort(_EXIT_STATUS)


class Watchdog:
    """Not collective. Ends the job when, while armed, no progress is reported for ``timeout``
    seconds (module docstring).

    Args:
        timeout: seconds without progress that end the job (positive).
        describe: called once on expiry: what is outstanding, for the message.
        on_expiry: what ends the job (default :func:`abort_stalled_job`); tests plant a recorder.
    """

    def __init__(self, timeout: float, describe: Callable[[], str], on_expiry: Callable[[str], None] = abort_stalled_job) -> None:
        self.timeout = float(timeout)
        self.describe = describe
        self.on_expiry = on_expiry
        self.armed = False
        self.expired = False
        self._last = time.monotonic()
        _Monitor.add(self)

    def arm(self) -> None:
        """Not collective. Start watching (a multiply begins)."""
        self._last = time.monotonic()
        self.armed = True

    def progress(self) -> None:
        """Not collective. Something arrived: the bound starts again."""
        self._last = time.monotonic()

    def disarm(self) -> None:
        """Not collective. Stop watching (the multiply ended)."""
        self.armed = False

    def check(self, now: float | None = None) -> bool:
        """Not collective. Expire (once) if armed and silent for over ``timeout``; whether it did."""
        now = time.monotonic() if now is None else now
        if not self.armed or self.expired or now - self._last <= self.timeout:
            return False
        self.expired = True
        silent = now - self._last
        try:
            what = self.describe()
        except Exception as error:  # noqa: BLE001 - the job must still end
            what = f"(describing the wait failed: {error!r})"
        self.on_expiry(
            f"no message arrived for {silent:.1f} s (wait timeout {self.timeout:g} s): {what}. A link or a peer is down; "
            "if a healthy multiply can take this long, raise the timeout (ExecOptions(wait_timeout=...), --wait-timeout)"
        )
        return True


class _Monitor:
    """The one daemon thread that checks every live watchdog."""

    _watchdogs: weakref.WeakSet = weakref.WeakSet()
    _thread: threading.Thread | None = None
    _lock = threading.Lock()

    @classmethod
    def add(cls, watchdog: Watchdog) -> None:
        with cls._lock:
            cls._watchdogs.add(watchdog)
            if cls._thread is None:
                cls._thread = threading.Thread(target=cls._run, name="sparsewire-watchdog", daemon=True)
                cls._thread.start()

    @classmethod
    def _run(cls) -> None:
        while True:
            watchdogs = list(cls._watchdogs)
            interval = min([1.0] + [w.timeout / 20 for w in watchdogs])
            time.sleep(max(interval, 0.01))
            for watchdog in watchdogs:
                watchdog.check()
