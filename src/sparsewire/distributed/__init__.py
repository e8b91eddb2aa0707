"""The MPI API: a matrix distributed by rows (:class:`DistributedMatrix`, :func:`distribute`), the
SpMM plan (:func:`plan_spmm`, :class:`SpmmPlan`, :func:`spmm`) with its ``auto`` strategy
(:mod:`~sparsewire.distributed.auto`) and plan files (:mod:`~sparsewire.distributed.plan_file`),
the SpGEMM plan (:func:`plan_spgemm`, :class:`SpgemmPlan`) and the SDDMM plan (:func:`plan_sddmm`,
:class:`SddmmPlan`). Importing it initialises MPI.
"""

from sparsewire.distributed.matrix import DistributedMatrix, distribute
from sparsewire.distributed.one_line import spmm
from sparsewire.distributed.sddmm import SddmmPlan, plan_sddmm
from sparsewire.distributed.spgemm import SpgemmPlan, plan_spgemm
from sparsewire.distributed.spmm import SpmmPlan, StrategyChoice, plan_spmm

__all__ = [
    "DistributedMatrix",
    "distribute",
    "SpmmPlan",
    "StrategyChoice",
    "plan_spmm",
    "spmm",
    "SpgemmPlan",
    "plan_spgemm",
    "SddmmPlan",
    "plan_sddmm",
]
