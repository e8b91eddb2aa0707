"""Stored values of SpGEMM operands: keep the file's, set ones, or deterministic random integers
(so integer semirings give exact results)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.io.readers import load_matrix, nonfinite_entries

__all__ = ["check_values_spec", "apply_values", "load_operand"]


def check_values_spec(values: str) -> None:
    """Not collective. Reject a malformed ``--values`` (before any matrix is loaded)."""
    if values in ("file", "ones"):
        return
    if values.startswith("random:"):
        try:
            seed = int(values.split(":", 1)[1])
        except ValueError:
            raise InputError(f"--values {values!r}: the seed must be an integer, e.g. random:1") from None
        if not 0 <= seed < 2**63:
            raise InputError(f"--values {values!r}: the seed must be from 0 to 2**63 - 1, e.g. random:1")
        return
    raise InputError(f"--values {values!r}: choose file, ones or random:SEED")


def apply_values(matrix: sp.csr_array, values: str) -> sp.csr_array:
    """Not collective. Set the stored values: ``file`` keeps them (pattern files read as 1), ``ones`` sets 1,
    ``random:SEED`` sets deterministic integers in 1..9 (entry e of the canonical CSR order gets
    the e-th draw of NumPy's default generator seeded with SEED), so integer semirings are exact."""
    check_values_spec(values)
    result = sp.csr_array(matrix, copy=True)
    result.sum_duplicates()
    if values == "ones":
        result.data = np.ones(result.nnz)
    elif values.startswith("random:"):
        seed = int(values.split(":", 1)[1])
        result.data = np.random.default_rng(seed).integers(1, 10, result.nnz).astype(np.float64)
    return result


def load_operand(spec: str, values: str) -> sp.csr_array:
    """Not collective. Load a matrix and set its values (:func:`apply_values`); NaN or infinite values are an error."""
    matrix = apply_values(load_matrix(spec), values)
    bad = nonfinite_entries(matrix)
    if bad:
        raise InputError(f"{spec}: {bad} stored values are NaN or infinite; clean the matrix or use --values ones|random:SEED")
    return matrix
