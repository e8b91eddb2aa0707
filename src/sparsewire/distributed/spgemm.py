"""The public SpGEMM entry: :func:`plan_spgemm` -> :class:`SpgemmPlan` for two
:class:`~sparsewire.distributed.matrix.DistributedMatrix` operands, and ``DistributedMatrix.spgemm``.

The command line's ``sparsewire spgemm`` goes through here too, so the library and the command
line run one path with one set of options (:class:`~sparsewire.spgemm.options.SpgemmOptions`): the
algorithm (Azad et al. sec. 3: 2D Sparse SUMMA, or a 1D SpMM plan whose B rows carry sparse rows),
the 1D strategy, the SUMMA grid, phases, the 1D overlap and SUMMA's stages per product. ``auto``
builds every candidate the options allow and keeps the one whose predicted bytes for this B are
fewest (:func:`~sparsewire.spgemm.distributed.keep_fewest_bytes`).

Layouts: A and B arrive as 1D rows. The 1D algorithm multiplies them in place (A's row and column
partitions); SUMMA first moves A and B to 2D blocks on its grid (setup traffic, not counted in
the plan's bytes) and :meth:`SpgemmPlan.to_distributed` moves C back to A's rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, agreed, collective_errors, mpi_messages_problem
from sparsewire.errors import InputError
from sparsewire.spgemm.distributed import (
    DistributedSpgemm,
    blocks_to_rows,
    candidate_names,
    keep_fewest_bytes,
    rows_to_blocks,
)
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import to_graphblas, to_scipy
from sparsewire.spgemm.options import UNSET, SpgemmOptions, spgemm_options
from sparsewire.spgemm.semirings import Semiring, get_semiring
from sparsewire.spgemm.summa import BlockLayout, ProcessGrid, parse_grid
from sparsewire.spgemm.transfer import MessageCoding

if TYPE_CHECKING:
    from sparsewire.distributed.matrix import DistributedMatrix
    from sparsewire.topology.model import Topology

__all__ = ["SpgemmPlan", "plan_spgemm", "compress_problem"]


class SpgemmPlan:
    """Collective to build (:func:`plan_spgemm`). The chosen SpGEMM algorithm with B already in its
    layout; :meth:`multiply` runs it as often as asked.

    Attributes:
        algorithm: ``summa`` or ``1d/<strategy>``, the candidate kept.
        grid: the process grid it runs on (``P x 1`` for 1D).
        semiring: the :class:`~sparsewire.spgemm.semirings.Semiring`.
        options: the :class:`~sparsewire.spgemm.options.SpgemmOptions` it was made with.
        phases: B's columns are multiplied in this many pieces (peak memory ~1/phases).
        predicted_bytes: bytes one :meth:`multiply` puts on the wire, summed over ranks, from counts.
        predicted_bytes_by_algorithm: every candidate's predicted bytes.
        lower_bounds_only: the candidates whose figure is only a lower bound (they had already lost).
        compress: ``none``, ``index``, ``bf16`` or ``auto`` (:func:`plan_spgemm`).
        codec_passes: the most bf16-coded messages a term of C crosses (SUMMA: A's and B's blocks, 2; 1D: a
            B row or a partial C row, 1); 0 without ``bf16``.
        compress_choice: with ``auto``, what decided which links code their integers (the measured cost, the
            wire ratio and each link class's verdict, as :func:`~sparsewire.wire.codec_choice.peers_where_coding_pays`
            reports it); None otherwise.
    """

    def __init__(
        self,
        a: DistributedMatrix,
        b: DistributedMatrix,
        engine: DistributedSpgemm,
        b_block: gb.Matrix,
        options: SpgemmOptions,
        predictions: dict[str, int],
        lower_bounds_only: list[str],
        compress_choice: dict | None = None,
    ) -> None:
        """Not collective. Use :func:`plan_spgemm`."""
        self.options, phases, compress = options, options.phases, options.compress
        self.compress, self.compress_choice = compress, compress_choice
        self._closed = False
        self._a, self._b, self._engine, self._b_block = a, b, engine, b_block
        self.algorithm, self.grid, self.semiring, self.phases = engine.name, engine.grid, engine.semiring, phases
        self.predicted_bytes = int(predictions[engine.name])
        self.predicted_bytes_by_algorithm = dict(predictions)
        self.lower_bounds_only = list(lower_bounds_only)
        self.codec_passes = 0 if compress != "bf16" else 2 if engine.algorithm == "summa" else 1

    def __repr__(self) -> str:
        return (
            f"<SpgemmPlan {self.algorithm} on a {self.grid} grid, {self.semiring.name}, {self.predicted_bytes} bytes per "
            "multiply>"
        )

    def multiply(self, mask: gb.Matrix | None = None) -> gb.Matrix:
        """Collective. This rank's block of ``C = A (+.x) B`` in the algorithm's layout (a GraphBLAS
        matrix; :meth:`to_distributed` or :meth:`gather` for C in A's rows or whole). ``mask``:
        compute only the entries it holds (a block shaped like this rank's block of C).

        Raises:
            InputError (on this rank, before any message) when the plan was closed.
        """
        self._check_open()
        return self._engine.multiply(self._b_block, phases=self.phases, mask=mask)

    @property
    def executor(self) -> DistributedSpgemm:
        """Not collective. What runs the multiplies (and what :func:`sparsewire.trace` records)."""
        return self._engine

    @property
    def bytes_received(self) -> int:
        """Not collective. Bytes MPI delivered to this rank in every multiply so far (its receive
        statuses, not the plan's counts); summed over the ranks, the bytes moved."""
        return self._engine.bytes_received

    @property
    def payload_bytes_received(self) -> int:
        """Not collective. The same messages' bytes uncoded (equal to :attr:`bytes_received` without ``compress``):
        what :attr:`predicted_bytes` counts."""
        return self._engine.payload_bytes_received

    @property
    def index_bytes_received(self) -> tuple[int, int]:
        """Not collective. The messages' integer arrays alone, so far: (bytes MPI counted on the wire, bytes
        decoded); equal without ``compress``."""
        return self._engine.index_bytes_received

    @property
    def peak_held_entries(self) -> int:
        """Not collective. The most stored entries this rank held at once inside a multiply."""
        return self._engine.peak_held_entries

    def c_block(self) -> tuple[slice, slice]:
        """Not collective. The global (rows, columns) of C that :meth:`multiply` returns on this
        rank, in the partitioners' order."""
        return self._engine.c_block(self._a.comm.Get_rank())

    def to_distributed(self, c_block: gb.Matrix) -> DistributedMatrix:
        """Collective. C as a :class:`~sparsewire.distributed.matrix.DistributedMatrix` with A's row
        partition and order and B's column partition and order (float64 values)."""
        a, b = self._a, self._b
        comm = a.comm
        local = to_scipy(c_block)
        if self._engine.algorithm == "summa":
            rows, cols = self.c_block()
            local = blocks_to_rows(comm, local, rows.start, cols.start, a.row_partition, b.shape[1])
        local = sp.csr_array(local, dtype=np.float64)
        local.sort_indices()
        nnz = comm.allreduce(int(local.nnz), op=MPI.SUM)
        return type(a)(comm, local, a.row_partition, b.col_partition, nnz, a.row_order, b.col_order)

    def gather(self, c_block: gb.Matrix, root: int = 0) -> sp.csr_array | None:
        """Collective. The whole C on ``root`` in the original row and column order (values in the
        semiring's dtype), None elsewhere."""
        return self._engine.gather_c(c_block, root, self._a.row_order, self._b.col_order)

    def close(self) -> None:
        """Collective. Release the communicators the algorithm made (a second call does nothing)."""
        if not self._closed:
            self._closed = True
            self._engine.free()

    @property
    def closed(self) -> bool:
        """Not collective. Whether :meth:`close` ran (every entry point then refuses the plan)."""
        return self._closed

    def __enter__(self) -> SpgemmPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:  # closing is collective: every rank raises here, so the job goes on (collective_errors)
            raise agreed(InputError("this SpgemmPlan was closed; make a new one with sparsewire.plan_spgemm"))


def _check(a, b, algorithm: str, strategy: str, grid):
    """This rank's first problem with the operands and the options that depend on P, as text (None: none),
    and the grid."""
    size = a.comm.Get_size()
    if not (hasattr(b, "local_rows") and hasattr(b, "comm")) or b.comm.Get_size() != size:
        return "B must be a DistributedMatrix over the same communicator as A", None
    if a.shape[1] != b.shape[0]:
        return f"shapes do not match: A is {a.shape[0]} x {a.shape[1]}, B is {b.shape[0]} x {b.shape[1]}", None
    if not np.array_equal(b.row_partition.offsets, a.col_partition.offsets) or not _same_order(b.row_order, a.col_order):
        return (
            "B's rows must be distributed (and ordered) like A's columns; distribute B with "
            "partition=a.right_operand_partitioning()",
            None,
        )
    try:
        candidate_names(algorithm, strategy)
        chosen_grid = grid if isinstance(grid, ProcessGrid) else parse_grid(grid, size)
        if chosen_grid.size != size:
            raise InputError(f"grid {chosen_grid} has {chosen_grid.size} ranks, the communicator {size}")
    except InputError as error:
        return str(error), None
    return None, chosen_grid


def _same_order(first, second) -> bool:
    if first is None or second is None:
        return first is None and second is None
    return np.array_equal(first, second)


@collective_errors
def plan_spgemm(
    a: DistributedMatrix,
    b: DistributedMatrix,
    semiring: str | Semiring = "plus_times",
    options: SpgemmOptions | None = None,
    *,
    algorithm: str = UNSET,
    strategy: str = UNSET,
    grid: ProcessGrid | str | None = UNSET,
    phases: int = UNSET,
    overlap: bool = UNSET,
    stages_per_product: int = UNSET,
    compress: str = UNSET,
    topology: Topology | None = UNSET,
) -> SpgemmPlan:
    """Collective. Plan ``C = A (+.x) B`` over a semiring (Azad et al. sec. 3 and 4) and keep the
    candidate that moves the fewest bytes for this B.

    Args:
        a: A, distributed by rows (:func:`~sparsewire.distributed.matrix.distribute`).
        b: B, over the same communicator with rows distributed and ordered like A's columns:
            ``distribute(comm, B, partition=a.right_operand_partitioning())``, or A itself when
            square.
        semiring: a name of :func:`~sparsewire.spgemm.semirings.get_semiring` (plus_times,
            min_plus, max_times, lor_land, a user ``ADD.MULTIPLY``, ...) or a ``Semiring``.
        options: a :class:`~sparsewire.spgemm.options.SpgemmOptions` (None: the defaults), whose
            fields the keyword arguments given replace: ``algorithm`` (``summa``, ``1d`` or ``auto``),
            ``strategy`` (1D: ``column``, ``row``, ``joint`` or ``auto``), ``grid`` (SUMMA: ``"RxC"``
            with R * C = P), ``phases``, ``overlap``, ``stages_per_product``, ``compress`` (``none``,
            ``index``, ``bf16``, ``auto``: integers coded with :mod:`~sparsewire.spgemm.index_coding`,
            where it pays by :func:`~sparsewire.wire.codec_choice.peers_where_coding_pays`; C
            bit-identical except ``bf16``, within :func:`~sparsewire.wire.codecs.product_error_bound`
            over :attr:`SpgemmPlan.codec_passes` passes) and ``topology``; the class documents each.

    Returns:
        :class:`SpgemmPlan`; close it when done (``with plan_spgemm(...) as plan:`` or
        ``plan.close()``: it holds communicators).

    Raises:
        InputError on every rank when any rank's arguments are wrong (operands that do not fit,
        an unknown algorithm, strategy or semiring, a grid whose size is not P).
    """
    chosen = spgemm_options(
        options,
        algorithm=algorithm,
        strategy=strategy,
        grid=grid,
        phases=phases,
        overlap=overlap,
        stages_per_product=stages_per_product,
        compress=compress,
        topology=topology,
    )
    comm = a.comm
    problem, chosen_grid = (chosen if isinstance(chosen, str) else mpi_messages_problem(comm, "SpGEMM")), None
    if problem is None:
        options = chosen
        problem, chosen_grid = _check(a, b, options.algorithm, options.strategy, options.grid)
    if problem is None:
        try:
            semiring = semiring if isinstance(semiring, Semiring) else get_semiring(semiring)
        except InputError as error:
            problem = str(error)
    if problem is None:
        problem = compress_problem(options.compress, semiring)
    agree_on_error(comm, problem)
    overlap, stages_per_product, compress, phases = options.overlap, options.stages_per_product, options.compress, options.phases
    coding, choice = _coding(comm, a, semiring, compress, options.topology)

    def build(name, one_dim_strategy):
        def built():
            if name == "summa":
                layout = BlockLayout.even(chosen_grid, a.shape, b.shape)
                a_block = rows_to_blocks(comm, a.local_rows, a.row_offset, layout.a_block)
                engine = DistributedSpgemm(
                    comm,
                    None,
                    b.shape,
                    semiring,
                    "summa",
                    a_local=a_block,
                    a_shape=a.shape,
                    grid=chosen_grid,
                    stages_per_product=stages_per_product,
                    coding=coding,
                )
                return engine, to_graphblas(rows_to_blocks(comm, b.local_rows, b.row_offset, engine.b_block), semiring.dtype)
            engine = DistributedSpgemm(
                comm,
                None,
                b.shape,
                semiring,
                "1d",
                strategy=one_dim_strategy,
                a_local=a.local_rows,
                a_shape=a.shape,
                partitions=(a.row_partition, a.col_partition),
                overlap=overlap,
                coding=coding,
            )
            return engine, to_graphblas(b.local_rows, semiring.dtype)

        return built

    builders = [build(name, one_dim_strategy) for name, one_dim_strategy in candidate_names(options.algorithm, options.strategy)]
    engine, b_block, predictions, bounded = keep_fewest_bytes(builders, int(phases))
    return SpgemmPlan(a, b, engine, b_block, options, predictions, bounded, choice)


def compress_problem(compress: str, semiring: Semiring) -> str | None:
    """Not collective. What is wrong with ``compress`` for ``semiring`` (None when nothing): ``bf16`` states its
    bound for plus_times only."""
    if compress == "bf16" and semiring.name != "plus_times":
        return (
            f"compress bf16 rounds values, which the bound it states covers for plus_times only (not {semiring.name}: "
            "min, max and logical semirings select values exactly); use compress index, lossless for every semiring"
        )
    return None


def _coding(comm, a, semiring: Semiring, compress: str, topology: Topology | None) -> tuple[MessageCoding, dict | None]:
    """Collective. What the messages code: integers on every link (``index``; and values rounded to bf16: ``bf16``),
    nothing, or (``auto``) integers on the links where coding pays, by the cost measured on each rank's block of
    A (the largest over the ranks)."""
    if compress != "auto":
        return MessageCoding(links=compress in ("index", "bf16"), values="bf16" if compress == "bf16" else "none"), None
    from sparsewire.spgemm.index_coding import coding_cost
    from sparsewire.spgemm.local import index_dtype
    from sparsewire.wire.codec_choice import peers_where_coding_pays

    seconds, ratio = coding_cost(a.local_rows, index_dtype(*a.shape), np.dtype(semiring.dtype).itemsize)
    seconds, ratio = comm.allreduce(seconds, op=MPI.MAX), comm.allreduce(ratio, op=MPI.MAX)
    links, choice = peers_where_coding_pays(comm, "index", seconds, ratio, topology)
    return MessageCoding(links=links), choice
