"""The watchdog on its own, without MPI: silence past the bound expires it once, with
the description; progress or disarming keeps it quiet; a describe that fails still ends the job."""

from __future__ import annotations

import time

from sparsewire.comm.watchdog import Watchdog


def _recorder():
    seen: list[str] = []
    return seen, seen.append


def test_silence_past_the_bound_expires_once_with_the_description():
    seen, record = _recorder()
    watchdog = Watchdog(0.2, lambda: "rank 3 still waits for 96 bytes from rank 1", record)
    watchdog.arm()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert len(seen) == 1 and "rank 3 still waits for 96 bytes from rank 1" in seen[0] and "wait timeout 0.2 s" in seen[0]


def test_progress_and_disarming_keep_it_quiet():
    seen, record = _recorder()
    watchdog = Watchdog(0.2, lambda: "x", record)
    watchdog.arm()
    for _ in range(12):  # 0.6 s in all, never 0.2 s without progress
        time.sleep(0.05)
        watchdog.progress()
    watchdog.disarm()
    time.sleep(0.4)
    assert seen == []
    # by the clock alone: armed and silent for longer than the bound expires it
    watchdog.arm()
    assert not watchdog.check(time.monotonic() + 0.1) and watchdog.check(time.monotonic() + 0.3)
    assert len(seen) == 1 and not watchdog.check(time.monotonic() + 1.0)


def test_a_failing_description_still_ends_the_job():
    seen, record = _recorder()

    def broken() -> str:
        raise KeyError("gone")

    watchdog = Watchdog(0.1, broken, record)
    watchdog.arm()
    assert watchdog.check(time.monotonic() + 1.0)
    assert "describing the wait failed: KeyError('gone')" in seen[0]
