"""Local kernels. CPU: SciPy's CSR x dense product (sparsetools ``csr_matvecs``), single-threaded.

Every product in the executor goes through :func:`csr_times_dense`, the one place another backend
(PyTorch, CuPy) would plug in.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["csr_times_dense", "as_compute_matrix"]


def as_compute_matrix(matrix: sp.sparray, dtype: np.dtype) -> sp.csr_array:
    """A copy of ``matrix`` in CSR with values of ``dtype`` (done once per plan, not per multiply)."""
    return sp.csr_array(matrix, dtype=dtype, copy=True)


def csr_times_dense(matrix: sp.csr_array, dense: np.ndarray) -> np.ndarray:
    """``matrix @ dense`` as a C-contiguous array of the dense operand's dtype.

    SciPy allocates the result; a preallocated output would need a compiled kernel of our own.
    """
    return np.ascontiguousarray(matrix @ dense)
