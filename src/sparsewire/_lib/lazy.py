"""Names a package exports but loads on first use (PEP 562), so that importing the package does not
import what they need (MPI, PyTorch, python-graphblas, Numba)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["lazy_exports"]


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable, Callable]:
    """Not collective. ``(__getattr__, __dir__)`` for ``package``, which exports each of ``names`` on first use:
    name -> the module that defines it (the module's attribute of that name), or the module itself where it
    has no such attribute (``"compiled": "sparsewire.kernels.compiled"`` exports the module)."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(names[name])
        value = getattr(module, name, module)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
