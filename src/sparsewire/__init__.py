"""sparsewire: distributed sparse matrix multiplication that moves as few bytes as the sparsity allows.

Pipeline: load (:mod:`sparsewire.io.readers`, :mod:`sparsewire.io.generators`) -> partition
(:mod:`sparsewire.partition`) -> plan (:mod:`sparsewire.plan`, over a
:mod:`sparsewire.topology.model`) -> execute
(:mod:`sparsewire.exec.executor`, needs MPI) -> report (:mod:`sparsewire.plan.stats`).

The distributed API (:func:`distribute`, :class:`DistributedMatrix`, :class:`SpmmPlan`,
:func:`spmm`) is loaded on first use: importing ``sparsewire`` does not initialise MPI; only
those names, :mod:`sparsewire.comm` and :mod:`sparsewire.exec` do. See docs/api.md.
"""

import os as _os
import sys as _sys

# Numba fixes the size of its thread pool when it is first imported; let ``threads=T`` go up to
# 64 per rank (threads are started only when asked for). Once numba is imported the setting must
# not change (Numba refuses a different value later), so then its own default stays.
if "numba" not in _sys.modules:
    _os.environ.setdefault("NUMBA_NUM_THREADS", str(max(64, _os.cpu_count() or 1)))

from sparsewire._lib.aligned import empty_aligned, zeros_aligned  # noqa: E402
from sparsewire.errors import FallbackWarning, InputError, PlanMismatchError, SparsewireError, SparsewireWarning  # noqa: E402
from sparsewire.exec.options import ExecOptions
from sparsewire.io.generators import deterministic_dense
from sparsewire.io.readers import load_matrix
from sparsewire.partition import Partitioning, RowPartition, balanced_nnz, even_rows
from sparsewire.plan import (
    CommPlan,
    PlanStats,
    RankPlan,
    Strategy,
    build_plan,
    build_rank_plan_collective,
    minimum_vertex_cover,
    plan_stats,
    rowwise_stats,
)
from sparsewire.topology.model import Level, LinkClass, Topology, parse_topology

__version__ = "0.1.0"

# Names that need MPI, imported when first used (PEP 562), so `import sparsewire` stays MPI-free.
_LAZY = {
    "distribute": "sparsewire.distributed.matrix",
    "DistributedMatrix": "sparsewire.distributed.matrix",
    "SpmmPlan": "sparsewire.distributed.spmm",
    "StrategyChoice": "sparsewire.distributed.spmm",
    "spmm": "sparsewire.distributed.spmm",
    "SpgemmPlan": "sparsewire.distributed.spgemm",
    "plan_spgemm": "sparsewire.distributed.spgemm",
    "trace": "sparsewire.profile.tracing",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sparsewire' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DistributedMatrix",
    "ExecOptions",
    "SpmmPlan",
    "SpgemmPlan",
    "StrategyChoice",
    "distribute",
    "plan_spgemm",
    "spmm",
    "trace",
    "CommPlan",
    "FallbackWarning",
    "InputError",
    "Level",
    "LinkClass",
    "PlanMismatchError",
    "PlanStats",
    "RankPlan",
    "Partitioning",
    "RowPartition",
    "SparsewireError",
    "SparsewireWarning",
    "Strategy",
    "Topology",
    "balanced_nnz",
    "build_plan",
    "build_rank_plan_collective",
    "deterministic_dense",
    "empty_aligned",
    "even_rows",
    "load_matrix",
    "minimum_vertex_cover",
    "parse_topology",
    "plan_stats",
    "rowwise_stats",
    "zeros_aligned",
]
