"""Files written whole or not at all.

:func:`atomic_write` writes into a temporary file beside the target (same directory, so the same file system),
flushes and fsyncs it, renames it over the target (``os.replace``: atomic on POSIX) and fsyncs the directory. A kill
at any point leaves the target as it was or as the whole new file; a failure (a full disk, a write error, an
exception in the caller's writing, Ctrl-C) removes the temporary file and leaves the target as it was. Only SIGKILL
or a power loss can leave the temporary file itself (named ``.NAME.*.partial``), never a damaged target.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "save_figure", "PARTIAL_SUFFIX"]

#: The suffix of the temporary files (what a SIGKILL can leave behind).
PARTIAL_SUFFIX = ".partial"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Not collective. A file object to write ``path``'s new content into (``mode`` ``"wb"`` or ``"w"``); the target
    is replaced when the block ends without an exception, and left as it was otherwise (module docstring). The new
    file keeps the old one's permissions, or gets the usual ones (0666 less the umask). An OSError propagates."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write writes new files only ('wb' or 'w'), not {mode!r}")
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=PARTIAL_SUFFIX, dir=directory)
    try:
        try:
            permissions = os.stat(target).st_mode & 0o7777
        except FileNotFoundError:
            permissions = 0o666 & ~_umask()
        os.fchmod(descriptor, permissions)
        with os.fdopen(descriptor, mode) as handle:
            descriptor = None
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        if descriptor is not None:
            os.close(descriptor)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # the rename itself durable (not every file system can open a directory)
        folder = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def save_figure(figure, path: str | os.PathLike, **options) -> None:
    """Not collective. ``figure.savefig`` through :func:`atomic_write`, in the format ``path``'s extension names."""
    extension = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or None
    with atomic_write(path) as handle:
        figure.savefig(handle, format=extension, **options)
