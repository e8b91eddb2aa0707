"""Transports by name: a registry in the manner of PETSc's ``PetscSFRegister`` (each
implementation in its own module, registered once under the name ``--transport`` and
``ExecOptions.transport`` take).

A registration names the modes the transport runs, one line for ``--help``, and a *selector*
``select(mode, comm, device) -> type[Transport]`` (a callable, or ``"module:function"`` imported
on first use, so that registering ``torch`` does not import PyTorch). A transport may also name a
``problem(mode, device) -> str | None`` for what it cannot run on a device. A new transport is
one module with its :class:`~sparsewire.exec.transports.base.Transport` subclass and one call of
:func:`register_transport`; the executor, :class:`~sparsewire.exec.options.ExecOptions` and the command
line read the registry (``tests/exec/test_transport_registry.py`` registers a recording transport
defined in the tests alone).

Built in: ``mpi`` (:mod:`~sparsewire.exec.transports.mpi`) and ``torch``
(:mod:`~sparsewire.exec.transports.torch_distributed`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

from sparsewire.errors import InputError
from sparsewire.plan.modes import MODES, Mode

__all__ = ["TransportEntry", "register_transport", "transport_names", "transport_entry", "transport_problem", "transport_help"]


def _resolve(target):
    """A callable, or ``"module:attribute"`` imported now."""
    if callable(target) or target is None:
        return target
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclasses.dataclass(frozen=True)
class TransportEntry:
    """One registered transport: its name, the modes it runs, a line for ``--help``, its selector
    and its device check (see the module docstring)."""

    name: str
    modes: frozenset[Mode]
    summary: str
    select: str | Callable
    problem: str | Callable | None = None

    def transport_class(self, mode: Mode, comm, device: str = "cpu") -> type:
        """Not collective. The Transport class that runs ``mode`` (the ``mpi`` selector asks the MPI
        library whether it has partitioned messages, and warns on rank 0 when it falls back)."""
        return _resolve(self.select)(Mode(mode), comm, device)

    def mode_problem(self, mode: str, device: str = "cpu") -> str | None:
        """Not collective. Why this transport cannot run ``mode`` with buffers on ``device`` (None: it can)."""
        if Mode(mode) not in self.modes:
            return (
                f"the {self.name} transport cannot run the {mode} mode (it runs {', '.join(m for m in MODES if m in self.modes)})"
                + (
                    "; the partitioned mode needs MPI-4 partitioned messages: use transport 'mpi'"
                    if Mode(mode) is Mode.PARTITIONED
                    else ""
                )
            )
        check = _resolve(self.problem)
        return check(mode, device) if check is not None else None


_REGISTRY: dict[str, TransportEntry] = {}


def register_transport(
    name: str, *, modes, summary: str, select: str | Callable, problem: str | Callable | None = None, replace: bool = False
) -> TransportEntry:
    """Not collective (every rank registers the same transports before planning). Make a transport
    known under ``name`` (see the module docstring); ``replace=True`` to register a name again."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise InputError(f"a transport name is letters, digits, '-' and '_' (got {name!r})")
    if name in _REGISTRY and not replace:
        raise InputError(f"a transport named {name!r} is registered already; pass replace=True to replace it")
    entry = TransportEntry(name, frozenset(Mode(m) for m in modes), summary, select, problem)
    _REGISTRY[name] = entry
    return entry


def transport_names() -> tuple[str, ...]:
    """Not collective. The registered transports' names, in registration order."""
    return tuple(_REGISTRY)


def transport_entry(name: str) -> TransportEntry:
    """Not collective. The registration of ``name``.

    Raises:
        InputError naming the registered transports when there is none of that name.
    """
    if name not in _REGISTRY:
        raise InputError(f"unknown transport {name!r}; choose {' or '.join(_REGISTRY)}")
    return _REGISTRY[name]


def transport_problem(name: str, mode: str, device: str = "cpu") -> str | None:
    """Not collective. What is wrong with running ``mode`` on transport ``name`` with buffers on
    ``device`` (None: nothing)."""
    if name not in _REGISTRY:
        return f"unknown transport {name!r}; choose {' or '.join(_REGISTRY)}"
    if mode not in MODES:
        return f"unknown mode {mode!r}; choose from {', '.join(MODES)}"
    return _REGISTRY[name].mode_problem(mode, device)


def transport_help() -> str:
    """Not collective. One sentence per registered transport, for ``--help``."""
    return "; ".join(f"{entry.name}: {entry.summary}" for entry in _REGISTRY.values())


register_transport(
    "mpi",
    modes=tuple(Mode),
    select="sparsewire.exec.transports.mpi_partitioned:select",
    summary="MPI point to point (persistent requests; MPI-4 partitioned messages for the partitioned mode); bytes counted from "
    "the "
    "receive statuses",
)
register_transport(
    "torch",
    modes=(Mode.BULK, Mode.OVERLAP, Mode.PIPELINED, Mode.EARLY),
    select="sparsewire.exec.transports.torch_distributed:select",
    problem="sparsewire.exec.transports.torch_distributed:device_mode_problem",
    summary="torch.distributed (Gloo for CPU tensors, NCCL for CUDA tensors), for PyTorch programs; every mode but partitioned",
)
