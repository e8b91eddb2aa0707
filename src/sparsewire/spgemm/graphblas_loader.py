"""python-graphblas, as every module of the package imports it: after Numba's thread pool is sized
(:mod:`sparsewire._lib.jit`). python-graphblas imports Numba itself, which would fix the pool at the core count,
so a program that multiplied over a semiring first could not then run an SpMM plan with more threads than cores."""

import graphblas  # noqa: E402

from sparsewire._lib import jit as _jit  # noqa: F401 - sizes Numba's pool before python-graphblas imports Numba

__all__ = ["graphblas"]
