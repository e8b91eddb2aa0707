"""The transfer calibration: the message size below which staging through host memory beats MPI
reading the device's buffers (:mod:`sparsewire.wire.paths`), measured by ``sparsewire calibrate
--device D`` and stored in the calibration cache (:mod:`sparsewire.topology.records`).

:func:`measure_transfer_paths` times both paths message size by message size between two ranks
(:func:`time_transfer_paths`, also used by ``bench/peers/gpu.py``) and takes :func:`crossover`;
:mod:`sparsewire.wire.transfer_records` reads the record back into the rule an executor runs with.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from sparsewire.errors import InputError
from sparsewire.topology.records import stamp
from sparsewire.wire.paths import EVERY_MESSAGE, default_rule, device_type
from sparsewire.wire.transfer_records import TRANSFER_KIND

__all__ = [
    "crossover",
    "time_transfer_paths",
    "measure_transfer_paths",
]


def crossover(sizes: list[int], direct_seconds: list[float], staged_seconds: list[float]) -> int:
    """Not collective. ``staged_below_bytes`` from a sweep: the smallest measured size from which the
    direct path is at least as fast at that size and every larger one (0 when it is at every
    size; one byte above the largest size when staging won even there, so larger messages go
    direct until a longer sweep says otherwise)."""
    order = np.argsort(sizes)
    sizes = [int(sizes[i]) for i in order]
    direct_wins = [direct_seconds[i] <= staged_seconds[i] for i in order]
    threshold = sizes[-1] + 1
    for position in range(len(sizes) - 1, -1, -1):
        if not direct_wins[position]:
            break
        threshold = sizes[position]
    return 0 if threshold == sizes[0] else threshold


def _round_trip(comm, peer: int, backend, flat, memory, stage: np.ndarray | None) -> None:
    """Rank 0 sends the buffer to ``peer`` and gets it back (rank 1 the other way round); with
    ``stage``, each end copies through that host memory as the transport does (``memory``: what
    MPI reads for a direct send, :meth:`mpi_memory`)."""
    from mpi4py import MPI

    for sender in (0, 1):
        if comm.Get_rank() == sender:
            if stage is not None:
                backend.copy_out(flat, stage)
            backend.synchronize()
            comm.Send([memory if stage is None else stage, MPI.DOUBLE], peer, 7)
        else:
            comm.Recv([memory if stage is None else stage, MPI.DOUBLE], peer, 7)
            if stage is not None:
                backend.copy_in(stage, flat)
            backend.synchronize()


def time_transfer_paths(
    comm, backend, sizes: list[int], repeat: int = 20, paths: tuple[str, ...] = ("direct", "staged"), progress=None
) -> dict[str, list[float]]:
    """Collective (every rank of ``comm``; ranks 0 and 1 measure, the others wait). Half the round
    trip time of a message between ranks 0 and 1 per size (bytes, float64 elements) on each of
    ``paths``, the median of ``repeat`` after one warm-up: ``direct``, MPI reading the backend's
    buffer (:meth:`mpi_memory`); ``staged``, the buffer copied into host memory, sent, and copied
    into the receiver's buffer (the backend's ``copy_out``/``copy_in``, as the transport does; each
    end waits for its copies). Returns ``{path: seconds per size}``."""
    if comm.Get_size() < 2:
        raise InputError("the transfer sweep needs two ranks: run it as 'mpiexec -n 2 sparsewire calibrate --device ...'")
    rank = comm.Get_rank()
    peer = 1 - rank if rank < 2 else None
    times_by_path: dict[str, list[float]] = {path: [] for path in paths}
    for size in sizes:
        elements = max(1, size // 8)
        buffer = backend.zeros((elements, 1), np.float64)
        flat, memory = backend.flat(buffer), backend.mpi_memory(buffer).reshape(-1)
        stage = backend.stage_zeros(elements, np.float64)
        stage[:] = np.arange(elements)
        backend.copy_in(stage, flat)
        for path in paths:
            times = []
            for trial in range(repeat + 1):
                comm.Barrier()
                started = time.perf_counter()
                if peer is not None:
                    _round_trip(comm, peer, backend, flat, memory, stage if path == "staged" else None)
                if trial:
                    times.append((time.perf_counter() - started) / 2)
            times_by_path[path].append(statistics.median(times))
        if rank == 0 and progress:
            progress(f"{size} bytes: " + ", ".join(f"{path} {times_by_path[path][-1] * 1e6:.2f} us" for path in paths))
    return times_by_path


def measure_transfer_paths(comm, backend, device: str, sizes: list[int], repeat: int = 20, progress=None) -> dict:
    """Collective (every rank of ``comm``). Both paths timed by :func:`time_transfer_paths`; returns
    the calibration record (rank 0's; the others get it too) with :func:`crossover`'s threshold.

    Raises:
        InputError (every rank) with fewer than two ranks, or where MPI cannot read the device's
        memory (then every message is staged and there is no crossover).
    """
    from mpi4py import MPI

    if comm.Get_size() < 2:
        raise InputError("the transfer sweep needs two ranks: run it as 'mpiexec -n 2 sparsewire calibrate --device ...'")
    fixed = default_rule(device)
    if fixed.staged_below_bytes >= EVERY_MESSAGE:
        raise InputError(
            f"no crossover to measure on {device}: {fixed.why}, every one of them; run with a CUDA-aware MPI "
            "(bench/README.md), or see bench/peers/gpu.py for the staged and NCCL times by message size"
        )
    rank = comm.Get_rank()
    measured = time_transfer_paths(comm, backend, sizes, repeat, ("direct", "staged"), progress)
    direct_times, staged_times = measured["direct"], measured["staged"]
    record = {
        **stamp(TRANSFER_KIND),
        "device": device_type(device),
        "staged_below_bytes": crossover(sizes, direct_times, staged_times),
        "sweep": [
            {"bytes": int(s), "direct_seconds": d, "staged_seconds": t} for s, d, t in zip(sizes, direct_times, staged_times)
        ],
        "ranks": "0 and 1 of " + str(comm.Get_size()),
        "mpi": " ".join(MPI.Get_library_version().split()[:3]),
    }
    return comm.bcast(record if rank == 0 else None, root=0)
