"""Exceptions raised by sparsewire.

Every error a user can cause (bad file, bad argument, mismatched partition) is a
:class:`SparsewireError`; its message names the problem and the fix. Subclasses also derive
from the matching builtin so that ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = ["SparsewireError", "InputError", "PlanMismatchError", "SparsewireWarning", "FallbackWarning"]


class SparsewireError(Exception):
    """Base class of every error sparsewire raises on purpose."""


class InputError(SparsewireError, ValueError):
    """A file, generator spec or argument that cannot be used as given."""


class PlanMismatchError(SparsewireError, ValueError):
    """A plan used with data, ranks or settings it was not built for."""


class SparsewireWarning(UserWarning):
    """Base class of the warnings sparsewire gives (filter them with ``warnings.filterwarnings``)."""


class FallbackWarning(SparsewireWarning):
    """What was asked for runs another way on this machine (the result is the same), e.g. the
    partitioned mode on point-to-point requests where MPI has no partitioned communication.
    Silence it with ``warnings.filterwarnings("ignore", category=sparsewire.errors.FallbackWarning)``."""
