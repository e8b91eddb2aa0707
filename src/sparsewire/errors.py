"""Exceptions raised by sparsewire.

Every error a user can cause (bad file, bad argument, mismatched partition) is a
:class:`SparsewireError`; its message names the problem and the fix. Subclasses also derive
from the matching builtin so that ``except ValueError`` keeps working.
"""

from __future__ import annotations


class SparsewireError(Exception):
    """Base class of every error sparsewire raises on purpose."""


class InputError(SparsewireError, ValueError):
    """A file, generator spec or argument that cannot be used as given."""


class PlanMismatchError(SparsewireError, ValueError):
    """A plan used with data, ranks or settings it was not built for."""
