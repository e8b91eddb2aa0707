"""Cores and threads per rank, in a module that loads no compiler (the MPI run-time helpers and
the mode choice ask it before any kernel is needed)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from sparsewire.errors import InputError

__all__ = [
    "NODE_CORES_VARIABLE",
    "node_core_share",
    "node_cores",
    "default_threads",
    "oversubscribed",
    "in_turn",
    "on_threads",
    "map_on_threads",
]

#: Environment variable that says how many cores a rank's node has, where fewer than the process
#: may run on: the emulated cluster sets it, since its nodes share one machine's cores. A fraction
#: where nodes outnumber the cores (four emulated nodes on two cores: 0.5 each).
NODE_CORES_VARIABLE = "SPARSEWIRE_NODE_CORES"


def node_core_share() -> float:
    """Not collective. The cores of this rank's node, a fraction where its node is one of several sharing fewer
    cores than they are: this process's CPU affinity (else the machine's count), or :data:`NODE_CORES_VARIABLE`
    where that is smaller.

    Raises:
        InputError when the variable is set to anything but a positive finite number.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    text = os.environ.get(NODE_CORES_VARIABLE)
    if text is None:
        return float(cores)
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.0 < value < float("inf"):
        raise InputError(
            f"{NODE_CORES_VARIABLE}={text!r} is not a positive number of cores; unset it or set it to e.g. 2 (0.5: half a core)"
        )
    return min(float(cores), value)


def node_cores() -> int:
    """Not collective. Whole cores of this rank's node to size thread pools by: :func:`node_core_share`, at
    least 1."""
    return max(1, int(node_core_share()))


def default_threads(ranks_on_node: int) -> int:
    """Not collective. ``node cores / ranks on this node``, at least 1 (:func:`node_cores`)."""
    return max(1, node_cores() // max(1, ranks_on_node))


#: The thread count a rank chose for SuiteSparse:GraphBLAS (:func:`sparsewire.comm.runtime.limit_threads_per_rank`), applied
#: where the package loads python-graphblas (``spgemm/graphblas_loader.py``) if it had not loaded yet.
GRAPHBLAS_THREADS: list[int] = []


def oversubscribed(ranks_on_node: int, threads: int) -> bool:
    """Not collective. Whether ``ranks_on_node`` ranks of ``threads`` threads each need more cores than the node has
    (:func:`node_core_share`, so one rank on half a core is): then what waits must not spin (idle OpenMP threads
    sleep, MPI waits yield the core): spinning there took the cores from the ranks being waited for
    (docs/design-decisions.md, "Waits that yield when oversubscribed")."""
    return ranks_on_node * threads > node_core_share()


def in_turn(items: Iterable) -> Callable[[], object]:
    """Not collective. A function that hands ``items`` out one at a time to whichever thread calls it, then ``None``:
    workers that take the next item when done balance uneven items by themselves."""
    queue, lock = iter(items), threading.Lock()

    def take():
        with lock:
            return next(queue, None)

    return take


def on_threads(worker: Callable[[], None], threads: int) -> None:
    """Not collective. ``worker()`` on ``threads`` threads at once (on the caller's alone when ``threads`` is 1);
    returns when all have, raising the first worker's exception here."""
    if threads <= 1:
        worker()
        return
    with ThreadPoolExecutor(threads) as pool:
        for running in [pool.submit(worker) for _ in range(threads)]:
            running.result()


def map_on_threads(function: Callable, items: Sequence, threads: int) -> list:
    """Not collective. ``[function(item) for item in items]`` with the items spread over ``threads`` threads (in the
    caller's alone when ``threads`` is 1 or there is one item); raises the first exception here."""
    if threads <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(function, items))


def spin(seconds: float) -> None:
    """Wait ``seconds`` without giving up the core (a busy loop), as a rank polling MPI would: a rank woken from sleep
    can be late enough to hide what an idle link gives (the calibration's burst and relay)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
