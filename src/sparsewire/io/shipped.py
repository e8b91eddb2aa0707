"""The matrices that ship with the package, found by name: ``load_matrix("bcsstk25")``.

A few small real inputs (``io/data/MANIFEST.md``: each with its source, licence and checksum) live
beside this module, so that examples run on a fresh clone without other data. A name resolves to its
file only when no file of that name exists where the user runs: a path always wins.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA", "SHIPPED", "shipped_path"]

#: The folder of the shipped files.
DATA = Path(__file__).resolve().parent / "data"
#: Every shipped input by name: its file in :data:`DATA`.
SHIPPED = {"bcsstk25": "bcsstk25.mtx.gz", "delaunay_n16": "delaunay_n16.mtx.gz", "cora": "cora.npz"}


def shipped_path(name: str) -> Path | None:
    """Not collective. The file of the shipped input ``name`` (case as listed in :data:`SHIPPED`),
    or None when no input of that name ships."""
    file = SHIPPED.get(name)
    return None if file is None else DATA / file
