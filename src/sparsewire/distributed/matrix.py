"""The distributed matrix users program against: :func:`distribute` and :class:`DistributedMatrix`.

A :class:`DistributedMatrix` is a sparse A split by a 1D row partition over the ranks of a
communicator: rank p holds rows ``row_partition.range(p)`` of A with global column indices. Its
``col_partition`` says which rank owns which rows of a dense B in ``C = A @ B`` (equal to the
row partition when A is square, so C can be fed back as B). Plans (:meth:`DistributedMatrix.spmm_plan`)
and products (:meth:`DistributedMatrix.spgemm`) are built from it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire._lib.distinct import csr_index_type
from sparsewire.comm.runtime import agree_on_error, collective_errors, is_communicator
from sparsewire.errors import InputError
from sparsewire.exec.options import UNSET
from sparsewire.io.readers import load_matrix
from sparsewire.partition import PARTITION_CHOICES, Partitioning, RowPartition, even_rows
from sparsewire.partition import partition as choose_partitioning

__all__ = ["DistributedMatrix", "distribute"]


class DistributedMatrix:
    """This rank's rows of a sparse matrix and the partitions of the whole (see the module docstring).

    Attributes:
        comm: the communicator the matrix is distributed over.
        shape: (rows, columns) of the global matrix.
        nnz: stored entries of the global matrix.
        row_partition: which rank holds which rows of A (and of C = A @ B).
        col_partition: which rank holds which rows of B in C = A @ B.
        local_rows: this rank's rows as a SciPy CSR array with global column indices (in the
            partitioner's order when it reordered: see ``row_order``).
        row_order, col_order: position -> original index of the rows and columns when the
            partitioner reordered (:mod:`sparsewire.partition`), else None. :meth:`row_ids`
            and :meth:`input_ids` give this rank's original indices; :meth:`gather` and
            :meth:`gather_dense` return original order.
        partitioned_by: the partitioner that made the row partition (a passed :class:`Partitioning`'s
            method; ``given`` for a :class:`RowPartition` or ``row_offsets``).
        partition_seconds: the partitioner's time on the root.
        partition_reason: with ``auto``, which partitioner it chose and why; else empty.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        local_rows: sp.csr_array,
        row_partition: RowPartition,
        col_partition: RowPartition,
        nnz: int,
        row_order: np.ndarray | None = None,
        col_order: np.ndarray | None = None,
        partitioned_by: str = "given",
        partition_seconds: float = 0.0,
        partition_reason: str = "",
    ) -> None:
        """Not collective. Prefer :func:`distribute`, which checks the pieces fit together."""
        self.comm = comm
        self.local_rows = sp.csr_array(local_rows)
        self.row_partition, self.col_partition = row_partition, col_partition
        self.shape = (int(row_partition.n), int(col_partition.n))
        self.nnz = int(nnz)
        self.row_order, self.col_order = row_order, col_order
        self.partitioned_by, self.partition_seconds, self.partition_reason = partitioned_by, partition_seconds, partition_reason

    def __repr__(self) -> str:
        return (
            f"<DistributedMatrix {self.shape[0]} x {self.shape[1]}, {self.nnz} nonzeros over {self.row_partition.n_parts} ranks>"
        )

    @property
    def row_offset(self) -> int:
        """Global index of this rank's first row."""
        return int(self.row_partition.offsets[self.comm.Get_rank()])

    def row_ids(self) -> np.ndarray:
        """Not collective. Original indices of this rank's rows of A (and of C = A @ B)."""
        start, stop = self.row_partition.range(self.comm.Get_rank())
        return np.arange(start, stop) if self.row_order is None else self.row_order[start:stop]

    def input_ids(self) -> np.ndarray:
        """Not collective. Original indices of the rows of B this rank passes to a plan."""
        start, stop = self.col_partition.range(self.comm.Get_rank())
        return np.arange(start, stop) if self.col_order is None else self.col_order[start:stop]

    def rows_of(self, b_global: np.ndarray) -> np.ndarray:
        """Not collective. This rank's block of a B that every rank holds whole (original order):
        ``b_global[input_ids()]``, C-contiguous."""
        return np.ascontiguousarray(b_global[self.input_ids()])

    @collective_errors
    def gather(self, root: int = 0) -> sp.csr_array | None:
        """Collective. The global matrix as CSR in its original order on ``root``, None elsewhere."""
        pieces = self.comm.gather(self.local_rows, root=root)
        if self.comm.Get_rank() != root:
            return None
        whole = sp.csr_array(sp.vstack(pieces, format="csr"))
        if self.row_order is not None:
            whole = whole[np.argsort(self.row_order)]
        if self.col_order is not None:
            whole = whole[:, np.argsort(self.col_order)]
        whole = sp.csr_array(whole)
        whole.sort_indices()
        return whole

    @collective_errors
    def gather_dense(self, c_local: np.ndarray, root: int = 0) -> np.ndarray | None:
        """Collective. A dense block per rank with this matrix's rows (a product ``C = A @ B``) as
        one array in the original row order on ``root``, None elsewhere. ``c_local`` may be a NumPy
        array or a torch tensor on any device (copied to the host)."""
        pieces = self.comm.gather(np.asarray(c_local.cpu() if hasattr(c_local, "cpu") else c_local), root=root)
        if self.comm.Get_rank() != root:
            return None
        whole = np.concatenate(pieces, axis=0)
        if self.row_order is None:
            return whole
        result = np.empty_like(whole)
        result[self.row_order] = whole
        return result

    @collective_errors
    def checksum(self) -> str:
        """Collective. SHA-256 (hex) over the partitions and every rank's pattern and values, the
        same on every rank; two matrices with equal checksums are equal and equally distributed."""
        local = hashlib.sha256()
        csr = self.local_rows
        for array in (csr.indptr.astype(np.int64), csr.indices.astype(np.int64), csr.data.astype(np.float64)):
            local.update(np.ascontiguousarray(array).tobytes())
        digest = hashlib.sha256()
        digest.update(self.row_partition.offsets.astype(np.int64).tobytes())
        digest.update(self.col_partition.offsets.astype(np.int64).tobytes())
        for order in (self.row_order, self.col_order):
            digest.update(b"none" if order is None else np.asarray(order, np.int64).tobytes())
        for part in self.comm.allgather(local.digest()):
            digest.update(part)
        return digest.hexdigest()

    def spmm_plan(
        self,
        k: int,
        dtype=np.float64,
        *,
        options=None,
        strategy=UNSET,
        topology=UNSET,
        proxy=UNSET,
        mode=UNSET,
        threads=UNSET,
        deterministic=UNSET,
        transport=UNSET,
        backend=UNSET,
        device=UNSET,
        transfer_calibration=UNSET,
    ):
        """Collective. A reusable plan of ``C = A @ B`` for B with ``k`` columns:
        :func:`sparsewire.distributed.spmm.plan_spmm` on this matrix, which describes ``options``
        (:class:`~sparsewire.exec.options.ExecOptions`), the keyword arguments that replace its
        fields, and the ``auto`` strategy.

        Returns:
            :class:`~sparsewire.distributed.spmm.SpmmPlan`.
        """
        from sparsewire.distributed.spmm import plan_spmm

        return plan_spmm(
            self,
            k,
            dtype,
            options=options,
            strategy=strategy,
            topology=topology,
            proxy=proxy,
            mode=mode,
            threads=threads,
            deterministic=deterministic,
            transport=transport,
            backend=backend,
            device=device,
            transfer_calibration=transfer_calibration,
        )

    def local_rate(self, k: int, dtype=np.float64, threads: int | None = None) -> float | None:
        """Collective. The executor's CSR kernel on this matrix's rows, every rank its own at once, with a
        ``k``-column B of ``dtype`` and ``threads`` threads per rank (default: cores / ranks on the node), in
        nonzero-columns per second, the slowest rank's (:func:`~sparsewire.calibration.compute.measure_rows_rate`;
        three windows of 0.2 s): the rate at which :meth:`~sparsewire.topology.model.Topology.with_local_rate` prices
        this matrix's local work. None where the matrix has no nonzeros."""
        from sparsewire._lib.cores import default_threads
        from sparsewire.calibration.compute import measure_rows_rate
        from sparsewire.comm.runtime import ranks_on_node

        sharing = ranks_on_node(self.comm)
        threads = threads or default_threads(sharing)
        return measure_rows_rate(self.comm, self.local_rows, k, dtype, threads=threads, ranks_on_node=sharing)

    def right_operand_partitioning(self) -> Partitioning:
        """Not collective. How to distribute a B for ``C = A @ B`` (:meth:`spgemm`, or a sparse
        B in general): B's rows partitioned and ordered like A's columns. A square B also takes
        that partition and order for its columns (so C can be fed back as B); a B with other
        column counts is split evenly in the original order. Pass it as ``distribute(comm, B,
        partition=...)``."""
        return Partitioning("columns of A", self.col_partition, None, self.col_order, None)

    def sddmm(self, x_local: np.ndarray, y_local: np.ndarray, *, strategy: str = "auto") -> np.ndarray:
        """Collective. This rank's values of ``A ∘ (X Yᵀ)`` in the order of ``local_rows.data``: ``x_local`` this
        rank's rows of X (``row_partition``), ``y_local`` its rows of Y (``col_partition``), of one width d; float32
        where both are, else float64. One run of a :func:`~sparsewire.distributed.sddmm.plan_sddmm` plan (make the
        plan to run it again)."""
        from sparsewire.distributed.sddmm import plan_sddmm

        both_single = getattr(x_local, "dtype", None) == np.float32 and getattr(y_local, "dtype", None) == np.float32
        width = int(np.shape(x_local)[1]) if np.ndim(x_local) == 2 else 0
        width = int(self.comm.allreduce(width, op=MPI.MAX))  # the same d on every rank; a wrong shape is refused below
        with plan_sddmm(self, max(width, 1), np.float32 if both_single else np.float64, strategy) as plan:
            return plan.sddmm(x_local, y_local)

    def spgemm(
        self,
        other: DistributedMatrix,
        semiring="plus_times",
        *,
        options=None,
        algorithm=UNSET,
        strategy=UNSET,
        grid=UNSET,
        phases=UNSET,
        overlap=UNSET,
        stages_per_product=UNSET,
        compress=UNSET,
        topology=UNSET,
    ) -> DistributedMatrix:
        """Collective. ``C = A (+.x) other`` over a semiring, C distributed like A's rows (and
        ordered like A's rows and B's columns): :func:`sparsewire.distributed.spgemm.plan_spgemm` with
        these arguments, one multiply, C moved to A's rows, the plan closed.

        Args:
            other: B, distributed with ``partition=self.right_operand_partitioning()`` (or A
                itself when square).
            semiring, options, algorithm, strategy, grid, phases, overlap, stages_per_product, compress, topology:
                as for :func:`~sparsewire.distributed.spgemm.plan_spgemm`
                (:class:`~sparsewire.spgemm.options.SpgemmOptions` documents each option).
        """
        from sparsewire.distributed.spgemm import plan_spgemm

        with plan_spgemm(
            self,
            other,
            semiring,
            options,
            algorithm=algorithm,
            strategy=strategy,
            grid=grid,
            phases=phases,
            overlap=overlap,
            stages_per_product=stages_per_product,
            compress=compress,
            topology=topology,
        ) as plan:
            return plan.to_distributed(plan.multiply())


def _partition_of(partition, matrix: sp.csr_array, n_parts: int, topology, imbalance: float) -> Partitioning:
    n_rows, n_cols = matrix.shape
    if isinstance(partition, RowPartition):
        partition = Partitioning("given", partition, None, None, None)
    if isinstance(partition, Partitioning):
        if partition.rows.n != n_rows or partition.rows.n_parts != n_parts:
            raise InputError(
                f"the row partition covers {partition.rows.n} rows in {partition.rows.n_parts} parts, but the matrix has "
                f"{n_rows} rows and the communicator {n_parts} ranks; give one part per rank"
            )
        for order, count, what in ((partition.row_order, n_rows, "rows"), (partition.col_order, n_cols, "columns")):
            if order is not None and len(order) != count:
                raise InputError(f"the partitioning orders {len(order)} {what}, but the matrix has {count}")
            if order is not None and not np.array_equal(np.sort(np.asarray(order)), np.arange(count)):
                raise InputError(f"the partitioning's order of the {what} is not a permutation of 0 .. {count - 1}")
        if partition.cols is None:  # columns follow the rows when square, else even in the original order
            square = n_cols == n_rows
            cols = partition.rows if square else even_rows(n_cols, n_parts)
            partition = Partitioning(
                partition.method, partition.rows, cols, partition.row_order, partition.row_order if square else None
            )
        elif partition.cols.n != n_cols or partition.cols.n_parts != n_parts:
            raise InputError(
                f"the column partition covers {partition.cols.n} columns in {partition.cols.n_parts} parts, but the "
                f"matrix has {n_cols} columns and the communicator {n_parts} ranks"
            )
        return partition
    if partition not in PARTITION_CHOICES:
        raise InputError(
            f"unknown partition {partition!r}; give one of {', '.join(PARTITION_CHOICES)}, a RowPartition or a Partitioning"
        )
    return choose_partitioning(matrix, n_parts, partition, topology=topology, imbalance=imbalance)


@collective_errors
def distribute(
    comm: MPI.Comm,
    source,
    partition: str | RowPartition | Partitioning = "even",
    *,
    symmetrize: bool = False,
    root: int = 0,
    row_offsets: Sequence[int] | None = None,
    topology=None,
    imbalance: float = 0.03,
) -> DistributedMatrix:
    """Collective. Distribute a sparse matrix A over the ranks of ``comm`` by rows.

    Args:
        comm: the communicator (every rank calls this with the same arguments but ``source``).
        source: one of
            - a path (Matrix Market, SNAP edge list, .npz) or generator spec such as
              ``stencil2d:64``, read on ``root`` (the other ranks may pass the same or None);
            - a SciPy sparse matrix on ``root`` (the other ranks pass None);
            - this rank's rows (SciPy sparse, global column indices), with ``row_offsets``.
        partition: a partitioner of :mod:`sparsewire.partition` (``even``: equal rows,
            ``nnz``: balanced nonzeros, ``metis``, ``rcm``, ``community``, ``metis-hier``; the
            reordering ones keep their order in ``row_order`` / ``col_order``; ``auto``: ``even``
            or METIS, whichever sends fewer B rows over the slowest links,
            :func:`~sparsewire.partition.choose_partitioning`) or a
            :class:`~sparsewire.partition.RowPartition` of the rows, or a
            :class:`~sparsewire.partition.Partitioning` (rows, columns and their orders; its
            ``cols`` may be None: the rows' when square, else even), such as
            :meth:`DistributedMatrix.right_operand_partitioning` for a B; ignored with ``row_offsets``.
        symmetrize: edge lists only: use the undirected graph max(A, A^T).
        root: the rank that reads or holds the whole matrix.
        row_offsets: with local rows: P + 1 global row offsets, rank p holding rows
            [row_offsets[p], row_offsets[p+1]) (the same on every rank).
        topology: the groups ``metis-hier`` partitions into first (and ``auto`` counts the rows between).
        imbalance: METIS's allowed excess of nonzeros per rank over the mean (0.03 = 3%).

    Returns:
        A :class:`DistributedMatrix`. Its column partition equals the row partition for square A
        and otherwise follows the same rule over the columns (:func:`~sparsewire.partition.rows.split_in_order`).

    Raises:
        InputError on every rank: unreadable file, wrong shapes, offsets that do not fit.
    """
    if not is_communicator(comm):
        raise InputError(
            f"distribute takes the communicator first, then the matrix (got a {type(comm).__name__} as comm); "
            "call sparsewire.distribute(MPI.COMM_WORLD, A)"
        )
    rank, size = comm.Get_rank(), comm.Get_size()
    if not 0 <= root < size:
        raise InputError(f"root {root} is not a rank of this communicator of {size}")
    if row_offsets is not None:
        return _from_local_rows(comm, source, row_offsets)
    matrix, problem, header = None, None, None
    if rank == root:
        try:
            if isinstance(source, (str, os.PathLike)):
                matrix = load_matrix(os.fspath(source), symmetrize=symmetrize)
            elif sp.issparse(source):
                matrix = sp.csr_array(source)
                if matrix.dtype.kind not in "fiub":
                    raise InputError(f"A has dtype {matrix.dtype}; give a real matrix")
                matrix = sp.csr_array(matrix, dtype=np.float64)
                matrix.sum_duplicates()
            else:
                raise InputError(
                    f"source must be a path, a generator spec or a SciPy sparse matrix on rank {root} (got "
                    f"{type(source).__name__}); for rows already on each rank pass row_offsets="
                )
            chosen = _partition_of(partition, matrix, size, topology, imbalance)
            matrix = chosen.permute(matrix) if chosen.row_order is not None or chosen.col_order is not None else matrix
            header = (chosen.rows.offsets, chosen.cols.offsets, matrix.nnz, chosen.row_order, chosen.col_order)
            header += (chosen.method, chosen.seconds, chosen.reason)
        except Exception as error:  # raised on every rank by agree_on_error
            problem = error if isinstance(error, InputError) else InputError(f"{type(error).__name__}: {error}")
    agree_on_error(comm, problem)
    row_offsets_, col_offsets, nnz, row_order, col_order, method, seconds, reason = comm.bcast(header, root=root)
    row_partition, col_partition = RowPartition(row_offsets_), RowPartition(col_offsets)
    pieces = [matrix[slice(*row_partition.range(p))] for p in range(size)] if rank == root else None
    local = comm.scatter(pieces, root=root)
    return DistributedMatrix(
        comm, sp.csr_array(local), row_partition, col_partition, nnz, row_order, col_order, method, seconds, reason
    )


def _from_local_rows(comm: MPI.Comm, local, row_offsets) -> DistributedMatrix:
    rank, size = comm.Get_rank(), comm.Get_size()
    problem = None
    try:
        row_partition = RowPartition(np.asarray(row_offsets))  # refuses fractional offsets
        offsets = row_partition.offsets
        if row_partition.n_parts != size:
            raise InputError(f"row_offsets has {offsets.size} entries; give P + 1 = {size + 1} (one range per rank)")
        if not sp.issparse(local):
            raise InputError(
                f"with row_offsets, source must be this rank's rows as a SciPy sparse matrix (got {type(local).__name__})"
            )
        if local.dtype.kind not in "fiub":  # complex would lose its imaginary part in the conversion
            raise InputError(f"rank {rank}'s rows have dtype {local.dtype}; give a real matrix")
        local = sp.csr_array(local, dtype=np.float64)
        local.sum_duplicates()
        itype = csr_index_type(*local.shape, local.nnz)
        if local.indices.dtype != itype:
            # 32-bit indices where they fit, as SciPy gives rows cut from a whole matrix (readers and caches give 64)
            local = sp.csr_array((local.data, local.indices.astype(itype), local.indptr.astype(itype)), shape=local.shape)
        expected = row_partition.range(rank)[1] - row_partition.range(rank)[0]
        if local.shape[0] != expected:
            raise InputError(
                f"rank {rank} passed {local.shape[0]} rows but row_offsets gives it {expected} "
                f"(rows {row_partition.range(rank)[0]} to {row_partition.range(rank)[1] - 1})"
            )
    except InputError as error:
        problem = error
    except Exception as error:
        problem = InputError(f"{type(error).__name__}: {error}")
    agree_on_error(comm, problem)
    offsets_seen = comm.allgather(offsets.tobytes())
    widths = comm.allgather(int(local.shape[1]))
    problem = None
    if len(set(offsets_seen)) != 1:
        problem = "row_offsets differ between ranks; pass the same offsets on every rank"
    elif len(set(widths)) != 1:
        problem = f"ranks passed rows of different widths {sorted(set(widths))}; every rank's rows need all n columns"
    agree_on_error(comm, problem)
    nnz = comm.allreduce(int(local.nnz), op=MPI.SUM)
    n_cols = widths[0]
    col_partition = row_partition if n_cols == row_partition.n else even_rows(n_cols, size)
    return DistributedMatrix(comm, local, row_partition, col_partition, nnz)
