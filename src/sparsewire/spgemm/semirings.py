"""Semirings for SpGEMM ``C = A (+.x) B``: ``C(i, j) = (+)_k A(i, k) (x) B(k, j)`` over the stored
entries only (an entry of C exists where some k has both A(i, k) and B(k, j) stored).

A semiring is an additive monoid (associative and commutative, with an identity) and a
multiplication (semiring SpGEMM paper sec. 2.2). The local multiply is SuiteSparse:GraphBLAS through
python-graphblas, which has every named semiring built in.

What the distributed algorithms rely on, and so what each :class:`Semiring` states:

* the additive monoid and its identity (+inf for min, -inf for max, 0 for plus, False for lor):
  partial results from several ranks or stages are merged with the monoid, never with a hard-coded
  0 (CombBLAS's GPU path assumes 0, which is wrong for min_plus and max_times);
* whether multiplication commutes: our algorithms never swap the operands (A is always on the left),
  so non-commutative semirings are exact; the flag is reported, not used to take a shortcut (the
  transpose trick ``AB = (B^T A^T)^T`` of paper sec. 4.1 is valid only when it commutes);
* whether addition is idempotent (min, max, lor, any): then a value merged twice is unchanged.

User semirings: ``MONOID.BINARY`` names (``plus.minus``, ``min.first``) or
:func:`user_semiring` with a Python function for the multiplication (compiled by Numba through
python-graphblas).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sparsewire.errors import InputError
from sparsewire.spgemm.graphblas_loader import graphblas as gb

binary, monoid, semiring = gb.binary, gb.monoid, gb.semiring
GraphblasSemiring = gb.core.operator.Semiring

__all__ = ["Semiring", "SEMIRINGS", "get_semiring", "user_semiring", "MONOIDS"]

#: additive monoids a semiring may use, with the identity of each (for float64 values; lor: False).
MONOIDS = {"plus": 0.0, "min": np.inf, "max": -np.inf, "times": 1.0, "lor": False, "any": None}


@dataclass(frozen=True)
class Semiring:
    """A semiring and the facts the distributed algorithms need about it.

    Attributes:
        name: ``ADD_MULTIPLY`` for named semirings (``min_plus``), ``ADD.MULTIPLY`` for user ones.
        add: name of the additive monoid (a key of :data:`MONOIDS`).
        identity: the additive identity (the value of an "empty" sum); None for ``any``.
        multiplication_commutes: whether ``a (x) b == b (x) a`` for all a, b.
        addition_idempotent: whether ``a (+) a == a``.
        dtype: the value type the multiply runs in (float64 numbers, bool for lor_land and
            any_pair, int64 path counts for plus_pair).
        operator: the python-graphblas semiring, typed for ``dtype``.
        merge: the semiring (ADD, second) that merges partial rows: ``Place (+.second) R`` adds
            row r of R into row i of C for every 1 at Place(i, r).
        copy: the semiring (any, second) that copies rows: ``Select (any.second) B`` with one 1 per
            row of Select is a row gather of B, exact for every value type.
    """

    name: str
    add: str
    identity: float | bool | None
    multiplication_commutes: bool
    addition_idempotent: bool
    dtype: np.dtype
    operator: object
    merge: object
    copy: object

    @property
    def accumulate(self):
        """The monoid's binary operator, typed (for ``C(accum=...) << product``)."""
        return getattr(monoid, self.add)[self.graphblas_type].binaryop

    @property
    def graphblas_type(self):
        """The python-graphblas type of ``dtype``."""
        return gb.dtypes.lookup_dtype(self.dtype)

    def describe(self) -> dict:
        """Not collective. The facts as a JSON-ready dict."""
        identity = self.identity
        if isinstance(identity, float) and not np.isfinite(identity):
            identity = "inf" if identity > 0 else "-inf"
        return {
            "name": self.name,
            "add": self.add,
            "identity": identity,
            "multiplication_commutes": self.multiplication_commutes,
            "addition_idempotent": self.addition_idempotent,
            "dtype": str(np.dtype(self.dtype)),
        }


def _build(name: str, add: str, multiply, dtype) -> Semiring:
    dtype = np.dtype(dtype)
    gb_type = gb.dtypes.lookup_dtype(dtype)
    add_monoid = getattr(monoid, add)
    if isinstance(multiply, str):
        operator = getattr(semiring, f"{add}_{multiply}", None)
        if operator is None:
            operator = GraphblasSemiring.register_anonymous(add_monoid, getattr(binary, multiply), name=name)
        multiply_op = getattr(binary, multiply)
    else:
        operator = GraphblasSemiring.register_anonymous(add_monoid, multiply, name=name)
        multiply_op = multiply
    try:
        typed = operator[gb_type]
    except KeyError:  # python-graphblas: the operator's result on these values is not what the monoid adds
        raise InputError(
            f"semiring {name!r}: {multiply if isinstance(multiply, str) else 'the multiplication'} on {dtype} values gives "
            f"a result the {add} monoid cannot add; use an operator that returns numbers (plus, minus, times, first, "
            "min, max, truediv) or, for a comparison, the lor monoid (lor.lt)"
        ) from None
    commutes = multiply_op[gb_type].commutes_to is multiply_op[gb_type] if isinstance(multiply, str) else False
    identity = MONOIDS[add]
    if dtype == np.bool_ and identity is not None:
        identity = bool(identity)
    return Semiring(
        name=name,
        add=add,
        identity=identity,
        multiplication_commutes=bool(commutes),
        addition_idempotent=bool(add_monoid[gb_type].is_idempotent),
        dtype=dtype,
        operator=typed,
        merge=getattr(semiring, f"{add}_second")[gb_type],
        copy=semiring.any_second[gb_type],
    )


_NAMED = {
    "plus_times": ("plus", "times", np.float64),
    "min_plus": ("min", "plus", np.float64),
    "max_plus": ("max", "plus", np.float64),
    "max_times": ("max", "times", np.float64),
    "min_times": ("min", "times", np.float64),
    "plus_min": ("plus", "min", np.float64),
    "lor_land": ("lor", "land", np.bool_),
    "plus_pair": ("plus", "pair", np.int64),
    "any_pair": ("any", "pair", np.bool_),
}

#: the named semirings, in the order the CLI lists them.
SEMIRINGS: tuple[str, ...] = tuple(_NAMED)


def get_semiring(name: str) -> Semiring:
    """Not collective. A named semiring (``min_plus``) or a user one written ``ADD.MULTIPLY`` (``plus.minus``),
    where ADD is a monoid of :data:`MONOIDS` and MULTIPLY any python-graphblas binary operator
    name (user semirings run in float64, or bool for lor)."""
    text = name.strip().lower()
    if text in _NAMED:
        add, multiply, dtype = _NAMED[text]
        return _build(text, add, multiply, dtype)
    if "." in text:
        add, multiply = text.split(".", 1)
        if add not in MONOIDS:
            raise InputError(f"semiring {name!r}: unknown monoid {add!r}; choose from {', '.join(MONOIDS)}")
        if not isinstance(getattr(binary, multiply, None), gb.core.operator.BinaryOp):
            raise InputError(
                f"semiring {name!r}: python-graphblas has no binary operator {multiply!r} (try minus, first, truediv, pow)"
            )
        return _build(text, add, multiply, np.bool_ if add == "lor" else np.float64)
    raise InputError(f"unknown semiring {name!r}; choose from {', '.join(SEMIRINGS)}, or write ADD.MULTIPLY (e.g. plus.minus)")


def user_semiring(name: str, add: str, multiply: Callable[[float, float], float], dtype=np.float64) -> Semiring:
    """Not collective. A semiring from a monoid name and a Python function ``multiply(a, b)``, compiled by Numba
    through python-graphblas, here, for ``dtype`` only (``is_udt``: compiling it for every built-in type of GraphBLAS
    took 2-2.5 s). Its multiplication is assumed not to commute (never exploited)."""
    if add not in MONOIDS:
        raise InputError(f"unknown monoid {add!r}; choose from {', '.join(MONOIDS)}")
    operator = binary.register_anonymous(multiply, name=f"{name}_multiply", is_udt=True)
    try:
        return _build(name, add, operator, dtype)
    except InputError:
        raise
    except Exception as error:  # Numba's typing and lowering errors, or a result type GraphBLAS has not
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = next((line for line in lines if not line.startswith("Failed in")), type(error).__name__)
        raise InputError(
            f"semiring {name!r}: the multiplication does not compile for {np.dtype(dtype)} values ({reason}); write it "
            "with arithmetic and comparisons Numba's nopython mode supports, returning a number"
        ) from error
