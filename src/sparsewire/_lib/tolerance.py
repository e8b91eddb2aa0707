"""The one tolerance rule of ``--check`` (``spmm``, ``spgemm`` and its graph commands, ``eigs``).

A sum of m terms computed in floating point differs from the exact sum by at most
``gamma_m * sum_k |term_k|`` with ``gamma_m = m u / (1 - m u)`` and u the unit roundoff of the
type it is computed in (Higham, *Accuracy and Stability of Numerical Algorithms*, eq. 3.5); the
order of the additions does not matter to the bound, which is why a result summed in another order
than the reference's is still checked tightly. Ours is computed in ``dtype``, the reference in
float64 by another library, so an entry passes when

    |ours - reference| <= (gamma_{m+2}(u_dtype) + gamma_m(u_float64)) * scale

where ``scale = sum_k |term_k|`` (for SpMM, ``(|A| |B|)_ij``) and the two extra terms cover the
rounding of A's and B's values to ``dtype``. Below the normal range the relative model does not hold:
with gradual underflow every rounding may also lose an absolute ``eta`` (half the smallest
subnormal; Higham eq. 2.8), once per operand value and once per product, so
``eta_dtype * (m + operands)`` is added, ``operands`` being the sum of the magnitudes of the values
that enter the entry (for SpMM, ``sum_k |a_ik| + sum_k |b_kj|``); it is 1e-45 in float32 and so
changes nothing for data in the normal range. Values that compare equal (infinities) pass. An
absolute 1e-9 would fail values near 1e12 that are right to the last bit, and a relative 1e-12
fails a sum of N(0, 1) terms that cancels to 1e-16; this rule does neither.

Eigenvalues: ``eigs`` stops when every residual ``||A x - theta x|| <= max(tol |theta|, n u ||A||)``
(the second term is the roundoff of one multiply, which a zero eigenvalue's residual cannot go
below), and a symmetric matrix's eigenvalue is within the residual of a Ritz value, so
:func:`eigenvalues_allowed` allows ``rtol |lambda_i| + max(gamma_n(u_float64), eps^(2/3)) ||A||``
with ``||A|| = max |lambda|``: ``eps^(2/3) ||A||`` is the floor of ARPACK's own convergence test
(dsaupd), which the reference from ``eigsh`` obeys.
"""

from __future__ import annotations

import numpy as np

__all__ = ["unit_roundoff", "underflow_unit", "gamma", "allowed_error", "within", "eigenvalues_allowed"]


def unit_roundoff(dtype) -> float:
    """Not collective. Half the distance from 1 to the next number of ``dtype`` (2^-53 for float64)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def underflow_unit(dtype) -> float:
    """Not collective. ``eta``: half the smallest subnormal of ``dtype``, the absolute error a rounding may add
    under gradual underflow (7.0e-46 for float32)."""
    return float(np.finfo(np.dtype(dtype)).smallest_subnormal) / 2


def gamma(terms, dtype) -> np.ndarray:
    """Not collective. ``m u / (1 - m u)`` for ``m = terms`` (an array or a number) in ``dtype``."""
    mu = np.asarray(terms, np.float64) * unit_roundoff(dtype)
    return np.where(mu < 1, mu / np.maximum(1 - mu, 1e-300), np.inf)


def allowed_error(scale, terms, dtype, operands=0.0) -> np.ndarray:
    """Not collective. The largest |ours - reference| the rule accepts (module docstring): ``scale`` is the sum
    of the magnitudes of the terms of each entry, ``terms`` their number, ``operands`` the sum of the magnitudes
    of the operand values entering it (the underflow term; broadcast with scale)."""
    terms = np.asarray(terms, np.float64)
    relative = (gamma(terms + 2, dtype) + gamma(terms, np.float64)) * np.asarray(scale, np.float64)
    eta = underflow_unit(dtype) + underflow_unit(np.float64)
    return relative + eta * (terms + np.asarray(operands, np.float64))


def within(result, reference, allowed) -> np.ndarray:
    """Not collective. Elementwise: ``result`` equals ``reference`` or is within ``allowed`` of it (NaN never is)."""
    result, reference = np.asarray(result, np.float64), np.asarray(reference, np.float64)
    with np.errstate(invalid="ignore"):
        return (result == reference) | (np.abs(result - reference) <= allowed)


def eigenvalues_allowed(reference, n: int, rtol: float = 1e-6) -> np.ndarray:
    """Not collective. The largest |ours - reference| accepted for each eigenvalue of ``reference`` (of a
    symmetric matrix of order ``n``): ``rtol |lambda_i| + max(gamma_n, eps^(2/3)) max |lambda|``."""
    reference = np.abs(np.asarray(reference, np.float64))
    floor = max(float(gamma(n, np.float64)), float(np.finfo(np.float64).eps) ** (2 / 3))
    return rtol * reference + floor * reference.max(initial=0.0)
