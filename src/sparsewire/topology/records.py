"""The calibration cache: one directory, one JSON record per measurement, one versioned schema.

Every record is a JSON object with ``kind`` (``compute``, ``transfer``, ...), ``schema`` (the
version of :data:`SCHEMA` that wrote it), ``written`` (UTC) and ``host``, beside its own fields.
Records live in :func:`cache_directory` (``$XDG_CACHE_HOME/sparsewire``, ``~/.cache/sparsewire``
by default) unless a command is given another file. Reading checks the kind and schema and names
the command that writes a good one.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

from sparsewire._lib.atomic import atomic_write
from sparsewire.errors import InputError

__all__ = ["SCHEMA", "cache_directory", "record_path", "stamp", "read_record", "write_record"]

#: The calibration records' schema version (2: one schema for every kind; 1 was the transfer file alone).
SCHEMA = 2


def cache_directory() -> Path:
    """Not collective. ``$XDG_CACHE_HOME/sparsewire`` (``~/.cache/sparsewire`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sparsewire"


def record_path(name: str) -> Path:
    """Not collective. The cache's file for a record named ``name`` (``compute``, ``transfer-cpu``, ...)."""
    return cache_directory() / f"{name}.json"


def stamp(kind: str) -> dict:
    """Not collective. The fields every record starts with: kind, schema, time written, host."""
    written = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {"kind": kind, "schema": SCHEMA, "written": written, "host": platform.node()}


def read_record(path: str | os.PathLike, kind: str, rerun: str) -> dict:
    """Not collective. The record of ``kind`` at ``path``.

    Raises:
        InputError naming the file and ``rerun`` (the command that writes a good one) when it is
        missing, not JSON, another kind, or another schema.
    """
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"calibration {path} does not exist; {rerun}") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InputError(f"{path} is not a calibration record ({error}); {_elsewhere(rerun, path)}") from None
    if not isinstance(record, dict) or record.get("kind") != kind:
        found = record.get("kind") if isinstance(record, dict) else None
        raise InputError(f"{path} is not a {kind} calibration (its kind is {found!r}); {_elsewhere(rerun, path)}")
    if record.get("schema") != SCHEMA:
        raise InputError(
            f"{path} is a {kind} calibration of schema {record.get('schema')!r}, this sparsewire reads {SCHEMA}; {rerun}"
        )
    return record


def _elsewhere(rerun: str, path: Path) -> str:
    """The fix for a file that is not ours: never a command that would write over it."""
    if f"--output {path}" not in rerun:
        return rerun
    return (
        rerun.replace(f"--output {path}", "--output NEW.json") + f" and pass NEW.json (not over {path}: it is not such a record)"
    )


def write_record(path: str | os.PathLike, record: dict) -> Path:
    """Not collective. Write ``record`` (made with :func:`stamp`'s fields) to ``path``, making its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as handle:
        handle.write(json.dumps(record, indent=1) + "\n")
    return path
