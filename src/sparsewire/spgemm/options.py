"""How an SpGEMM plan is chosen and run, as one object: :class:`SpgemmOptions`.

The SpGEMM counterpart of :class:`~sparsewire.exec.options.ExecOptions`: one frozen dataclass with
every choice of :func:`~sparsewire.distributed.spgemm.plan_spgemm` but the semiring (what is
computed, not how), validated once when it is made (every problem in one
:class:`~sparsewire.errors.InputError`, one line each), passed whole from the public API and the
command line to the planner, and reported in the JSON (:meth:`SpgemmOptions.as_dict`). What needs
the communicator (a grid whose size is not P) and the semiring (``bf16`` outside ``plus_times``)
is checked when the plan is made. No MPI is imported here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sparsewire._lib.given import UNSET, with_given
from sparsewire.errors import InputError
from sparsewire.topology.model import Topology

__all__ = ["SpgemmOptions", "spgemm_options", "ALGORITHMS", "ONE_DIM_STRATEGIES", "COMPRESS", "UNSET"]

#: SpGEMM's algorithms: 2D Sparse SUMMA, 1D (B rows fetched or partial C rows pushed), or both.
ALGORITHMS = ("auto", "summa", "1d")
#: The 1D strategies SpGEMM runs (``auto``: all three).
ONE_DIM_STRATEGIES = ("column", "row", "joint")
#: SpGEMM's ``compress`` choices.
COMPRESS = ("none", "index", "bf16", "auto")


@dataclass(frozen=True)
class SpgemmOptions:
    """Not collective. Every choice of an SpGEMM plan but the semiring, validated when made.

    Attributes:
        algorithm: ``summa`` (2D Sparse SUMMA), ``1d`` (each rank fetches the B rows its nonzero
            columns need, or pushes partial C rows), or ``auto`` (both; fewest predicted bytes).
        strategy: 1D only: ``column`` (fetch B rows), ``row`` (push partial C rows), ``joint``
            (a vertex cover of both) or ``auto`` (all three).
        grid: SUMMA only: a ``ProcessGrid`` or ``"RxC"`` with R * C = P (None: the most nearly
            square, rows >= columns).
        phases: multiply B's columns in this many pieces (peak memory ~1/phases).
        overlap: 1D only: multiply the diagonal block while B's rows travel, merge after.
        stages_per_product: SUMMA only: stages multiplied as one product over their joined blocks.
        compress: ``none`` (every message as it is), ``index`` (every message's integers coded,
            delta plus bit-packing: C bit-identical, fewer bytes), ``auto`` (integers coded only on the
            links where the wire time saved exceeds the coding time) or ``bf16`` (plus_times only:
            integers coded and values rounded to bf16, within the bound
            :func:`~sparsewire.wire.codecs.product_error_bound` states).
        topology: the links ``auto`` compression weighs (None: MPI's shared-memory nodes with the
            assumed link constants).
    """

    algorithm: str = "auto"
    strategy: str = "auto"
    grid: object = None  # a sparsewire.spgemm.summa.ProcessGrid, 'RxC' or None
    phases: int = 1
    overlap: bool = False
    stages_per_product: int = 2
    compress: str = "none"
    topology: Topology | None = None

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise InputError("; ".join(problems) if len(problems) == 1 else "invalid options:\n  " + "\n  ".join(problems))
        object.__setattr__(self, "phases", int(self.phases))
        object.__setattr__(self, "stages_per_product", int(self.stages_per_product))

    def problems(self) -> list[str]:
        """Not collective. Every problem with these options, one line each (empty: none)."""
        problems = []
        if self.algorithm not in ALGORITHMS:
            problems.append(f"unknown algorithm {self.algorithm!r}; choose {', '.join(ALGORITHMS)}")
        if self.strategy not in ("auto", *ONE_DIM_STRATEGIES):
            problems.append(f"unknown SpGEMM strategy {self.strategy!r}: 1D SpGEMM runs {', '.join(ONE_DIM_STRATEGIES)} or auto")
        if self.grid is not None and not isinstance(self.grid, str) and not hasattr(self.grid, "size"):
            problems.append(f"grid must be a ProcessGrid, 'RxC' or None (got {type(self.grid).__name__})")
        for name in ("phases", "stages_per_product"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                problems.append(f"{name} must be a positive integer (got {value!r})")
        if not isinstance(self.overlap, (bool, np.bool_)):
            problems.append(f"overlap must be True or False (got {self.overlap!r})")
        if self.compress not in COMPRESS:
            problems.append(
                f"unknown compress {self.compress!r} for spgemm; choose none, index (integers coded, lossless), bf16 (and "
                "the values rounded to bf16; plus_times only) or auto (integers coded where it pays)"
            )
        if self.topology is not None and not isinstance(self.topology, Topology):
            problems.append(
                f"topology must be a sparsewire.Topology or None (got {type(self.topology).__name__}); see "
                "sparsewire.parse_topology"
            )
        return problems

    def replace(self, **changes) -> SpgemmOptions:
        """Not collective. A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        """Not collective. The options as JSON values (the topology by name, the grid as ``RxC``)."""
        return {
            "algorithm": self.algorithm,
            "strategy": self.strategy,
            "grid": None if self.grid is None else str(self.grid),
            "phases": self.phases,
            "overlap": bool(self.overlap),
            "stages_per_product": self.stages_per_product,
            "compress": self.compress,
            "topology": None if self.topology is None else self.topology.name,
        }


def spgemm_options(options: SpgemmOptions | None = None, **keywords) -> SpgemmOptions | str:
    """Not collective. ``options`` (None: the defaults) with the keyword arguments that were given
    (not :data:`UNSET`) replacing their fields, or the text of what is wrong with them (so that a
    collective caller can agree on the error before raising it everywhere)."""
    return with_given(options, SpgemmOptions, keywords, "an SpGEMM plan")
