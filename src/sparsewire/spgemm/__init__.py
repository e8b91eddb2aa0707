"""SpGEMM over semirings: the local product (:mod:`~sparsewire.spgemm.product`), the conversions and wire format
(:mod:`~sparsewire.spgemm.local`), 2D Sparse SUMMA
(:mod:`~sparsewire.spgemm.summa`) and 1D sparsity-aware SpGEMM on the SpMM plans
(:mod:`~sparsewire.spgemm.onedim`), chosen by predicted bytes (:mod:`~sparsewire.spgemm.distributed`),
the sparse wire format and its coded indices, and the options of an SpGEMM plan
(:class:`~sparsewire.spgemm.options.SpgemmOptions`). The plan object users hold is
:class:`sparsewire.SpgemmPlan` (:mod:`sparsewire.distributed.spgemm`). The names below that need
python-graphblas or MPI are loaded on first use."""

from sparsewire._lib.lazy import lazy_exports
from sparsewire.spgemm.options import SpgemmOptions

__all__ = ["SpgemmOptions", "Semiring", "SEMIRINGS", "get_semiring", "reference_product", "load_operand", "local_multiply"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Semiring": "sparsewire.spgemm.semirings",
        "SEMIRINGS": "sparsewire.spgemm.semirings",
        "get_semiring": "sparsewire.spgemm.semirings",
        "reference_product": "sparsewire.spgemm.compare",
        "load_operand": "sparsewire.spgemm.values",
        "local_multiply": "sparsewire.spgemm.product",
    },
)
