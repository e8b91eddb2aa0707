"""Numba, as every module of the package imports it: with a thread pool large enough for the
executor's ``threads=T``.

Numba sizes its thread pool from ``NUMBA_NUM_THREADS`` when it is first imported, and refuses
another size afterwards; its default is the core count, but a rank may ask for more threads than
cores (up to 64, to measure oversubscription). So the first import of Numba through this module
sets the variable when the user has not (the threads themselves start only when asked for). Where
Numba was imported before, its pool stays as it is and :func:`~sparsewire.kernels.compiled.check_threads`
names the limit. Importing ``sparsewire`` alone does not import this module.
"""

import os
import sys

if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(64, os.cpu_count() or 1)))

import numba  # noqa: E402
from numba import literally, njit, prange  # noqa: E402
from numba.core import cgutils, types  # noqa: E402
from numba.extending import intrinsic, models, register_model  # noqa: E402

__all__ = ["numba", "njit", "prange", "literally", "cgutils", "types", "intrinsic", "models", "register_model"]
