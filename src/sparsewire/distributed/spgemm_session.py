"""SpGEMM from global operands: distribute them by a partition and plan (:func:`distribute_and_plan_spgemm`), where the
partition ``auto`` depends on the plan it leads to; what ``sparsewire spgemm`` runs."""

from __future__ import annotations

import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.distributed.matrix import DistributedMatrix, distribute
from sparsewire.distributed.spgemm import SpgemmPlan, plan_spgemm
from sparsewire.spgemm.options import SpgemmOptions
from sparsewire.spgemm.semirings import Semiring

__all__ = ["distribute_and_plan_spgemm"]


def distribute_and_plan_spgemm(
    comm: MPI.Comm,
    a_global: sp.sparray | None,
    b_global: sp.sparray | None,
    b_is_a: bool,
    semiring: str | Semiring,
    options: SpgemmOptions,
    partition: str = "auto",
    imbalance: float = 0.03,
) -> tuple[DistributedMatrix, DistributedMatrix, SpgemmPlan, str]:
    """Collective. Distribute A (global on rank 0) by ``partition`` and B (global on rank 0; ``b_is_a``, the same on
    every rank: B = A, ``b_global`` unused) like A's columns, and :func:`plan_spgemm`; ``(A, B, plan, why the
    partition)``.

    ``auto`` (:func:`~sparsewire.partition.choose_partitioning`) plans on even rows first; where that plan is 1D,
    whose fetched B rows are what auto counts, A and B are distributed again on auto's partition and planned again,
    and that plan is kept where it is still 1D. SUMMA keeps even rows: the grid blocks of a METIS order are
    unbalanced (rmat:16:8 at P = 4: 1.0-1.05 s on even rows, 1.79 s on METIS's; docs/design-decisions.md). The
    candidate not kept is closed."""

    def distributed(method: str):
        first = distribute(comm, a_global, method, imbalance=imbalance)
        return first, first if b_is_a else distribute(comm, b_global, first.right_operand_partitioning())

    a, b = distributed("even" if partition == "auto" else partition)
    plan = plan_spgemm(a, b, semiring, options)
    if partition != "auto":
        return a, b, plan, a.partition_reason
    reason = f"auto kept the original order (even): {plan.algorithm} runs on it"
    if plan.algorithm.startswith("1d") and comm.Get_size() > 1:
        reordered, reordered_b = distributed("auto")
        reason = reordered.partition_reason
        if reordered.row_order is not None:
            replanned = plan_spgemm(reordered, reordered_b, semiring, options)
            if replanned.algorithm.startswith("1d"):
                plan.close()
                return reordered, reordered_b, replanned, reason
            replanned.close()
            reason = f"auto kept the original order (even): {replanned.algorithm} runs on METIS's"
    return a, b, plan, reason
