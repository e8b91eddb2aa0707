"""python-graphblas, as every module of the package imports it: after Numba's thread pool is sized
(:mod:`sparsewire._lib.jit`), with the thread count the rank chose (:func:`sparsewire.comm.runtime.limit_threads_per_rank`)
where it chose one before. python-graphblas imports Numba itself, which would fix the pool at the core count,
so a program that multiplied over a semiring first could not then run an SpMM plan with more threads than cores."""

from sparsewire._lib import jit as _jit  # noqa: F401 - sizes Numba's pool before python-graphblas imports Numba
from sparsewire._lib.cores import GRAPHBLAS_THREADS

# isort: split
import graphblas  # noqa: E402 (after the pool is sized: the order is the point of this module)

if GRAPHBLAS_THREADS:
    graphblas.ss.config["nthreads"] = GRAPHBLAS_THREADS[-1]

__all__ = ["graphblas"]
