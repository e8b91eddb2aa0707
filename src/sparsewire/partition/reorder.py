"""The partitioners: which rows (and B rows) each rank owns, in an order chosen to cut the bytes.

A :class:`Partitioning` is a new order of A's rows and columns plus contiguous
:class:`~sparsewire.partition.rows.RowPartition` s over that order: rank p owns the rows
``row_order[rows.range(p)]`` of the original A (and the B rows ``col_order[cols.range(p)]``).
Distributing ``A[row_order][:, col_order]`` by the partitions is what the planner and executor
see; :class:`~sparsewire.distributed.matrix.DistributedMatrix` keeps the orders, so users pass B and get
C in their own indices.

Methods (``PARTITIONERS``):

- ``even``, ``nnz``: the original order split by rows or by nonzeros (:func:`~sparsewire.partition.rows.split_in_order`).
- ``metis``: METIS k-way (pymetis) on the graph of A + A^T, vertex weights = row nonzeros,
  ``imbalance`` the allowed excess over the mean part weight (default 3%).
- ``rcm``: SciPy's reverse Cuthill-McKee order of A + A^T, split by nonzeros.
- ``community``: Louvain communities (igraph), laid out one after another, largest first, each
  in its original order, split by nonzeros (the idea of Rabbit order, CoLa sec. 5.2).
- ``metis-hier``: group-aware METIS: first into the topology's groups (part weights proportional
  to the groups' rank counts), then each group's rows into its ranks, so the cut between groups
  (the slow links) is what the first level minimises.
- ``auto`` (:func:`choose_partitioning`): the original order split evenly, or METIS (``metis-hier`` where the
  topology has several groups of several ranks) where that cuts the B rows crossing the slowest links
  (:func:`crossing_rows`) by at least ``AUTO_MIN_CUT``.

Square A: rows and columns get one order, so C can be fed back as B. Rectangular A: the row
methods run on the bipartite graph of rows and columns (edges = nonzeros; METIS with weight
nonzeros on rows and 0 on columns), and each column then goes to the part that holds most of its
nonzeros (ties: the lowest part; empty columns spread evenly), so a B row lives where it is used.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.distinct import distinct
from sparsewire.errors import InputError
from sparsewire.partition.rows import RowPartition, balanced_nnz, even_rows, split_in_order

__all__ = [
    "AUTO_MIN_CUT",
    "PARTITIONERS",
    "PARTITION_CHOICES",
    "Partitioning",
    "choose_partitioning",
    "crossing_rows",
    "nnz_imbalance",
    "partition",
]

PARTITIONERS = ("even", "nnz", "metis", "rcm", "community", "metis-hier")
#: What ``partition`` accepts: the partitioners and ``auto``, which picks one of them.
PARTITION_CHOICES = ("auto", *PARTITIONERS)
#: ``auto`` reorders only where METIS cuts the crossing B rows by at least this fraction: a reordering costs the
#: partitioner's time and leaves the user's rows in another order on each rank, so a small gain is not worth it.
AUTO_MIN_CUT = 0.1


@dataclass(frozen=True)
class Partitioning:
    """A reordering and the partitions over it (see the module docstring).

    Attributes:
        method: the partitioner's name.
        rows, cols: partitions of the reordered rows and columns (``cols`` None only in a
            partitioning handed to ``distribute``: the columns then follow the rows when the
            matrix is square, else an even split in the original order).
        row_order, col_order: position -> original index (None: the original order).
        seconds: time the partitioner took (with ``auto``: every candidate's and the comparison).
        reason: with ``auto``, one sentence: the method chosen and why; else empty.
    """

    method: str
    rows: RowPartition
    cols: RowPartition | None
    row_order: np.ndarray | None
    col_order: np.ndarray | None
    seconds: float = 0.0
    reason: str = ""

    @property
    def partitions(self) -> tuple[RowPartition, RowPartition | None]:
        """(rows, cols): the partitions of the reordered rows and columns."""
        return self.rows, self.cols

    def permute(self, matrix: sp.sparray) -> sp.csr_array:
        """Not collective. ``A[row_order][:, col_order]``, the matrix the ranks hold."""
        result = sp.csr_array(matrix)
        if self.row_order is not None:
            result = result[self.row_order]
        if self.col_order is not None:
            result = result[:, self.col_order]
        result = sp.csr_array(result)
        result.sort_indices()
        return result


def nnz_imbalance(matrix: sp.sparray, rows: RowPartition) -> float:
    """Not collective. Nonzeros per rank of the (permuted) matrix, max / mean."""
    indptr = sp.csr_array(matrix).indptr
    per_rank = (indptr[rows.offsets[1:]] - indptr[rows.offsets[:-1]]).astype(np.float64)  # empty ranks (at the end too): 0
    mean = per_rank.mean()
    return float(per_rank.max() / mean) if mean > 0 else 1.0


def _symmetric_pattern(matrix: sp.csr_array) -> sp.csr_array:
    """The graph METIS / RCM / Louvain see: square A -> pattern of A + A^T without the diagonal;
    rectangular m x n -> the bipartite graph on m + n vertices."""
    pattern = sp.csr_array((np.ones(matrix.nnz), matrix.indices, matrix.indptr), shape=matrix.shape)
    m, n = matrix.shape
    if m == n:
        graph = sp.csr_array(pattern + pattern.T)
    else:
        graph = sp.csr_array(sp.bmat([[None, pattern], [pattern.T, None]], format="csr"))
    graph.setdiag(0)
    graph.eliminate_zeros()
    graph.sort_indices()
    return graph


def _order_by_parts(membership: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(membership, kind="stable")
    offsets = np.concatenate(([0], np.cumsum(np.bincount(membership, minlength=parts))))
    return order, offsets


def _metis(graph: sp.csr_array, parts: int, weights: np.ndarray, imbalance: float, seed: int, targets=None) -> np.ndarray:
    import pymetis

    if parts == 1 or graph.shape[0] == 0:
        return np.zeros(graph.shape[0], np.int64)
    if parts >= graph.shape[0]:  # a vertex per part (the rest empty): METIS would print "too many parts" on stdout
        return np.arange(graph.shape[0], dtype=np.int64)
    if graph.nnz == 0 or weights.sum() == 0:
        # Nothing to cut and nothing to balance: METIS would print "Cannot bisect a graph with 0
        # vertices" on stdout (into --json output); contiguous parts of the target sizes instead.
        shares = np.full(parts, 1 / parts) if targets is None else np.asarray(targets, np.float64)
        bounds = np.round(np.cumsum(shares) * graph.shape[0])
        return np.minimum(np.searchsorted(bounds, np.arange(graph.shape[0]), side="right"), parts - 1).astype(np.int64)
    options = pymetis.Options(ufactor=max(1, int(round(imbalance * 1000))), seed=seed)
    adjacency = pymetis.CSRAdjacency(graph.indptr.astype(np.int64), graph.indices.astype(np.int64))
    with _c_stdout_to_stderr():
        _, membership = pymetis.part_graph(parts, adjacency, vweights=weights.astype(np.int64), tpwgts=targets, options=options)
    return np.asarray(membership, np.int64)


@contextlib.contextmanager
def _c_stdout_to_stderr():
    """METIS prints its complaints with C's ``printf`` (a part left without vertices: "Cannot bisect a graph with 0
    vertices"), which would land in a command's ``--json`` output: while it runs, file descriptor 1 is standard
    error, and C's buffers are flushed before it is put back."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def _row_membership(method: str, matrix: sp.csr_array, parts: int, imbalance: float, seed: int, topology) -> np.ndarray:
    """Part of every row (for the order-then-split methods: the position order, as -1s)."""
    m, n = matrix.shape
    row_nnz = np.diff(matrix.indptr).astype(np.int64)
    graph = _symmetric_pattern(matrix)
    weights = row_nnz if m == n else np.concatenate([row_nnz, np.zeros(n, np.int64)])
    if method == "metis":
        return _metis(graph, parts, weights, imbalance, seed)[:m]
    if method == "metis-hier":
        if topology is None:
            raise InputError(
                "metis-hier partitions into the topology's groups first; give a topology (--group-size G or --topology)"
            )
        rank_groups = topology.groups(parts)
        n_groups = int(rank_groups.max()) + 1
        ranks_per_group = np.bincount(rank_groups, minlength=n_groups)
        group_of = _metis(
            graph, n_groups, weights, imbalance, seed, targets=list(ranks_per_group / parts) if n_groups > 1 else None
        )
        membership = np.empty(graph.shape[0], np.int64)
        for group in range(n_groups):
            members = np.flatnonzero(group_of == group)
            ranks = np.flatnonzero(rank_groups == group)
            inner = _metis(sp.csr_array(graph[members][:, members]), ranks.size, weights[members], imbalance, seed)
            membership[members] = ranks[inner]
        return membership[:m]
    raise AssertionError(method)


def _position_order(method: str, matrix: sp.csr_array, seed: int) -> np.ndarray:
    """The rows (bipartite: rows then columns) in the order of ``rcm`` or ``community``."""
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    graph = _symmetric_pattern(matrix)
    if graph.shape[0] == 0:  # SciPy's RCM fails on an empty graph; there is nothing to order
        return np.zeros(0, np.int64)
    if method == "rcm":
        return np.asarray(reverse_cuthill_mckee(graph, symmetric_mode=True), np.int64)
    import random

    import igraph

    # igraph's Louvain (community_multilevel, C): 8-13x faster than networkx's on cnr-2000 and dblp-2010.
    upper = sp.coo_array(sp.triu(graph, k=1))
    undirected = igraph.Graph(n=graph.shape[0], edges=np.column_stack([upper.row, upper.col]).tolist(), directed=False)
    igraph.set_random_number_generator(random.Random(seed))  # its global generator: same seed, same communities
    membership = np.asarray(undirected.community_multilevel().membership, np.int64)
    if membership.size == 0:
        return np.zeros(0, np.int64)
    sizes = np.bincount(membership)
    first = np.full(sizes.size, membership.size, np.int64)
    np.minimum.at(first, membership, np.arange(membership.size))
    # Communities largest first (ties: the one with the smallest member first), members ascending.
    rank_of = np.empty(sizes.size, np.int64)
    rank_of[np.lexsort((first, -sizes))] = np.arange(sizes.size)
    return np.lexsort((np.arange(membership.size), rank_of[membership])).astype(np.int64)


def _columns_follow_rows(matrix: sp.csr_array, row_part: np.ndarray, parts: int) -> np.ndarray:
    """Part of every column: where most of its nonzeros' rows are (ties: lowest; empty: even)."""
    coo = sp.coo_array(matrix)
    counts = sp.csr_array((np.ones(coo.nnz), (coo.col, row_part[coo.row])), shape=(matrix.shape[1], parts)).toarray()
    result = counts.argmax(axis=1).astype(np.int64)
    empty = counts.sum(axis=1) == 0
    result[empty] = (np.arange(int(empty.sum())) * parts) // max(int(empty.sum()), 1)
    return result


def partition(
    matrix: sp.sparray, parts: int, method: str = "even", *, topology=None, imbalance: float = 0.03, seed: int = 0
) -> Partitioning:
    """Not collective. Reorder and partition A for ``parts`` ranks with ``method`` (module docstring).

    Args:
        matrix: the global A.
        parts: the number of ranks P.
        method: one of ``PARTITIONERS``.
        topology: the groups for ``metis-hier``.
        imbalance: METIS's allowed excess of a part's nonzeros over the mean (0.03 = 3%).
        seed: METIS's and Louvain's seed.

    Returns:
        :class:`Partitioning`.
    """
    if method not in PARTITION_CHOICES:
        raise InputError(f"unknown partition {method!r}; choose one of {', '.join(PARTITION_CHOICES)}")
    if parts < 1:
        raise InputError(f"the number of parts must be at least 1 (got {parts})")
    if not 0 < imbalance < 1:
        raise InputError(f"imbalance {imbalance} must be in (0, 1), e.g. 0.03 for 3%")
    if method == "auto":
        return choose_partitioning(matrix, parts, topology=topology, imbalance=imbalance, seed=seed)
    started = time.perf_counter()
    csr = sp.csr_array(matrix)
    m, n = csr.shape
    if method in ("even", "nnz"):
        rows, cols = split_in_order(csr, parts, method)
        return Partitioning(method, rows, cols, None, None, time.perf_counter() - started)
    if method in ("rcm", "community"):
        order = _position_order(method, csr, seed)
        row_order = order[order < m]
        rows = balanced_nnz(np.diff(csr.indptr)[row_order], parts)
        row_part = np.empty(m, np.int64)
        row_part[row_order] = np.repeat(np.arange(parts), np.diff(rows.offsets))
    else:
        row_part = _row_membership(method, csr, parts, imbalance, seed, topology)
        row_order, offsets = _order_by_parts(row_part, parts)
        rows = RowPartition(offsets)
    if m == n:
        return Partitioning(method, rows, rows, row_order, row_order, time.perf_counter() - started)
    col_part = _columns_follow_rows(csr, row_part, parts)
    col_order, col_offsets = _order_by_parts(col_part, parts)
    cols = RowPartition(col_offsets) if n else even_rows(0, parts)
    return Partitioning(method, rows, cols, row_order, col_order, time.perf_counter() - started)


def _owners(partition_: RowPartition, order: np.ndarray | None) -> np.ndarray:
    """The part of every original index under a partition of the reordered indices."""
    by_position = np.repeat(np.arange(partition_.n_parts), np.diff(partition_.offsets))
    if order is None:
        return by_position
    owners = np.empty_like(by_position)
    owners[order] = by_position
    return owners


def crossing_rows(matrix: sp.sparray, partitioning: Partitioning, groups: np.ndarray | None = None) -> int:
    """Not collective. The B rows that cross between ranks in ``C = A @ B`` when every rank receives each B row its
    rows of A name once from the rank that owns it (the ``column`` strategy's volume, V_FC of CoLa sec. 3.1.2; what PETSc's
    ``MatMatMult`` sends), counted once per group with ``groups`` (the group of every rank):
    ``|{(g(p(i)), j) : a_ij != 0, g(q(j)) != g(p(i))}|``, p and q the owners of A's row i and B's row j, g the group
    (the rank itself without ``groups``). Times k x the element's size: the ``column`` plan's bytes (with groups,
    the ``column-hier`` plan's bytes between groups)."""
    csr = sp.csr_array(matrix)
    cols = partitioning.cols if partitioning.cols is not None else partitioning.rows
    row_owner = _owners(partitioning.rows, partitioning.row_order)
    col_owner = _owners(cols, partitioning.col_order if partitioning.cols is not None else partitioning.row_order)
    if groups is not None:
        row_owner, col_owner = np.asarray(groups)[row_owner], np.asarray(groups)[col_owner]
    entry_rows = np.repeat(row_owner, np.diff(csr.indptr))
    remote = col_owner[csr.indices] != entry_rows
    keys = entry_rows[remote].astype(np.int64) * csr.shape[1] + csr.indices[remote]
    return int(distinct(keys, in_place=True).size)  # a sort: NumPy's unique hashes, far slower on int64 keys


def choose_partitioning(matrix: sp.sparray, parts: int, *, topology=None, imbalance: float = 0.03, seed: int = 0) -> Partitioning:
    """Not collective. The ``auto`` partitioner: the original order split evenly (``even``) or METIS (``metis-hier``
    where the topology has several groups of several ranks, else ``metis``), whichever sends fewer B rows over the
    slowest links (:func:`crossing_rows` between the topology's groups, or between ranks where every rank is its own
    group or there is no topology); METIS only where it cuts them by at least ``AUTO_MIN_CUT``. Meshes and graphs
    with locality that their file order hides gain most (CoLa sec. 5.2 reorders for the same reason). The result's
    ``reason`` says which and why; its ``seconds`` include every candidate's."""
    started = time.perf_counter()
    csr = sp.csr_array(matrix)
    even = partition(csr, parts, "even")
    if parts == 1 or csr.nnz == 0:
        why = "one rank" if parts == 1 else "no nonzeros"
        return replace(even, seconds=time.perf_counter() - started, reason=f"auto kept the original order ({why})")
    groups = topology.groups(parts) if topology is not None else None
    n_groups = int(groups.max()) + 1 if groups is not None else parts
    grouped = 1 < n_groups < parts
    metis = partition(csr, parts, "metis-hier" if grouped else "metis", topology=topology, imbalance=imbalance, seed=seed)
    between = groups if grouped else None
    where = "between groups" if grouped else "between ranks"
    kept, cut = crossing_rows(csr, even, between), crossing_rows(csr, metis, between)
    chosen = metis if cut < kept and cut <= (1 - AUTO_MIN_CUT) * kept else even
    verdict = (
        f"auto chose {chosen.method}: {cut} B rows cross {where} per multiply against {kept} in the original order"
        if chosen is metis
        else f"auto kept the original order (even): {kept} B rows cross {where} per multiply against {cut} with "
        f"{metis.method}, which saves less than {AUTO_MIN_CUT:.0%}"
    )
    return replace(chosen, seconds=time.perf_counter() - started, reason=verdict)
