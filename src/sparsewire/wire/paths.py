"""Wire paths: how each message travels, chosen per message when the buffers are built.

A message's :class:`WirePath` is ``direct`` (MPI moves it from the backend's buffer itself) or
``staged`` (through a copy in host memory) or ``encoded`` (through a payload codec,
:mod:`~sparsewire.wire.codecs`: fewer bytes on the wire; chosen by the execution options' ``compress``:
every message, or with ``inter:`` those between groups). The ledger (:class:`~sparsewire.exec.transports.base.ByteLedger`)
keeps the bytes on the wire and the payload bytes apart; they differ on the encoded path only.

The staging rule is the semiring SpGEMM paper's hybrid communication (McFarland et al., ICPE '25,
sec. 4.2 and 5.2, Fig. 8): below some message size, copying a message out of device memory and
sending it host to host is faster than letting CUDA-aware MPI read device memory; above it the
direct path wins. Per message: a message of ``b`` bytes is staged when ``b < staged_below_bytes``.
Where MPI cannot read device memory at all (not CUDA-aware, as the MPICH wheel from PyPI), every
message is staged (:data:`EVERY_MESSAGE`), whatever a calibration says. The threshold is measured
by ``sparsewire calibrate --device D`` (:mod:`sparsewire.calibration.transfer`); without one the
default is :func:`default_rule`'s: on the CPU nothing staged, on CUDA with a CUDA-aware MPI
CombBLAS-GPU's fixed switch of 1 MiB.

Both ends decide on their own: MPI matches a message sent from host memory with a receive into
device memory and the other way round, so the sender's path and the receiver's need no agreement.
On CUDA (torch backend) staged messages go through pinned host memory
(:class:`~sparsewire.kernels.torch_backend.TorchBackend`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from sparsewire.comm.mpi_library import cuda_aware_mpi
from sparsewire.errors import InputError
from sparsewire.wire.codecs import parse_compress

__all__ = [
    "WirePath",
    "TransferRule",
    "default_rule",
    "device_type",
    "summarize_paths",
    "messages_per_path",
    "describe_paths",
    "EVERY_MESSAGE",
    "DEFAULT_CUDA_STAGED_BELOW",
]

#: ``staged_below_bytes`` that stages every message (MPI cannot read the device's memory).
EVERY_MESSAGE = 1 << 62
#: The uncalibrated threshold on CUDA with a CUDA-aware MPI: CombBLAS-GPU's fixed 1 MiB switch.
DEFAULT_CUDA_STAGED_BELOW = 1 << 20
_DEVICE_TYPES = ("cpu", "cuda")


class WirePath(enum.IntEnum):
    """How one message travels (its bytes on the wire equal its payload on the first two)."""

    DIRECT = 0  # MPI reads and writes the backend's buffer
    STAGED = 1  # copied through host memory at each end
    ENCODED = 2  # coded into a wire buffer (exec/codecs.py), decoded into the receive buffer


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

    def paths(self, message_bytes: np.ndarray) -> tuple[WirePath, ...]:
        """Not collective. Per message (bytes): its :class:`WirePath`."""
        return tuple(WirePath.STAGED if staged else WirePath.DIRECT for staged in self.staged(message_bytes).tolist())

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
    return TransferRule(
        DEFAULT_CUDA_STAGED_BELOW,
        f"not calibrated, CombBLAS-GPU's fixed 1 MiB switch ({how}); "
        "measure this machine's with 'mpiexec -n 2 sparsewire calibrate --device cuda'",
    )


_CLASSES = ("intra_group", "inter_group")
_PATHS = tuple(path.name.lower() for path in WirePath)  # direct, staged, encoded


def summarize_paths(comm, buffers, topology) -> dict:
    """Collective. Sent messages of every rank per link class (``intra_group``/``inter_group`` under
    ``topology``, flat when None) and path, as ``buffers`` mark them (``send_paths``): ``{class:
    {"direct"|"staged"|"encoded": [messages, payload bytes, smallest, largest]}}``."""
    from mpi4py import MPI

    from sparsewire.topology.model import Topology

    groups = (topology or Topology.flat()).groups(comm.Get_size())
    rank, itemsize = comm.Get_rank(), buffers.dtype.itemsize
    counts = np.zeros((2, len(_PATHS), 2), np.int64)  # class, path (WirePath), (messages, bytes)
    smallest = np.full((2, len(_PATHS)), np.iinfo(np.int64).max, np.int64)
    largest = np.zeros((2, len(_PATHS)), np.int64)
    for ex in buffers.exchanges:
        for message, (destination, elements) in enumerate(zip(ex.send_ranks, ex.send_elements)):
            link, path, size = int(groups[destination] != groups[rank]), int(ex.send_paths[message]), elements * itemsize
            counts[link, path] += (1, size)
            smallest[link, path] = min(smallest[link, path], size)
            largest[link, path] = max(largest[link, path], size)
    for array, op in ((counts, MPI.SUM), (smallest, MPI.MIN), (largest, MPI.MAX)):
        comm.Allreduce(MPI.IN_PLACE, array, op=op)
    return {
        name: {
            path: [int(counts[c, p, 0]), int(counts[c, p, 1]), int(smallest[c, p]), int(largest[c, p])]
            for p, path in enumerate(_PATHS)
            if counts[c, p, 0]
        }
        for c, name in enumerate(_CLASSES)
    }


def messages_per_path(summary: dict) -> dict[str, int]:
    """Not collective. ``{"direct": n, "staged": m, "encoded": e}``: the messages of a :func:`summarize_paths`
    summary, all link classes together."""
    totals = dict.fromkeys(_PATHS, 0)
    for per_class in summary.values():
        for path, (messages, *_) in per_class.items():
            totals[path] += messages
    return totals


def describe_paths(rule: TransferRule, staging: bool, transport: str, summary: dict, compress: str = "none") -> list[str]:
    """Not collective. ``explain()``'s lines: the rule and why (or the payload codec every message goes through), then
    per link class how many messages (and of which payload sizes) take each path."""
    from sparsewire._lib.text import format_bytes

    name, scope = parse_compress(compress)
    if name != "none":
        which = "messages between groups" if scope == "inter" else "every message"
        lines = [f"transfers: {which} through the {name} payload codec (host memory: nothing staged)"]
    elif staging:
        lines = [f"transfers: {rule.describe()}"]
    elif transport == "mpi":
        lines = [
            "transfers: every message direct: the partitioned mode sends each partition from the buffers (staging is per whole "
            "message)"
        ]
    else:
        lines = [f"transfers: every message direct: the {transport} transport sends the buffers themselves"]
    for name in _CLASSES:
        parts = [
            f"{messages} {path} ({format_bytes(low)}-{format_bytes(high)})"
            for path, (messages, _, low, high) in summary[name].items()
        ]
        if parts:
            lines.append(f"  {name.replace('_', '-')} messages: {', '.join(parts)}")
    aware, how = cuda_aware_mpi()
    lines.append(f"MPI reads CUDA memory: {'yes' if aware else 'no'} ({how})")
    return lines
