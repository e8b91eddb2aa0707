"""Transfer paths: per message, whether MPI moves it from the backend's buffer itself (``direct``)
or through a copy in host memory (``staged``).

The semiring SpGEMM paper's hybrid communication (McFarland et al., ICPE '25, sec. 4.2 and 5.2,
Fig. 8): below some message size, copying a message out of device memory and sending it host to
host is faster than letting CUDA-aware MPI read device memory; above it the direct path wins. The
rule here is theirs, per message: a message of ``b`` bytes is staged when ``b <
staged_below_bytes``. Where MPI cannot read device memory at all (not CUDA-aware, as the MPICH
wheel from PyPI), every message is staged (:data:`EVERY_MESSAGE`), whatever a calibration says.
The threshold is measured by ``sparsewire calibrate --device D`` (:func:`measure_transfer_paths`:
both paths, message by message size, between two ranks) and stored
(:func:`default_transfer_calibration_path`); without a calibration the default is
:func:`default_rule`'s: on the CPU nothing staged, on CUDA with a CUDA-aware MPI CombBLAS-GPU's
fixed switch of 1 MiB.

Both ends decide on their own: MPI matches a message sent from host memory with a receive into
device memory and the other way round, so the sender's path and the receiver's need no agreement.

On the CPU (NumPy and torch backends) the buffers are host memory, so a calibration there only
exercises the copies a device makes. On CUDA (torch backend) staged messages go through pinned
host memory (:class:`~sparsewire.exec.torch_backend.TorchBackend`). :func:`cuda_aware_mpi`
answers whether the MPI library can read CUDA memory, as ``explain()`` reports.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sparsewire.errors import InputError

__all__ = [
    "TransferRule", "default_rule", "transfer_rule", "load_transfer_calibration", "default_transfer_calibration_path", "cuda_aware_mpi",
    "crossover", "time_transfer_paths", "measure_transfer_paths", "summarize_paths", "messages_per_path", "describe_paths", "CALIBRATION_KIND", "EVERY_MESSAGE",
    "DEFAULT_CUDA_STAGED_BELOW",
]

#: The ``kind`` field of a transfer calibration file.
CALIBRATION_KIND = "sparsewire transfer calibration"
_VERSION = 1
#: ``staged_below_bytes`` that stages every message (MPI cannot read the device's memory).
EVERY_MESSAGE = 1 << 62
#: The uncalibrated threshold on CUDA with a CUDA-aware MPI: CombBLAS-GPU's fixed 1 MiB switch.
DEFAULT_CUDA_STAGED_BELOW = 1 << 20
_DEVICE_TYPES = ("cpu", "cuda")


def device_type(device: str) -> str:
    """Not collective. ``cuda`` for ``cuda:1``; ``cpu`` for ``cpu``."""
    return device.split(":", 1)[0]


@dataclass(frozen=True)
class TransferRule:
    """Which path a message takes on this rank: staged when its bytes are below
    ``staged_below_bytes`` (direct otherwise); ``why``: where the threshold comes from."""

    staged_below_bytes: int
    why: str

    def staged(self, message_bytes: np.ndarray) -> np.ndarray:
        """Not collective. Per message (bytes): True where it is staged."""
        return np.asarray(message_bytes, np.int64) < self.staged_below_bytes

    def describe(self) -> str:
        """Not collective. One line for ``explain()``."""
        if self.staged_below_bytes <= 0:
            return f"every message direct: {self.why}"
        if self.staged_below_bytes >= EVERY_MESSAGE:
            return f"every message staged through host memory: {self.why}"
        return f"messages below {self.staged_below_bytes} bytes staged through host memory, the rest direct: {self.why}"


def _check_device_type(device: str) -> None:
    if device_type(device) not in _DEVICE_TYPES:
        raise InputError(f"transfers out of {device!r} memory are not built; use device cpu or cuda")


def default_rule(device: str) -> TransferRule:
    """Not collective. The rule before any calibration: on the CPU every message direct (the
    buffers are host memory; a copy would only add time); on CUDA every message staged when MPI
    cannot read CUDA memory, else messages below :data:`DEFAULT_CUDA_STAGED_BELOW` staged."""
    _check_device_type(device)
    if device_type(device) == "cpu":
        return TransferRule(0, "the buffers are host memory (device cpu), which MPI reads as it is")
    aware, how = cuda_aware_mpi()
    if not aware:
        return TransferRule(EVERY_MESSAGE, f"MPI cannot read CUDA memory ({how}), so messages go through pinned host memory")
    return TransferRule(DEFAULT_CUDA_STAGED_BELOW, f"not calibrated, CombBLAS-GPU's fixed 1 MiB switch ({how}); "
                        "measure this machine's with 'mpiexec -n 2 sparsewire calibrate --device cuda'")


def default_transfer_calibration_path(device: str) -> Path:
    """Not collective. Where ``sparsewire calibrate --device D`` writes and the executor looks for the
    calibration of D's type: ``$XDG_CACHE_HOME/sparsewire/transfer-<type>.json`` (``~/.cache`` by
    default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparsewire" / f"transfer-{device_type(device)}.json"


def load_transfer_calibration(path: str | os.PathLike, device: str) -> TransferRule:
    """Not collective. The rule stored in the calibration file at ``path`` for ``device``.

    Raises:
        InputError naming the file and the fix when it is missing, not a transfer calibration,
        of another version, for another device type, or holds no valid threshold.
    """
    path = Path(path)
    rerun = f"rerun 'mpiexec -n 2 sparsewire calibrate --device {device_type(device)} --output {path}'"
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"transfer calibration {path} does not exist; {rerun}") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InputError(f"{path} is not a transfer calibration ({error}); {rerun}") from None
    if not isinstance(record, dict) or record.get("kind") != CALIBRATION_KIND:
        raise InputError(f"{path} is not a transfer calibration (no kind {CALIBRATION_KIND!r}); {rerun}")
    if record.get("version") != _VERSION:
        raise InputError(f"{path} is a transfer calibration of version {record.get('version')!r}, this sparsewire reads {_VERSION}; {rerun}")
    if record.get("device") != device_type(device):
        raise InputError(f"{path} calibrates device type {record.get('device')!r}, not {device_type(device)!r}; {rerun}")
    threshold = record.get("staged_below_bytes")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        raise InputError(f"{path}: staged_below_bytes must be a whole number of bytes >= 0 (got {threshold!r}); {rerun}")
    return TransferRule(threshold, f"calibrated in {path} ({record.get('written', 'undated')})")


def transfer_rule(device: str, calibration: str | os.PathLike | None = None) -> TransferRule:
    """Not collective. The rule of an executor on ``device``: from ``calibration`` when given, else
    from :func:`default_transfer_calibration_path` when that file exists, else
    :func:`default_rule`; always :func:`default_rule`'s (every message staged) where MPI cannot
    read the device's memory."""
    fallback = default_rule(device)  # the device check comes first
    if fallback.staged_below_bytes >= EVERY_MESSAGE:
        if calibration is not None:  # still refuse a bad file
            load_transfer_calibration(calibration, device)
        return fallback  # MPI cannot send from device memory: no threshold applies
    if calibration is not None:
        return load_transfer_calibration(calibration, device)
    stored = default_transfer_calibration_path(device)
    return load_transfer_calibration(stored, device) if stored.exists() else fallback


def _mpi_library() -> ctypes.CDLL | None:
    """The MPI library mpi4py loaded (mpi4py opens it with local symbols, so look it up by path)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "/libmpi.so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def cuda_aware_mpi() -> tuple[bool, str]:
    """Not collective. Whether the MPI library can read CUDA device memory, and how that was found
    out. Asks ``MPIX_Query_cuda_support`` (MPICH 4 and later, Open MPI), which answers without
    side effects; MPICH's ``MPIX_GPU_query_support`` is not called, since MPICH before 4.1 asserts
    in it when built without GPU support. The MPICH wheel from PyPI is built without CUDA: no."""
    from mpi4py import MPI

    version = " ".join(MPI.Get_library_version().split()[:3])  # "MPICH Version: 5.0.2", "Open MPI v5.0.5, ..."
    library = _mpi_library()
    query = getattr(library, "MPIX_Query_cuda_support", None) if library is not None else None
    if query is None:
        return False, f"{version} offers no MPIX_Query_cuda_support, so it is taken as not CUDA-aware"
    query.restype, query.argtypes = ctypes.c_int, []
    answer = bool(query())
    return answer, f"{version}: MPIX_Query_cuda_support() = {int(answer)}"


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


def time_transfer_paths(comm, backend, sizes: list[int], repeat: int = 20, paths: tuple[str, ...] = ("direct", "staged"),
                        progress=None) -> dict[str, list[float]]:
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
        raise InputError(f"no crossover to measure on {device}: {fixed.why}, every one of them; run with a CUDA-aware MPI "
                         "(bench/README.md), or see bench/gpu.py for the staged and NCCL times by message size")
    rank = comm.Get_rank()
    measured = time_transfer_paths(comm, backend, sizes, repeat, ("direct", "staged"), progress)
    direct_times, staged_times = measured["direct"], measured["staged"]
    record = {
        "kind": CALIBRATION_KIND,
        "version": _VERSION,
        "device": device_type(device),
        "staged_below_bytes": crossover(sizes, direct_times, staged_times),
        "sweep": [{"bytes": int(s), "direct_seconds": d, "staged_seconds": t} for s, d, t in zip(sizes, direct_times, staged_times)],
        "ranks": "0 and 1 of " + str(comm.Get_size()),
        "mpi": " ".join(MPI.Get_library_version().split()[:3]),
        "host": platform.node(),
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    return comm.bcast(record if rank == 0 else None, root=0)


_CLASSES = ("intra_group", "inter_group")


def summarize_paths(comm, buffers, topology) -> dict:
    """Collective. Sent messages of every rank per link class (``intra_group``/``inter_group`` under
    ``topology``, flat when None) and path, as ``buffers`` mark them (``send_staged``): ``{class:
    {"staged"|"direct": [messages, bytes, smallest, largest]}}``."""
    from mpi4py import MPI

    from sparsewire.topology import Topology

    groups = (topology or Topology.flat()).groups(comm.Get_size())
    rank, itemsize = comm.Get_rank(), buffers.dtype.itemsize
    counts = np.zeros((2, 2, 2), np.int64)  # class, path (0 direct, 1 staged), (messages, bytes)
    smallest = np.full((2, 2), np.iinfo(np.int64).max, np.int64)
    largest = np.zeros((2, 2), np.int64)
    for ex in buffers.exchanges:
        staged = set(ex.send_staged)
        for message, (destination, elements) in enumerate(zip(ex.send_ranks, ex.send_elements)):
            link, path, size = int(groups[destination] != groups[rank]), int(message in staged), elements * itemsize
            counts[link, path] += (1, size)
            smallest[link, path] = min(smallest[link, path], size)
            largest[link, path] = max(largest[link, path], size)
    for array, op in ((counts, MPI.SUM), (smallest, MPI.MIN), (largest, MPI.MAX)):
        comm.Allreduce(MPI.IN_PLACE, array, op=op)
    return {
        name: {path: [int(counts[c, p, 0]), int(counts[c, p, 1]), int(smallest[c, p]), int(largest[c, p])]
               for p, path in enumerate(("direct", "staged")) if counts[c, p, 0]}
        for c, name in enumerate(_CLASSES)
    }


def messages_per_path(summary: dict) -> dict[str, int]:
    """Not collective. ``{"staged": n, "direct": m}``: the messages of a :func:`summarize_paths`
    summary, all link classes together."""
    totals = {"staged": 0, "direct": 0}
    for per_class in summary.values():
        for path, (messages, *_) in per_class.items():
            totals[path] += messages
    return totals


def describe_paths(rule: TransferRule, staging: bool, transport: str, summary: dict) -> list[str]:
    """Not collective. ``explain()``'s lines: the rule and why, then per link class how many
    messages (and of which sizes) take each path."""
    from sparsewire.report import format_bytes

    if staging:
        lines = [f"transfers: {rule.describe()}"]
    elif transport == "mpi":
        lines = ["transfers: every message direct: the partitioned mode sends each partition from the buffers (staging is per whole message)"]
    else:
        lines = [f"transfers: every message direct: the {transport} transport sends the buffers themselves"]
    for name in _CLASSES:
        parts = [f"{messages} {path} ({format_bytes(low)}-{format_bytes(high)})" for path, (messages, _, low, high) in summary[name].items()]
        if parts:
            lines.append(f"  {name.replace('_', '-')} messages: {', '.join(parts)}")
    aware, how = cuda_aware_mpi()
    lines.append(f"MPI reads CUDA memory: {'yes' if aware else 'no'} ({how})")
    return lines
