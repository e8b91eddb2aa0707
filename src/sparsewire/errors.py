"""Exceptions raised by sparsewire.

Every error a user can cause (bad file, bad argument, mismatched partition) is a
:class:`SparsewireError`; its message names the problem and the fix. Subclasses also derive
from the matching builtin so that ``except ValueError`` keeps working.
"""

from __future__ import annotations

import sys
import warnings

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
    Silence it with ``warnings.filterwarnings("ignore", category=sparsewire.FallbackWarning)``."""


_show_other_warnings = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Show sparsewire's warnings as one line, ``sparsewire: notice: <message>``, the form of the
    command line's other messages (the file and line of the library's code would tell a user
    nothing); every other warning as before. Filters apply first, as for any warning."""
    if issubclass(category, SparsewireWarning):
        print(f"sparsewire: notice: {message}", file=sys.stderr if file is None else file, flush=True)
    else:
        _show_other_warnings(message, category, filename, lineno, file, line)


warnings.showwarning = _show_warning
