"""The MPI API: a matrix distributed by rows (:class:`DistributedMatrix`, :func:`distribute`), the
SpMM plan (:func:`plan_spmm`, :class:`SpmmPlan`, :func:`spmm`) with its ``auto`` strategy
(:mod:`~sparsewire.distributed.auto`) and plan files (:mod:`~sparsewire.distributed.plan_file`),
the SpGEMM plan (:func:`plan_spgemm`, :class:`SpgemmPlan`, from global operands
:func:`distribute_and_plan_spgemm`) and the SDDMM plan (:func:`plan_sddmm`,
:class:`SddmmPlan`). Importing it initialises MPI; the SpGEMM names load python-graphblas on first use.
"""

from sparsewire._lib.lazy import lazy_exports
from sparsewire.distributed.matrix import DistributedMatrix, distribute
from sparsewire.distributed.one_line import spmm
from sparsewire.distributed.sddmm import SddmmPlan, plan_sddmm
from sparsewire.distributed.spmm import SpmmPlan, StrategyChoice, plan_spmm

# (SpMM, SDDMM and training never use python-graphblas: 0.1 s and 15 MiB of every rank's start)
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        **{name: "sparsewire.distributed.spgemm" for name in ("SpgemmPlan", "plan_spgemm")},
        "distribute_and_plan_spgemm": "sparsewire.distributed.spgemm_session",
    },
)

__all__ = [
    "DistributedMatrix",
    "distribute",
    "SpmmPlan",
    "StrategyChoice",
    "plan_spmm",
    "spmm",
    "SpgemmPlan",
    "plan_spgemm",
    "distribute_and_plan_spgemm",
    "SddmmPlan",
    "plan_sddmm",
]
