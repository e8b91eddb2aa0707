"""Helpers for tests and benches, shipped so that users' own tests can use them: deterministic
integer-valued operands whose products are exact (:func:`deterministic_dense`), the harness that
starts an MPI job with a bound on its time and leaves no process behind (:func:`run_job`), a pytest
plugin for collective tests on every rank of one job (:mod:`~sparsewire.testing.collective`, loaded by
``-p sparsewire.testing.collective`` or a conftest), and the
emulated cluster (:mod:`~sparsewire.testing.emulation`: nodes as network namespaces joined by
rate-limited links; needs root)."""

from sparsewire.io.generators import deterministic_dense, deterministic_dense_rows
from sparsewire.testing.emulation.cluster import EmulatedCluster, unavailable_reason
from sparsewire.testing.jobs import SLEEPING_WAITS, Job, left_behind, mpiexec_path, run_job

__all__ = [
    "deterministic_dense",
    "deterministic_dense_rows",
    "EmulatedCluster",
    "unavailable_reason",
    "Job",
    "run_job",
    "SLEEPING_WAITS",
    "left_behind",
    "mpiexec_path",
]
