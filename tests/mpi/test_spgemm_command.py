"""``sparsewire spgemm`` and the graph commands on every rank of one job, as ``mpiexec -n P sparsewire spgemm``
runs them: the report's fields and check, every named semiring with a second matrix, phases, BFS, SSSP, triangles
and reach against SciPy (on the shared matrices too), and the command beside the library with the same options.
Their refusals end their jobs and run in jobs of their own (tests/spgemm/test_spgemm_mpi.py)."""

from __future__ import annotations

import argparse
import json
import os

import pytest
import scipy.sparse as sp
from mpi4py import MPI

from conftest import SHARED_MATRICES, matrix_file
from sparsewire import distribute, plan_spgemm
from sparsewire.spgemm.values import load_operand

NAMED = ["plus_times", "min_plus", "max_plus", "max_times", "min_times", "plus_min", "lor_land", "plus_pair", "any_pair"]


def command_json(command, name, *args):
    status, out, err = command(name, *args, "--json")
    assert status == 0, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out  # exactly one JSON object, from rank 0
    return json.loads(lines[0])


@pytest.mark.ranks(3, 4)
@pytest.mark.parametrize("algorithm", ["summa", "1d", "auto"])
def test_cli_spgemm_fields_and_check(command, comm, algorithm):
    ranks = comm.Get_size()
    report = command_json(
        command, "spgemm", "rmat:9:6:2", "--algorithm", algorithm, "--values", "random:5", "--check", "--repeat", "1"
    )
    for field in (
        "ranks",
        "grid",
        "algorithm",
        "semiring",
        "median_seconds",
        "nnz_out",
        "checksum_sum",
        "bytes_moved",
        "peak_rss_bytes",
    ):
        assert field in report, field
    assert report["ranks"] == ranks and report["check_passed"] and report["exact"]
    assert report["bytes_moved"] == report["predicted_bytes"] > 0
    if algorithm == "summa":
        assert report["grid"] == ("3x1" if ranks == 3 else "2x2")
    if algorithm == "auto":
        assert report["predicted_bytes"] == min(report["predicted_bytes_by_algorithm"].values())


@pytest.mark.ranks(3)
def test_cli_spgemm_semirings_phases_and_a_second_matrix(command, comm, rng, shared_tmp):
    a = sp.random_array((30, 20), density=0.15, rng=rng, format="coo")
    b = sp.random_array((20, 25), density=0.15, rng=rng, format="coo")
    checksums = {}
    operands = (matrix_file(comm, shared_tmp / "a.mtx", a), matrix_file(comm, shared_tmp / "b.mtx", b))
    options = ("--values", "random:2", "--algorithm", "summa", "--grid", "1x3", "--phases", "2", "--check", "--repeat", "1")
    for semiring in NAMED + ["plus.minus"]:
        report = command_json(command, "spgemm", *operands, "--semiring", semiring, *options)
        assert report["check_passed"] and report["shape"] == [30, 25], semiring
        checksums[semiring] = report["checksum_sum"]
    # Booleans count 1 per stored entry, as do pair products summed with any.
    assert checksums["lor_land"] == checksums["any_pair"]


@pytest.mark.ranks(4)
def test_cli_phases_bound_the_held_entries(command):
    reports = [
        command_json(command, "spgemm", "rmat:10:8:1", "--algorithm", "summa", "--phases", str(phases), "--repeat", "1")
        for phases in (1, 4)
    ]
    assert reports[0]["nnz_out"] == reports[1]["nnz_out"]
    assert reports[0]["checksum_sum"] == reports[1]["checksum_sum"]
    assert reports[1]["peak_held_entries"] < reports[0]["peak_held_entries"]


@pytest.mark.ranks(2, 3)
def test_cli_graph_commands_check_against_scipy(command):
    for name in ("bfs", "sssp"):
        report = command_json(command, name, "rmat:10:8:4", "--source", "3", "--values", "random:1", "--check")
        assert report["check_passed"] and report["reached"] >= 1, name
    report = command_json(command, "triangles", "rmat:10:8:4", "--check")
    assert report["check_passed"] and report["triangles"] == report["reference_triangles"] > 0
    report = command_json(command, "reach", "rmat:8:4:4", "--hops", "3", "--check")
    assert report["check_passed"] and report["products"] == 3
    # Vertices spread by METIS: the same answers, in the original labels.
    report = command_json(command, "bfs", "rmat:10:8:4", "--source", "3", "--partition", "metis", "--check")
    assert report["check_passed"]
    report = command_json(command, "reach", "rmat:8:4:4", "--hops", "2", "--algorithm", "1d", "--partition", "rcm", "--check")
    assert report["check_passed"]


#: The shared matrices the graph commands run on in the suite: the three quickest of a directed citation graph, a
#: mesh and a road network (every matrix: the same case with SPARSEWIRE_ALL_MATRICES=1, about 2 minutes more).
GRAPH_MATRICES = [
    path
    for path in SHARED_MATRICES
    if os.environ.get("SPARSEWIRE_ALL_MATRICES") or path.name.split(".")[0] in ("cit-HepTh", "delaunay_n16", "luxembourg_osm")
]


@pytest.mark.ranks(2)  # (real graphs at the rank count the 2-core machine runs without oversubscription)
@pytest.mark.skipif(not GRAPH_MATRICES, reason="../shared/data is not present")
@pytest.mark.parametrize("path", GRAPH_MATRICES, ids=lambda p: p.name.split(".")[0])
def test_shared_matrices_graph_algorithms_match_references(command, path):
    """BFS, SSSP (random integer weights) and triangle counts on shared matrices."""
    matrix = str(path)
    for name in ("bfs", "sssp"):
        report = command_json(command, name, matrix, "--source", "1", "--values", "random:1", "--check")
        assert report["check_passed"], (path.name, name)
    report = command_json(command, "triangles", matrix, "--check")
    assert report["check_passed"], path.name


API_AND_CLI_CASES = [
    ("rmat:8:6:3", None, ["--algorithm", "summa", "--stages-per-product", "1"]),
    ("rmat:8:6:3", None, ["--algorithm", "1d", "--strategy", "joint", "--overlap", "--partition", "metis"]),
    ("delaunay:300:2", None, ["--algorithm", "auto", "--phases", "2", "--semiring", "min_plus", "--partition", "rcm"]),
    ("a.mtx", "b.mtx", ["--algorithm", "summa", "--grid", "1xP", "--semiring", "max_times"]),
    ("a.mtx", "b.mtx", ["--algorithm", "1d", "--strategy", "row", "--partition", "nnz"]),
    ("a.mtx", "b.mtx", ["--algorithm", "auto", "--partition", "rcm"]),  # B's rows follow A's reordered columns
]


def library_spgemm(comm, first: str, second: str | None, options: list[str]):
    """The library's SpGEMM path with the options of ``sparsewire spgemm``: ``distribute`` ->
    ``DistributedMatrix.spgemm`` for C (gathered on rank 0), ``plan_spgemm`` for the bytes MPI delivered in one
    multiply; returns (C or None, algorithm, bytes)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--semiring", default="plus_times")
    parser.add_argument("--algorithm", default="auto")
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--grid")
    parser.add_argument("--phases", type=int, default=1)
    parser.add_argument("--overlap", action="store_true")
    parser.add_argument("--stages-per-product", type=int, default=2)
    parser.add_argument("--partition", default="even")
    parser.add_argument("--values", default="file")
    args = parser.parse_args(options)
    root = comm.Get_rank() == 0
    a_global = load_operand(first, args.values) if root else None
    b_global = (a_global if second is None else load_operand(second, args.values)) if root else None
    a = distribute(comm, a_global, args.partition)
    b = a if second is None else distribute(comm, b_global, a.right_operand_partitioning())
    keywords = dict(
        strategy=args.strategy,
        grid=args.grid,
        phases=args.phases,
        overlap=args.overlap,
        stages_per_product=args.stages_per_product,
    )
    c = a.spgemm(b, args.semiring, algorithm=args.algorithm, **keywords).gather()
    with plan_spgemm(a, b, args.semiring, algorithm=args.algorithm, **keywords) as plan:
        before = plan.bytes_received
        plan.multiply()
        moved = comm.allreduce(plan.bytes_received - before, op=MPI.SUM)
        return c, plan.algorithm, moved


@pytest.mark.ranks(3, 4)  # (P = 1: every semiring, algorithm and grid in test_spgemm.py)
def test_cli_spgemm_and_the_library_give_the_same_c_and_bytes(command, comm, rng, shared_tmp):
    """``sparsewire spgemm`` and ``DistributedMatrix.spgemm`` / ``plan_spgemm`` with the same options: the same C
    entry for entry (integer values: exact) and the same bytes delivered."""
    ranks = comm.Get_size()
    a = sp.random_array((41, 29), density=0.12, rng=rng, format="coo")
    b = sp.random_array((29, 37), density=0.12, rng=rng, format="coo")
    for name, operand in (("a.mtx", a), ("b.mtx", b)):
        matrix_file(comm, shared_tmp / name, operand)
    for number, (first, second, options) in enumerate(API_AND_CLI_CASES):
        operands = [str(shared_tmp / name) if name and name.endswith(".mtx") else name for name in (first, second) if name]
        options = [f"1x{ranks}" if option == "1xP" else option for option in options]
        options += ["--values", "random:7"] + ([] if "--partition" in options else ["--partition", "even"])
        cli_c = shared_tmp / f"cli{number}.npz"
        report = command_json(command, "spgemm", *operands, *options, "--repeat", "1", "--output", str(cli_c))
        library_c, algorithm, moved = library_spgemm(comm, operands[0], operands[1] if second else None, options)
        label = f"{first} {options}"
        assert algorithm == report["algorithm"], label
        assert moved == report["bytes_moved"] == report["predicted_bytes"], label
        if comm.Get_rank() == 0:
            ours = sp.load_npz(cli_c)
            assert ours.shape == library_c.shape and ours.nnz == library_c.nnz == report["nnz_out"] > 0, label
            assert abs(ours - library_c).max() == 0, label
            assert float(ours.sum()) == report["checksum_sum"], label


@pytest.mark.ranks(2, 3)
def test_cli_spgemm_check_passes_on_normal_values(command, comm, rng, shared_tmp):
    """A relative 1e-12 with no absolute part would fail a 1D product of N(0, 1) values on an entry off by 3.5e-17
    (sparsewire._lib.tolerance)."""
    matrix = sp.random_array((120, 120), density=0.05, rng=rng, format="coo")
    matrix.data = rng.standard_normal(matrix.nnz)
    path = matrix_file(comm, shared_tmp / "normal.mtx", matrix)
    for algorithm in ("1d", "summa"):
        report = command_json(command, "spgemm", path, "--algorithm", algorithm, "--check")
        assert report["check_passed"] and report["pattern_equal"] and not report["exact"], report


@pytest.mark.ranks(3)
def test_cli_spgemm_check_with_metis(command):
    report = command_json(command, "spgemm", "delaunay:700:4", "--partition", "metis", "--values", "random:2", "--check")
    assert report["check_passed"]


@pytest.mark.ranks(2, 4)
def test_cli_spgemm_partitions_by_default_where_a_1d_plan_fetches_fewer_rows(command):
    # delaunay_n16's file order is random: on METIS's partition the 1D plan fetches a fraction of the rows, and C is
    # the same (integer values: exact). SUMMA keeps even rows.
    args = ["--values", "random:1", "--repeat", "1"]
    default = command_json(command, "spgemm", "delaunay_n16", *args, "--algorithm", "1d", "--strategy", "column")
    even = command_json(
        command, "spgemm", "delaunay_n16", *args, "--algorithm", "1d", "--strategy", "column", "--partition", "even"
    )
    assert default["partition"] == "metis" and "auto chose metis" in default["partition_reason"]
    assert even["partition"] == "even" and even["partition_reason"] == ""
    assert (default["nnz_out"], default["checksum_sum"]) == (even["nnz_out"], even["checksum_sum"])
    assert default["bytes_moved"] == default["predicted_bytes"] < 0.1 * even["bytes_moved"]
    summa = command_json(command, "spgemm", "delaunay_n16", *args, "--algorithm", "summa", "--check")
    assert summa["partition"] == "even" and "summa runs on it" in summa["partition_reason"] and summa["check_passed"]
    assert (summa["nnz_out"], summa["checksum_sum"]) == (even["nnz_out"], even["checksum_sum"])
