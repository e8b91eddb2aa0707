"""SpGEMM on every rank of one job. On fresh random integer matrices (square and rectangular A x B, empty rows,
an all-empty B) for every
named semiring, a user semiring whose multiplication does not commute (``plus.minus``) and a
Numba-compiled one (``10 a - b``), every algorithm (SUMMA on the default grid with 2 and 1 stages
per product, on 1 x P, on P x 1 with 3; 1D column, row, joint, each with and without overlap) and phases 1 and 3
(beyond one rank each case a third of the semirings per algorithm, every semiring meeting every algorithm):

* C equals single-process GraphBLAS exactly (pattern and values);
* the bytes MPI delivered (receive statuses) equal the bytes predicted from counts, and a
  prediction from corrupted counts does not (the check can fail).

Then BFS, SSSP, triangle counts and k-hop reachability on random graphs equal their SciPy references,
also with the vertices spread by the metis and rcm partitioners.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from oracles import entries_left_to_the_collector
from sparsewire.apps import graphs
from sparsewire.plan.strategies import Strategy
from sparsewire.spgemm.compare import compare_exactly, reference_product
from sparsewire.spgemm.distributed import DistributedSpgemm
from sparsewire.spgemm.local import row_counts
from sparsewire.spgemm.semirings import SEMIRINGS, get_semiring, user_semiring
from sparsewire.spgemm.summa import ProcessGrid


def integer_matrix(rng, n_rows, n_cols, density, signed=True):
    matrix = sp.random_array((n_rows, n_cols), density=density, rng=rng, format="csr")
    values = rng.integers(1, 10, matrix.nnz)
    if signed:
        values = values * rng.choice([-1, 1], matrix.nnz)
    matrix.data = values.astype(np.float64)
    return sp.csr_array(matrix)


def algorithms(ranks):
    """(algorithm, 1D strategy, SUMMA grid, keyword arguments)."""
    yield "summa", Strategy.COLUMN, None, {}
    yield "summa", Strategy.COLUMN, None, {"stages_per_product": 1}
    yield "summa", Strategy.COLUMN, ProcessGrid(1, ranks), {}
    if ranks > 1:
        yield "summa", Strategy.COLUMN, ProcessGrid(ranks, 1), {"stages_per_product": 3}
    for strategy in (Strategy.COLUMN, Strategy.ROW, Strategy.JOINT):
        for overlap in (False, True):
            yield "1d", strategy, None, {"overlap": overlap}


PHASES = (1, 3)
#: Beyond one rank, each case runs a third of the semirings under each algorithm (what moves does not depend on
#: the semiring), shifted by case and algorithm so that every semiring still meets every algorithm.
ROTATION = 3
CORRUPTED_ALGORITHMS = ("summa", "1d")
TRIANGLE_ALGORITHMS = ("summa", "1d", "auto")
REACH_ALGORITHMS = ("summa", "1d")
REACH_HOPS = (0, 1, 2, 5)
REORDERING_PARTITIONERS = ("metis", "rcm")
GRAPH_ALGORITHMS = ("bfs", "sssp", "triangles", "reach")
CASES = ("square", "rectangular", "empty-rows", "empty-b")


@functools.cache
def semirings():
    """Every named semiring, a user ADD.MULTIPLY and a user semiring from a Python function (made once per process:
    python-graphblas compiles the function with Numba, seconds per call)."""
    return [get_semiring(name) for name in SEMIRINGS] + [
        get_semiring("plus.minus"),
        user_semiring("plus_ten_a_minus_b", "plus", lambda a, b: 10 * a - b),
    ]


def products(ranks: int):
    """(case index, semiring, algorithm tuple): every pair on every case at P = 1; beyond, the rotation."""
    for case in range(len(CASES)):
        for index, semiring in enumerate(semirings()):
            for number, algorithm in enumerate(algorithms(ranks)):
                if ranks == 1 or (index + case + number) % ROTATION == 0:
                    yield case, semiring, algorithm


def planned_checks(ranks: int) -> int:
    """Checks one rank makes, from the lists :func:`main` walks: cases x semirings x algorithms x
    phases; the corrupted predictions (P > 1); BFS and SSSP once, triangles per algorithm, reach
    per algorithm and hop count; every graph algorithm per reordering partitioner."""
    multiplied = sum(1 for _ in products(ranks)) * len(PHASES)
    corrupted = len(CORRUPTED_ALGORITHMS) if ranks > 1 else 0
    graph = (
        2
        + len(TRIANGLE_ALGORITHMS)
        + len(REACH_ALGORITHMS) * len(REACH_HOPS)
        + len(REORDERING_PARTITIONERS) * len(GRAPH_ALGORITHMS)
    )
    return multiplied + corrupted + graph


def corrupted_predictions_are_caught(comm, a) -> int:
    """A prediction made from wrong counts differs from what MPI delivered (the check can fail):
    SUMMA on a 1 x P grid (A's stage blocks travel) with every A stage block counted one entry too
    large, 1D with one copied row left out."""
    rank, checks = comm.Get_rank(), 0
    semiring = get_semiring("plus_times")
    for algorithm in CORRUPTED_ALGORITHMS:
        grid = ProcessGrid(1, comm.Get_size()) if algorithm == "summa" else None
        spgemm = DistributedSpgemm(comm, a if rank == 0 else None, a.shape, semiring, algorithm, grid=grid)
        b_local = spgemm.scatter_b(a if rank == 0 else None)
        honest = spgemm.predicted_bytes(b_local)
        multiplier = spgemm.multiplier
        if algorithm == "summa":
            multiplier.a_sizes = {s: (listed, entries + 1) for s, (listed, entries) in multiplier.a_sizes.items()}
        else:
            keep = np.ones(multiplier.copy_rows.size, bool)
            nonempty = np.flatnonzero(row_counts(b_local)[multiplier.copy_sources] > 0)
            keep[nonempty[:1]] = False
            multiplier.copy_rows, multiplier.copy_sources = multiplier.copy_rows[keep], multiplier.copy_sources[keep]
        corrupted = spgemm.predicted_bytes(b_local)
        before = spgemm.bytes_received
        spgemm.multiply(b_local)
        moved = comm.allreduce(spgemm.bytes_received - before, op=MPI.SUM)
        if rank == 0:
            assert moved == honest, (algorithm, moved, honest)
            assert corrupted != moved, (algorithm, "the corrupted prediction went unnoticed", corrupted, moved)
        spgemm.free()
        checks += 1
    return checks


@pytest.mark.ranks(1, 3, 4)
def test_every_semiring_algorithm_and_grid_is_exact(comm, seed):
    rank, ranks = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(seed)  # same stream on every rank; rank 0's copies are used
    cases = list(
        zip(
            CASES,
            [
                (integer_matrix(rng, 23, 23, 0.15), None),
                (integer_matrix(rng, 17, 29, 0.12), integer_matrix(rng, 29, 11, 0.2)),
                (sp.csr_array(sp.diags_array(np.arange(1.0, 8.0), offsets=2, shape=(9, 9))), None),
                (integer_matrix(rng, 6, 5, 0.5), sp.csr_array((5, 4))),
            ],
        )
    )
    checks, references = 0, {}  # (one reference product per case and semiring, whatever algorithms run it)
    for number, semiring, (algorithm, strategy, grid, options) in products(ranks):
        case, (a, b) = cases[number]
        b = a if b is None else b
        if (number, semiring.name) not in references:
            references[number, semiring.name] = reference_product(a, b, semiring)
        reference = references[number, semiring.name]
        spgemm = DistributedSpgemm(
            comm, a if rank == 0 else None, b.shape, semiring, algorithm, strategy=strategy, grid=grid, **options
        )
        b_local = spgemm.scatter_b(b if rank == 0 else None)
        for phases in PHASES:
            predicted = spgemm.predicted_bytes(b_local, phases)
            before = spgemm.bytes_received
            c_local = spgemm.multiply(b_local, phases=phases)
            moved = comm.allreduce(spgemm.bytes_received - before, op=MPI.SUM)
            gathered = spgemm.gather_c(c_local)
            label = f"{case}/{semiring.name}/{spgemm.name}/{grid}/{options}/phases={phases}"
            if rank == 0:
                outcome = compare_exactly(gathered, reference)
                assert outcome["check_passed"] and outcome["exact"], (label, outcome)
                assert moved == predicted, (label, moved, predicted)
            checks += 1
        spgemm.free()

    if ranks > 1:  # (one rank sends nothing)
        checks += corrupted_predictions_are_caught(comm, cases[0][1][0])

    graph = integer_matrix(rng, 40, 40, 0.06, signed=False)
    graph.setdiag(0)
    graph.eliminate_zeros()
    source = int(np.argmax(np.diff(graph.indptr)))
    bfs = graphs.bfs_levels(comm, graph if rank == 0 else None, source)
    sssp = graphs.shortest_paths(comm, graph if rank == 0 else None, source)
    if rank == 0:
        assert np.array_equal(bfs["values"], graphs.reference_bfs_levels(graph, source)), "bfs"
        assert np.array_equal(sssp["values"], graphs.reference_shortest_paths(graph, source)), "sssp"
    checks += 2
    for algorithm in TRIANGLE_ALGORITHMS:
        triangles = graphs.triangle_count(comm, graph if rank == 0 else None, algorithm=algorithm)
        if rank == 0:
            assert triangles["values"] == graphs.reference_triangle_count(graph), ("triangles", algorithm)
        checks += 1
    for algorithm in REACH_ALGORITHMS:
        for hops in REACH_HOPS:
            reach = graphs.reachable_within(comm, graph if rank == 0 else None, hops, algorithm=algorithm)
            if rank == 0:
                reference = graphs.reference_reachable_within(graph, hops)
                assert (reach["values"] != reference).nnz == 0, ("reach", algorithm, hops)
            checks += 1
    # Vertices spread by reordering partitioners: results come back in the original labels.
    for partition in REORDERING_PARTITIONERS:
        bfs = graphs.bfs_levels(comm, graph if rank == 0 else None, source, partition=partition)
        sssp = graphs.shortest_paths(comm, graph if rank == 0 else None, source, partition=partition)
        triangles = graphs.triangle_count(comm, graph if rank == 0 else None, partition=partition)
        reach = graphs.reachable_within(comm, graph if rank == 0 else None, 2, algorithm="1d", partition=partition)
        if rank == 0:
            assert np.array_equal(bfs["values"], graphs.reference_bfs_levels(graph, source)), ("bfs", partition)
            assert np.array_equal(sssp["values"], graphs.reference_shortest_paths(graph, source)), ("sssp", partition)
            assert triangles["values"] == graphs.reference_triangle_count(graph), ("triangles", partition)
            assert (reach["values"] != graphs.reference_reachable_within(graph, 2)).nnz == 0, ("reach", partition)
        checks += len(GRAPH_ALGORITHMS)
    assert comm.allreduce(checks, op=MPI.SUM) == planned_checks(ranks) * ranks


@pytest.mark.ranks(3, 4)
def test_what_a_multiply_receives_and_joins_is_freed_before_it_returns(comm, seed):
    """Every python-graphblas matrix a multiply made and dropped (received blocks and rows, joined stages, products
    added into C, phases' pieces) holds no entries when Python's cycle collector comes for it, under every algorithm;
    the plan's own blocks and the caller's B are kept, so a second multiply gives the same C."""
    rank, rng = comm.Get_rank(), np.random.default_rng(seed)
    a = integer_matrix(rng, 31, 31, 0.2)
    semiring = get_semiring("plus_times")
    for algorithm, strategy, grid, options in algorithms(comm.Get_size()):
        spgemm = DistributedSpgemm(
            comm, a if rank == 0 else None, a.shape, semiring, algorithm, strategy=strategy, grid=grid, **options
        )
        b_local = spgemm.scatter_b(a if rank == 0 else None)
        for phases in PHASES:
            multiply = functools.partial(spgemm.multiply, b_local, phases=phases)
            first, dropped, entries = entries_left_to_the_collector(multiply)
            label = f"{spgemm.name}/{grid}/{options}/phases={phases}"
            assert entries == 0, (label, f"{dropped} dropped matrices held {entries} entries")
            second = multiply()
            assert first.isequal(second), label
            first.clear()  # (this test's own: not to be counted at the next collection)
            second.clear()
        spgemm.free()
