"""sparsewire: distributed sparse matrix multiplication that moves as few bytes as the sparsity allows.

The data flow, one folder each: load (:mod:`sparsewire.io`) -> partition
(:mod:`sparsewire.partition`) -> plan (:mod:`sparsewire.plan`, over a :mod:`sparsewire.topology`)
-> execute (:mod:`sparsewire.exec`, over :mod:`sparsewire.comm`) -> report
(:mod:`sparsewire.profile`). The user API is re-exported here; docs/api.md describes it and
docs/architecture.md the layers.

The names that need MPI (:func:`distribute`, :func:`plan_spmm`, :func:`plan_spgemm`, ...) are
loaded on first use: importing ``sparsewire`` initialises no MPI, imports neither Numba nor PyTorch,
and changes no process-wide setting (environment, warning display).
"""

from sparsewire._lib.aligned import empty_aligned
from sparsewire._lib.lazy import lazy_exports
from sparsewire.errors import InputError, PlanMismatchError, SparsewireError, SparsewireWarning
from sparsewire.exec.options import ExecOptions
from sparsewire.io.readers import load_matrix
from sparsewire.partition import Partitioning, RowPartition, balanced_nnz, even_rows
from sparsewire.plan.strategies import Strategy
from sparsewire.spgemm.options import SpgemmOptions
from sparsewire.topology.model import Topology
from sparsewire.topology.presets import parse_topology

__version__ = "0.1.0"

# Names that need MPI, imported when first used (PEP 562), so `import sparsewire` stays MPI-free.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "distribute": "sparsewire.distributed.matrix",
        "DistributedMatrix": "sparsewire.distributed.matrix",
        "plan_spmm": "sparsewire.distributed.spmm",
        "SpmmPlan": "sparsewire.distributed.spmm",
        "StrategyChoice": "sparsewire.distributed.auto",
        "spmm": "sparsewire.distributed.one_line",
        "plan_spgemm": "sparsewire.distributed.spgemm",
        "SpgemmPlan": "sparsewire.distributed.spgemm",
        "plan_sddmm": "sparsewire.distributed.sddmm",
        "trace": "sparsewire.profile.tracing",
    },
)

__all__ = [
    # load, partition, distribute
    "load_matrix",
    "Partitioning",
    "RowPartition",
    "even_rows",
    "balanced_nnz",
    "distribute",
    "DistributedMatrix",
    # SpMM: C = A @ B with a dense B
    "plan_spmm",
    "SpmmPlan",
    "spmm",
    "ExecOptions",
    "Strategy",
    "StrategyChoice",
    "empty_aligned",
    # SpGEMM: C = A (+.x) B over a semiring
    "plan_spgemm",
    "SpgemmPlan",
    "SpgemmOptions",
    # SDDMM: A ∘ (X Yᵀ) at A's entries
    "plan_sddmm",
    # the machine, and what a run did
    "Topology",
    "parse_topology",
    "trace",
    # errors and warnings
    "SparsewireError",
    "InputError",
    "PlanMismatchError",
    "SparsewireWarning",
]
