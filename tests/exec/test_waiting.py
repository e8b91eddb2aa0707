"""Waits that give the core away where the node is oversubscribed (``cores.oversubscribed``;
``comm.runtime.wait_all`` / ``wait_any``, which the MPI transport and the timing call), in this process on
``MPI.COMM_SELF`` (no mpiexec)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from mpi4py import MPI

import sparsewire
from sparsewire._lib.cores import NODE_CORES_VARIABLE, oversubscribed
from sparsewire.comm import runtime


def test_oversubscribed_counts_ranks_times_threads_against_the_node_cores(monkeypatch):
    monkeypatch.setenv(NODE_CORES_VARIABLE, "1")
    assert not oversubscribed(1, 1)
    assert oversubscribed(2, 1) and oversubscribed(1, 2)
    monkeypatch.setenv(NODE_CORES_VARIABLE, "2")
    assert not oversubscribed(2, 1) and not oversubscribed(1, 2)
    assert oversubscribed(3, 1) and oversubscribed(2, 2)


class _SendOnYield:
    """A stand-in for ``os.sched_yield`` that starts the awaited sends only at its ``late``-th call: a wait
    can then only complete by polling and yielding in turn."""

    def __init__(self, sends: list, late: int) -> None:
        self.sends, self.late, self.calls, self.started = sends, late, 0, []

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == self.late:
            self.started = [send() for send in self.sends]


@pytest.mark.parametrize("late", [1, 3, 20])
def test_a_yielding_wait_all_polls_until_every_message_is_in(monkeypatch, rng, late):
    comm = MPI.COMM_SELF
    sizes = rng.integers(1, 5000, size=3)
    payloads = [rng.integers(-(2**40), 2**40, size=int(n)) for n in sizes]
    inboxes = [np.zeros(int(n), np.int64) for n in sizes]
    receives = [comm.Irecv(inbox, 0, tag) for tag, inbox in enumerate(inboxes)]
    stand_in = _SendOnYield([lambda p=p, t=t: comm.Isend(p, 0, t) for t, p in enumerate(payloads)], late)
    monkeypatch.setattr(runtime.os, "sched_yield", stand_in)
    statuses = [MPI.Status() for _ in receives]
    runtime.wait_all(receives, statuses, yielding=True)
    assert stand_in.calls == late  # no yield after the last message arrived, none fewer than it took
    assert [s.Get_count(MPI.INT64_T) for s in statuses] == [int(n) for n in sizes]
    for payload, inbox in zip(payloads, inboxes):
        np.testing.assert_array_equal(inbox, payload)
    runtime.wait_all(stand_in.started, yielding=True)


def test_a_yielding_wait_any_returns_the_message_that_arrived(monkeypatch):
    comm = MPI.COMM_SELF
    inboxes = [np.zeros(4, np.int64) for _ in range(3)]
    receives = [comm.Irecv(inbox, 0, tag) for tag, inbox in enumerate(inboxes)]
    payload = np.array([7, -3, 11, 2**50], np.int64)
    stand_in = _SendOnYield([lambda: comm.Isend(payload, 0, 2)], 2)  # only the third receive's message
    monkeypatch.setattr(runtime.os, "sched_yield", stand_in)
    status = MPI.Status()
    assert runtime.wait_any(receives, status, yielding=True) == 2
    assert stand_in.calls == 2 and status.Get_source() == 0 and status.Get_count(MPI.INT64_T) == 4
    np.testing.assert_array_equal(inboxes[2], payload)
    for tag in (0, 1):
        comm.Send(np.full(4, tag, np.int64), 0, tag)
    assert sorted(runtime.wait_any(receives, status, yielding=True) for _ in range(2)) == [0, 1]
    assert runtime.wait_any(receives, status, yielding=True) == MPI.UNDEFINED  # none left active
    runtime.wait_all(stand_in.started)


@pytest.mark.parametrize("node_cores, threads, yields", [("1", 1, False), ("1", 2, True), ("2", 2, False)])
def test_the_executor_yields_exactly_where_its_node_is_oversubscribed(monkeypatch, node_cores, threads, yields):
    monkeypatch.setenv(NODE_CORES_VARIABLE, node_cores)
    matrix = sparsewire.distribute(MPI.COMM_SELF, "stencil2d:6")
    b = np.arange(36 * 3, dtype=np.float64).reshape(36, 3) % 7
    with matrix.spmm_plan(3, threads=threads) as plan:
        assert plan.executor.transport.yield_while_waiting is yields
        np.testing.assert_array_equal(plan.multiply(matrix.rows_of(b)), matrix.gather() @ b)


LAYER_PROBE = """
import os
import torch  # loads PyTorch's libgomp, which reads the environment's OMP_WAIT_POLICY now
import numpy as np
from sparsewire._lib.jit import numba
from sparsewire.kernels import compiled
from sparsewire.kernels.compiled import run_threaded, set_threads

@numba.njit(parallel=True)
def total(values, out):
    result = 0.0
    for i in numba.prange(values.size):
        result += values[i]
    out[0] = result

set_threads(2, ranks_on_node=2)
sums = np.zeros(2)
run_threaded(total, np.ones(64), sums[:1])
set_threads(1, ranks_on_node=2)  # one thread: on the workqueue layer, the kernel's serial compilation
run_threaded(total, np.arange(64.0), sums[1:])
print(numba.threading_layer(), os.environ.get("OMP_WAIT_POLICY"), compiled._serial.cache_info().currsize, *sums)
"""


def _layer_probe(policy: str) -> list[str]:
    """The probe on a 2-core node with 2 ranks of 2 threads, PyTorch imported first, OMP_WAIT_POLICY ``policy`` (or
    none set)."""
    settings = [f"{NODE_CORES_VARIABLE}=2", "NUMBA_NUM_THREADS=4"] + ([f"OMP_WAIT_POLICY={policy}"] if policy else [])
    return ["env", "-u", "OMP_WAIT_POLICY", *settings, sys.executable, "-c", LAYER_PROBE]


@pytest.mark.prefetch(_layer_probe, timeout=120)
@pytest.mark.parametrize("policy", ["", "passive"])
def test_oversubscribed_threads_sleep_when_pytorch_loaded_a_spinning_openmp_first(policy, prefetched):
    """A rank of 2 threads with 2 ranks on a 2-core node is oversubscribed: its idle threads must sleep. Where
    PyTorch loaded its libgomp before any wait policy was set, Numba's pool takes the workqueue layer (whose idle
    threads sleep) instead of spinning on that OpenMP; a policy the user set keeps OpenMP. (Without PyTorch,
    OMP_WAIT_POLICY=PASSIVE is set before Numba loads OpenMP.) At one thread, workqueue runs the kernel serially.
    Both sums exact."""
    pytest.importorskip("torch")
    assert prefetched.returncode == 0, prefetched.stderr[-3000:]
    layer, wait_policy, serial, *sums = prefetched.stdout.split()
    assert [float(value) for value in sums] == [64.0, 63 * 64 / 2], prefetched.stdout
    if policy:
        assert (layer, wait_policy) in (("omp", "passive"), ("workqueue", "passive")), prefetched.stdout
        if layer == "workqueue":
            pytest.skip("Numba has no OpenMP layer here")
        assert serial == "0", prefetched.stdout  # OpenMP runs a team of one in the calling thread already
    else:
        assert (layer, wait_policy) == ("workqueue", "PASSIVE"), prefetched.stdout
        # a launch on workqueue wakes a pool thread and waits for it (0.55 ms): one thread runs the serial compilation
        assert serial == "1", prefetched.stdout
