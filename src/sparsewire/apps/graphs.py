"""Graph algorithms as distributed semiring products (semiring SpGEMM paper sec. 2.2), each with the
single-process reference it is checked against.

The graph of a matrix A has an edge u -> v of weight A(u, v) for every stored entry. Vertex vectors
are n x 1 sparse columns distributed like the rows of B in 1D SpGEMM, so one step is
``y = A^T (+.x) x`` with the plan of A^T built once and reused every step; only the rows of x that
hold entries travel (hypersparse messages), so a small frontier costs little.

* :func:`bfs_levels`: level(v) = hops from the source; ``next = A^T (any.pair) frontier``, masked
  by the unvisited vertices (reference: SciPy's unweighted shortest paths).
* :func:`shortest_paths`: Bellman-Ford over (min, +): ``y = A^T (min.+) changed``, then
  ``d = min(d, y)``; only vertices whose distance changed are sent next step (reference: SciPy's
  Dijkstra).
* :func:`triangle_count`: with L the strictly lower triangle of the undirected pattern,
  ``sum(L (+.pair) L masked by L)`` counts each triangle once (reference: SciPy ``(L @ L) * L``).
* :func:`reachable_within`: the pattern of ``(I + A)^k`` over (lor, land) by repeated squaring:
  ``R <- R (lor.land) R`` for each bit of k, ``result <- result (lor.land) R`` where the bit is set
  (reference: k SciPy boolean products).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse import csgraph

from sparsewire._lib.distinct import distinct
from sparsewire.comm.runtime import agree_on_error
from sparsewire.errors import InputError
from sparsewire.partition import partition as choose_partitioning
from sparsewire.plan.strategies import Strategy
from sparsewire.spgemm.distributed import DistributedSpgemm, choose_algorithm
from sparsewire.spgemm.graphblas_loader import graphblas as gb
from sparsewire.spgemm.local import to_graphblas, to_scipy
from sparsewire.spgemm.semirings import get_semiring
from sparsewire.spgemm.summa import ProcessGrid

__all__ = [
    "GraphRun",
    "bfs_levels",
    "shortest_paths",
    "triangle_count",
    "reachable_within",
    "reference_bfs_levels",
    "reference_shortest_paths",
    "reference_triangle_count",
    "reference_reachable_within",
    "lower_triangle",
]


class GraphRun(dict):
    """Result of a distributed graph algorithm (a dict: values, steps, bytes_moved, algorithm)."""


def _square(comm: MPI.Comm, matrix: sp.csr_array | None) -> int:
    shape = comm.bcast(None if comm.Get_rank() != 0 else matrix.shape, root=0)
    if shape[0] != shape[1]:
        raise InputError(f"graph algorithms need a square adjacency matrix; got {shape[0]} x {shape[1]}")
    return int(shape[0])


def _check_source(source: int, n: int) -> None:
    if n == 0:
        raise InputError("the graph has no vertices (a 0 x 0 matrix); give a graph with at least one vertex")
    if not 0 <= source < n:
        raise InputError(f"--source {source} is not a vertex; give 0..{n - 1}")


def _reordered(comm: MPI.Comm, matrix: sp.csr_array | None, partition: str, imbalance: float):
    """Collective. The graph relabelled by a partitioner (:mod:`sparsewire.partition`):
    (on rank 0 ``A[order][:, order]``, else None; ``order`` (new vertex -> original) or None;
    the vertices' partition). Vertex labels are the same for rows and columns, as every
    partitioner permutes a square matrix's rows and columns alike."""
    chosen, problem = None, None
    if comm.Get_rank() == 0:
        try:
            chosen = choose_partitioning(matrix, comm.Get_size(), partition, imbalance=imbalance)
        except InputError as error:
            problem = str(error)
    agree_on_error(comm, problem)
    if comm.Get_rank() == 0 and chosen.row_order is not None:
        matrix = chosen.permute(matrix)
    order, rows = comm.bcast(None if chosen is None else (chosen.row_order, chosen.rows), root=0)
    return matrix, order, rows


def _vertex_sweep(comm, matrix, source, semiring_name, update, partition="even", imbalance=0.03):
    """Shared loop of BFS and Bellman-Ford: y = A^T (+.x) x until no rank updates anything."""
    rank = comm.Get_rank()
    n = _square(comm, matrix)
    _check_source(source, n)
    matrix, order, vertices = _reordered(comm, matrix, partition, imbalance)
    if order is not None:
        source = int(np.argsort(order)[source])  # the source's label in the partitioner's order
    transposed = sp.csr_array(matrix.T) if rank == 0 else None
    semiring = get_semiring(semiring_name)
    spgemm = DistributedSpgemm(
        comm, transposed, (n, 1), semiring, "1d", strategy=Strategy.COLUMN, partitions=(vertices, vertices)
    )
    start, stop = spgemm.b_block(rank)[0].start, spgemm.b_block(rank)[0].stop
    values = np.full(stop - start, np.inf)
    if start <= source < stop:
        values[source - start] = 0.0
    changed = np.array([source - start]) if start <= source < stop else np.zeros(0, np.int64)
    steps = 0
    while True:
        dtype = semiring.dtype
        x = gb.Matrix.from_coo(
            changed, np.zeros(changed.size, np.int64), values[changed].astype(dtype), nrows=stop - start, ncols=1, dtype=dtype
        )
        y = spgemm.multiply(x)
        rows, _, candidate = y.to_coo()
        changed = update(values, rows.astype(np.int64), candidate.astype(np.float64), steps + 1)
        steps += 1
        if comm.allreduce(changed.size, op=MPI.SUM) == 0:
            break
        if steps > n:
            raise InputError("distances still change after n steps: a negative cycle is reachable from the source")
    moved = comm.allreduce(spgemm.bytes_received, op=MPI.SUM)
    spgemm.free()
    gathered = comm.gather((start, values), root=0)
    result = GraphRun(steps=steps, bytes_moved=int(moved), algorithm=spgemm.name)
    if rank == 0:
        values = np.concatenate([v for _, v in sorted(gathered, key=lambda item: item[0])])
        if order is not None:
            values[order] = values.copy()  # back to the original vertex labels
        result["values"] = values
    return result


def bfs_levels(
    comm: MPI.Comm, matrix: sp.csr_array | None, source: int, *, partition: str = "even", imbalance: float = 0.03
) -> GraphRun:
    """Collective. BFS from ``source`` along A's edges; on rank 0 ``values`` holds each vertex's
    level (hops), inf where unreachable. ``partition``: how the vertices are spread over the ranks
    (any partitioner of :mod:`sparsewire.partition`; results in the original labels)."""

    def update(levels, rows, _, step):
        fresh = distinct(rows[np.isinf(levels[rows])])
        levels[fresh] = step
        return fresh

    return _vertex_sweep(comm, matrix, source, "any_pair", update, partition, imbalance)


def shortest_paths(
    comm: MPI.Comm, matrix: sp.csr_array | None, source: int, *, partition: str = "even", imbalance: float = 0.03
) -> GraphRun:
    """Collective. Single-source shortest path lengths over A's weights (Bellman-Ford on (min, +));
    on rank 0 ``values`` holds them, inf where unreachable. Weights must be non-negative.
    ``partition``: as for :func:`bfs_levels`."""
    negative = comm.bcast(int((matrix.data < 0).sum()) if comm.Get_rank() == 0 else None, root=0)
    if negative:
        raise InputError(
            f"the matrix has {negative} negative weights; shortest paths need non-negative ones "
            "(use --values ones or --values random:SEED)"
        )

    def update(distances, rows, candidate, _):
        better = candidate < distances[rows]
        distances[rows[better]] = candidate[better]
        return rows[better]

    return _vertex_sweep(comm, matrix, source, "min_plus", update, partition, imbalance)


def lower_triangle(matrix: sp.sparray) -> sp.csr_array:
    """Not collective. The strictly lower triangle of the undirected pattern ``A + A^T`` (no self loops), values 1."""
    pattern = sp.csr_array(matrix, copy=True)
    pattern.data = np.ones_like(pattern.data)
    undirected = sp.csr_array(((pattern + pattern.T) != 0).astype(np.float64))
    lower = sp.csr_array(sp.tril(undirected, k=-1))
    lower.sort_indices()
    return lower


def triangle_count(
    comm: MPI.Comm,
    matrix: sp.csr_array | None,
    *,
    algorithm: str = "auto",
    grid: ProcessGrid | None = None,
    partition: str = "even",
    imbalance: float = 0.03,
) -> GraphRun:
    """Collective. Triangles of the undirected graph of A: ``sum(L (+.pair) L masked by L)``
    (the count does not depend on the labels, so a reordering ``partition`` needs no way back)."""
    _square(comm, matrix)
    matrix, _, vertices = _reordered(comm, matrix, partition, imbalance)
    lower = lower_triangle(matrix) if comm.Get_rank() == 0 else None
    semiring = get_semiring("plus_pair")
    spgemm, b_local, _, _ = choose_algorithm(comm, lower, lower, semiring, algorithm, grid=grid, partitions=(vertices, vertices))
    mask = spgemm.scatter_like_c(lower)
    product = spgemm.multiply(b_local, mask=mask)
    local = int(to_scipy(product).data.sum()) if product.nvals else 0
    count = comm.allreduce(local, op=MPI.SUM)
    moved = comm.allreduce(spgemm.bytes_received, op=MPI.SUM)
    spgemm.free()
    return GraphRun(values=int(count), steps=1, bytes_moved=int(moved), algorithm=spgemm.name)


def reachable_within(
    comm: MPI.Comm,
    matrix: sp.csr_array | None,
    hops: int,
    *,
    algorithm: str = "summa",
    grid: ProcessGrid | None = None,
    partition: str = "even",
    imbalance: float = 0.03,
) -> GraphRun:
    """Collective. The pattern of ``(I + A)^hops`` (v reachable from u in at most ``hops`` steps),
    by repeated squaring over (lor, land); on rank 0 ``values`` is it as a boolean CSR matrix in the
    original labels. Every product is distributed; C is already in the layout of the next
    product's operands. ``partition``: the vertices' partition of the 1D algorithm (SUMMA cuts the
    relabelled matrix into even blocks)."""
    if hops < 0:
        raise InputError(f"hops must be >= 0, got {hops}")
    n = _square(comm, matrix)
    matrix, order, vertices = _reordered(comm, matrix, partition, imbalance)
    semiring = get_semiring("lor_land")
    start = None
    if comm.Get_rank() == 0:
        start = sp.csr_array(((sp.csr_array(matrix) != 0) + sp.eye_array(n, format="csr")) != 0).astype(np.float64)
    first = DistributedSpgemm(comm, start, (n, n), semiring, algorithm, grid=grid, partitions=(vertices, vertices))
    power = first.scatter_b(start)  # B layout == C layout == A layout (square, even blocks)
    first.free()
    rank = comm.Get_rank()
    rows, cols = first.c_block(rank)
    result = to_graphblas(sp.eye_array(n, format="csr")[rows][:, cols], np.bool_)
    # A path of more than n - 1 hops repeats a vertex: (I + A)^hops = (I + A)^(n - 1) for hops >= n - 1.
    steps, moved, remaining = 0, 0, min(hops, max(n - 1, 0))
    while remaining:
        if remaining & 1:
            result, sent = _product(comm, result, power, n, semiring, algorithm, grid, vertices)
            moved, steps = moved + sent, steps + 1
        remaining >>= 1
        if remaining:
            power, sent = _product(comm, power, power, n, semiring, algorithm, grid, vertices)
            moved, steps = moved + sent, steps + 1
    gathered = first.gather_c(result, row_order=order, col_order=order)  # original labels
    return GraphRun(values=gathered, steps=steps, bytes_moved=int(moved), algorithm=first.name)


def _product(comm, left: gb.Matrix, right: gb.Matrix, n: int, semiring, algorithm: str, grid, vertices) -> tuple[gb.Matrix, int]:
    spgemm = DistributedSpgemm(
        comm,
        None,
        (n, n),
        semiring,
        algorithm,
        grid=grid,
        a_local=to_scipy(left),
        a_shape=(n, n),
        partitions=(vertices, vertices),
    )
    product = spgemm.multiply(right)
    sent = comm.allreduce(spgemm.bytes_received, op=MPI.SUM)
    spgemm.free()
    return product, sent


# ----------------------------------------------------------------------------------------------
# Single-process references


def reference_bfs_levels(matrix: sp.sparray, source: int) -> np.ndarray:
    """Not collective. Hops from ``source`` along A's edges (SciPy), inf where unreachable."""
    pattern = sp.csr_array(matrix, copy=True)
    pattern.data = np.ones_like(pattern.data)
    return csgraph.shortest_path(pattern, method="D", directed=True, unweighted=True, indices=source)


def reference_shortest_paths(matrix: sp.sparray, source: int) -> np.ndarray:
    """Not collective. Shortest path lengths from ``source`` over A's (non-negative) weights (SciPy Dijkstra)."""
    return csgraph.dijkstra(sp.csr_array(matrix), directed=True, indices=source)


def reference_triangle_count(matrix: sp.sparray) -> int:
    """Not collective. Triangles of the undirected graph of A: ``sum((L @ L) * L)`` in integers (SciPy)."""
    lower = lower_triangle(matrix).astype(np.int64)
    return int((lower @ lower).multiply(lower).sum())


def reference_reachable_within(matrix: sp.sparray, hops: int) -> sp.csr_array:
    """Not collective. The pattern of ``(I + A)^hops`` by SciPy boolean products, one hop at a time until
    ``hops`` or until nothing changes (at most n - 1: a longer path repeats a vertex)."""
    n = matrix.shape[0]
    step = sp.csr_array(((sp.csr_array(matrix) != 0) + sp.eye_array(n, format="csr")) != 0).astype(np.int64)
    reach = sp.eye_array(n, format="csr", dtype=np.int64)
    for _ in range(min(hops, max(n - 1, 0))):
        grown = sp.csr_array(((reach @ step) != 0).astype(np.int64))
        if grown.nnz == reach.nnz:  # (I + A) keeps every reached vertex: an equal count is the same pattern
            break
        reach = grown
    return sp.csr_array(reach != 0)
