"""Kernel backends by name, and the kernels themselves: where an executor's buffers live and what
runs its local products.

Every local operation of a multiply goes through one backend object (``buffers.kernels``; the
protocol is :class:`~sparsewire.kernels.numpy_backend.NumpyBackend`'s):

* ``numpy`` (:mod:`~sparsewire.kernels.numpy_backend`, the default): NumPy arrays on cache
  lines and the compiled (Numba) kernels of :mod:`~sparsewire.kernels.compiled`
  (:mod:`~sparsewire.kernels.numba_csr`, :mod:`~sparsewire.kernels.numba_messages`,
  :mod:`~sparsewire.kernels.simd`, :mod:`~sparsewire.kernels.atomics`); every mode;
* ``torch`` (:mod:`~sparsewire.kernels.torch_backend`): tensors of a torch device (``cpu``,
  ``cuda``) and PyTorch's sparse CSR products and gathers; every mode but partitioned.

Both give the same C (exact on integer data): ``tests/exec/test_backends.py`` runs every strategy
and mode the torch backend supports on both. Backends are imported on first use, so a process
that names ``torch`` never loads Numba and one that names ``numpy`` never loads PyTorch.
"""

from __future__ import annotations

import importlib

from sparsewire._lib.lazy import lazy_exports
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.plan.modes import Mode

__all__ = [
    "BACKENDS",
    "backend_class",
    "backend_problem",
    "make_backend",
    "refuse_unsupported_values",
    "refuse_non_dense",
    "compiled",
    "TorchBackend",
    "node_device",
    "read_b_rows",
    "read_b_rows_scratch",
]

# Loaded on first use: the compiled kernels and their ceiling need Numba, the torch backend PyTorch.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "compiled": "sparsewire.kernels.compiled",
        "TorchBackend": "sparsewire.kernels.torch_backend",
        "node_device": "sparsewire.kernels.torch_backend",
        "read_b_rows": "sparsewire.kernels.roofline",
        "read_b_rows_scratch": "sparsewire.kernels.roofline",
    },
)

#: Every backend's name and the class that implements it (``module:class``, imported on first use).
_CLASSES = {
    "numpy": "sparsewire.kernels.numpy_backend:NumpyBackend",
    "torch": "sparsewire.kernels.torch_backend:TorchBackend",
}
#: The kernel backends' names, for ``--backend`` and :class:`~sparsewire.exec.options.ExecOptions`.
BACKENDS = tuple(_CLASSES)


def backend_class(name: str) -> type:
    """Not collective. The class of backend ``name`` (imported now)."""
    if name not in _CLASSES:
        raise InputError(f"unknown backend {name!r}; choose {' or '.join(BACKENDS)}")
    module, _, attribute = _CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def backend_problem(backend: str, device: str, mode: str | None) -> str | None:
    """Not collective. What is wrong with running ``mode`` (None: not chosen yet) on ``backend``
    and ``device`` (None: nothing)."""
    if backend not in BACKENDS:
        return f"unknown backend {backend!r}; choose {' or '.join(BACKENDS)}"
    if backend == "numpy":
        return (
            None
            if device == "cpu"
            else f"the numpy backend runs on the CPU (got device {device!r}); pass backend='torch' for another device"
        )
    implementation = backend_class(backend)
    problem = implementation.device_problem(device)
    if problem:
        return problem
    if mode is not None and Mode(mode) not in implementation.modes:
        return (
            f"the {backend} backend cannot run the {mode} mode (it runs "
            f"{', '.join(m.value for m in Mode if m in implementation.modes)}); use one of those or backend 'numpy'"
        )
    return None


def make_backend(backend: str, device: str = "cpu"):
    """Not collective. The backend object named ``backend`` on ``device``.

    Raises:
        InputError naming the problem (:func:`backend_problem`) when it cannot run there.
    """
    problem = backend_problem(backend, device, None)
    if problem:
        raise InputError(problem)
    return backend_class(backend)() if backend == "numpy" else backend_class(backend)(device)


def refuse_unsupported_values(kind: str | None, name: str, rank: int) -> None:
    """Not collective. Raise PlanMismatchError for a B whose values the kernels cannot take exactly:
    complex (its imaginary part would be dropped) or not numbers at all. Booleans and integers are
    converted to the plan's dtype. ``kind``: NumPy's dtype kind letter (``c`` complex, ``f`` float...)."""
    if kind not in ("b", "i", "u", "f"):
        what = "complex" if kind == "c" else "not numbers"
        raise PlanMismatchError(
            f"rank {rank}: the B block's values are {name} ({what}); the kernels multiply real float32 or float64 "
            "(booleans and integers are converted). For a complex B multiply B.real and B.imag separately"
        )


def refuse_non_dense(b, rank: int, accepted: tuple[type, ...]) -> None:
    """Not collective. Raise PlanMismatchError for a B that is not one of the ``accepted`` dense types (a SciPy
    sparse matrix, a list), naming what it is and what to pass instead."""
    if not isinstance(b, accepted):
        fix = (
            "multiply sparse matrices with sparsewire.plan_spgemm, or pass b.toarray()"
            if hasattr(b, "tocsr")
            else ("pass np.asarray(b)")
        )
        raise PlanMismatchError(f"rank {rank}: the B block is a {type(b).__name__}, not a dense array; {fix}")
