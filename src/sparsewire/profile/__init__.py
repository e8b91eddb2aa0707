"""Report: what a run did and how long it took. Tracing of plans and regions
(:mod:`~sparsewire.profile.tracing`) into Chrome traces and a PETSc ``-log_view``-style summary
(:mod:`~sparsewire.profile.log_view`), per-step timings (:mod:`~sparsewire.profile.laps`), the
timeline plot (:mod:`~sparsewire.profile.timeline`), the traffic map between groups
(:mod:`~sparsewire.profile.traffic`) and the timed, watchdog-guarded run
(:mod:`~sparsewire.profile.timed`); and the plain-text tables every report prints
(:func:`format_table`)."""

from sparsewire._lib.text import format_bytes, format_table
from sparsewire.profile.timed import TimedRun, time_plan, timed_run, turn_order
from sparsewire.profile.tracing import region, trace

__all__ = ["trace", "region", "time_plan", "timed_run", "turn_order", "TimedRun", "format_table", "format_bytes"]
