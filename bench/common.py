"""Helpers shared by the benchmark scripts: the default matrix list and short names."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_matrices(generated: list[str]) -> list[str]:
    """Every ``../shared/data/*.mtx.gz`` (when present), then the generator specs ``generated``."""
    shared = ROOT.parent / "shared" / "data"
    files = sorted(str(p) for p in shared.glob("*.mtx.gz")) if shared.is_dir() else []
    return files + generated


def short_name(spec: str) -> str:
    """A file's name without ``.mtx.gz``; a generator spec as is."""
    return Path(spec).name.removesuffix(".mtx.gz") if os.sep in spec else spec
