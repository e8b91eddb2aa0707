"""sparsewire.comm.lifetime without MPI: a collected holder's release is queued, not run, until the
next admission; close() releases at once and only once; the live count bounds admissions."""

from __future__ import annotations

import gc

from sparsewire.comm import lifetime


class Holder:
    pass


def test_a_collected_holder_is_released_at_the_next_admission_and_close_releases_once():
    released = []
    lifetime.release_queued()
    dropped, closed = Holder(), Holder()
    lifetime.track(dropped, lambda: released.append("dropped"))
    finalizer = lifetime.track(closed, lambda: released.append("closed"))
    live = lifetime.live_executors()
    del dropped
    gc.collect()
    assert released == [] and lifetime.live_executors() == live - 1  # queued: collection may be in any thread
    assert lifetime.admit() is None and released == ["dropped"]
    lifetime.release_now(closed, finalizer)
    lifetime.release_now(closed, finalizer)
    del closed
    gc.collect()
    lifetime.release_queued()
    assert released == ["dropped", "closed"]


def test_admission_is_refused_at_the_limit_with_the_count_and_the_fix(monkeypatch):
    monkeypatch.setattr(lifetime, "LIVE_LIMIT", lifetime.live_executors() + 3)
    holders = [Holder() for _ in range(3)]
    [lifetime.track(holder, lambda: None) for holder in holders]
    problem = lifetime.admit()
    assert problem and f"{lifetime.LIVE_LIMIT} plans are open" in problem and "plan.close()" in problem
    holders.pop()
    assert lifetime.admit() is None  # one dropped: room again
