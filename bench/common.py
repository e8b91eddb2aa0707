"""Helpers shared by the benchmark scripts: the default matrix list, short names, a median timer,
geometric means, an earlier commit's package for side-by-side runs and the command line of a job."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def job(ranks: int, *args) -> list[str]:
    """``mpiexec -n RANKS python ARGS``: the ``mpiexec`` beside this Python (the MPICH wheel's), this Python."""
    from sparsewire.testing import mpiexec_path  # here: the peers' worker processes import this module, not sparsewire

    return [mpiexec_path(), "-n", str(ranks), sys.executable, *map(str, args)]


def default_matrices(generated: list[str]) -> list[str]:
    """Every ``../shared/data/*.mtx.gz`` (when present), then the generator specs ``generated``."""
    shared = ROOT.parent / "shared" / "data"
    files = sorted(str(p) for p in shared.glob("*.mtx.gz")) if shared.is_dir() else []
    return files + generated


def short_name(spec: str) -> str:
    """A file's name without ``.mtx.gz``; a generator spec as is."""
    return Path(spec).name.removesuffix(".mtx.gz") if os.sep in spec else spec


def median_seconds(function, repeat: int) -> float:
    """Median wall seconds (perf_counter) of ``function()`` over ``repeat`` calls after one warm-up."""
    function()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def geometric_mean(values: list[float]) -> float:
    """exp(mean(log v)); NaN for no values."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def busiest_link_bytes(traffic, nodes) -> float:
    """Bytes through the busiest node's link in its busier direction (the shared link the cost model prices):
    ``traffic[sender][receiver]``, the bytes between every pair of ranks (an ``spmm --json`` report's
    ``traffic.bytes``, what MPI delivered), and ``nodes``, every rank's node."""
    import numpy as np

    traffic, nodes = np.asarray(traffic, dtype=float), np.asarray(nodes)
    crossing = np.where(nodes[:, None] != nodes[None, :], traffic, 0.0)
    out = np.bincount(nodes, weights=crossing.sum(axis=1))
    into = np.bincount(nodes, weights=crossing.sum(axis=0))
    return float(max(out.max(), into.max())) if nodes.size else 0.0


def extract_baseline(ref: str) -> str:
    """The ``src`` tree of git commit ``ref`` in a temporary directory (what PYTHONPATH gets, ahead
    of the editable install of the current code)."""
    target = Path(tempfile.mkdtemp(prefix="sparsewire-baseline-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return str(target / "src")


def run_json(command: list[str], timeout: float = 1800, cwd: Path | None = None, env: dict | None = None) -> dict:
    """Run a worker command (``env``: variables added to this process's environment); the JSON object on its last
    stdout line (exits with its stderr when it fails)."""
    environment = None if env is None else {**os.environ, **env}
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=environment)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command[-8:])} failed: {completed.stderr[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])
