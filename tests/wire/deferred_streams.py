"""CUDA's stream order on the CPU, for drivers that run the torch backend's CUDA branches without a GPU.

On a GPU a copy queued on a stream runs some time later, in that stream's order: before a wait on
the stream (``synchronize``, or another stream's ``wait_stream``) it may not have run yet. Here the
copy stream is a :class:`DeferredStream`: a copy queued on it with ``non_blocking=True`` runs only
when the host synchronises the stream or the compute stream waits for it, the latest moment a GPU
may run it. The compute stream runs everything at once (CPU kernels), as a GPU that is always done.
So a missing ``synchronize`` before MPI reads staged memory, or a missing wait before a kernel
reads what a copy writes, leaves stale data in C.

:func:`install` makes :class:`~sparsewire.kernels.torch_backend.TorchBackend` on ``cpu`` take its
CUDA branches (``mpi_memory`` the tensor itself, copies on the copy stream, ``synchronize``); only
``stage_zeros`` keeps its CPU branch (pinned memory needs CUDA).
"""

from __future__ import annotations

import contextlib

import torch

from sparsewire._lib.aligned import zeros_aligned
from sparsewire.kernels.torch_backend import TorchBackend

__all__ = ["DeferredStream", "install"]

_active: list = []  # the deferred stream of the innermost torch.cuda.stream block


class DeferredStream:
    """A copy stream whose copies wait for a synchronisation (see the module docstring)."""

    def __init__(self) -> None:
        self.pending: list = []
        self.deferred = 0  # copies that were queued (so a test can tell the branches ran)

    def run_pending(self) -> None:
        pending, self.pending = self.pending, []
        for target, source in pending:
            _plain_copy(target, source)

    def wait_stream(self, other) -> None:
        if isinstance(other, DeferredStream):
            other.run_pending()

    def synchronize(self) -> None:
        self.run_pending()


_plain_copy = torch.Tensor.copy_


def _copy(self: torch.Tensor, source: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if _active and non_blocking:
        _active[-1].pending.append((self, source))
        _active[-1].deferred += 1
        return self
    return _plain_copy(self, source, non_blocking)


@contextlib.contextmanager
def _using(stream: DeferredStream):
    _active.append(stream)
    try:
        yield
    finally:
        _active.pop()


def install() -> DeferredStream:
    """Make every new TorchBackend take its CUDA branches over deferred copies; returns the copy
    stream they share (its ``deferred`` counts the copies queued)."""
    copies, compute = DeferredStream(), DeferredStream()  # nothing is queued on compute: its kernels ran when called
    plain_init = TorchBackend.__init__

    def init(self, device: str = "cpu") -> None:
        plain_init(self, device)
        self._copies = copies

    TorchBackend.__init__ = init
    TorchBackend.stage_zeros = lambda self, elements, dtype: zeros_aligned((elements,), dtype)  # its CPU branch
    torch.cuda.current_stream = lambda device=None: compute
    torch.cuda.stream = _using
    torch.Tensor.copy_ = _copy
    return copies
