"""SpGEMM through the command line and the public API under ``mpiexec -n P`` (a job each, as users run them); the
algorithms' collective cases are in tests/mpi/test_spgemm.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from conftest import SHARED_MATRICES, run_mpi

NAMED = ["plus_times", "min_plus", "max_plus", "max_times", "min_times", "plus_min", "lor_land", "plus_pair", "any_pair"]

pytestmark = pytest.mark.mpi  # every test here starts mpiexec


def command_json(ranks, command, *args, timeout=240, expect=0):
    completed = run_mpi(ranks, ["-m", "sparsewire", command, *args, "--json"], timeout=timeout)
    assert completed.returncode == expect, completed.stdout + completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, completed.stdout  # exactly one JSON object, from rank 0
    return json.loads(lines[0])


@pytest.mark.parametrize("ranks", [3, 4])
@pytest.mark.parametrize("algorithm", ["summa", "1d", "auto"])
def test_cli_spgemm_fields_and_check(ranks, algorithm):
    report = command_json(
        ranks, "spgemm", "rmat:9:6:2", "--algorithm", algorithm, "--values", "random:5", "--check", "--repeat", "1"
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


def test_cli_spgemm_semirings_phases_and_a_second_matrix(tmp_path, rng):
    a = sp.random_array((30, 20), density=0.15, rng=rng, format="coo")
    b = sp.random_array((20, 25), density=0.15, rng=rng, format="coo")
    scipy.io.mmwrite(tmp_path / "a.mtx", a)
    scipy.io.mmwrite(tmp_path / "b.mtx", b)
    checksums = {}
    for semiring in NAMED + ["plus.minus"]:
        report = command_json(
            3,
            "spgemm",
            str(tmp_path / "a.mtx"),
            str(tmp_path / "b.mtx"),
            "--semiring",
            semiring,
            "--values",
            "random:2",
            "--algorithm",
            "summa",
            "--grid",
            "1x3",
            "--phases",
            "2",
            "--check",
            "--repeat",
            "1",
        )
        assert report["check_passed"] and report["shape"] == [30, 25], semiring
        checksums[semiring] = report["checksum_sum"]
    # Booleans count 1 per stored entry, as do pair products summed with any.
    assert checksums["lor_land"] == checksums["any_pair"]


def test_cli_phases_bound_the_held_entries():
    reports = [
        command_json(4, "spgemm", "rmat:10:8:1", "--algorithm", "summa", "--phases", str(phases), "--repeat", "1")
        for phases in (1, 4)
    ]
    assert reports[0]["nnz_out"] == reports[1]["nnz_out"]
    assert reports[0]["checksum_sum"] == reports[1]["checksum_sum"]
    assert reports[1]["peak_held_entries"] < reports[0]["peak_held_entries"]


@pytest.mark.parametrize("ranks", [2, 3])
def test_cli_graph_commands_check_against_scipy(ranks):
    for command in ("bfs", "sssp"):
        report = command_json(ranks, command, "rmat:10:8:4", "--source", "3", "--values", "random:1", "--check")
        assert report["check_passed"] and report["reached"] >= 1, command
    report = command_json(ranks, "triangles", "rmat:10:8:4", "--check")
    assert report["check_passed"] and report["triangles"] == report["reference_triangles"] > 0
    report = command_json(ranks, "reach", "rmat:8:4:4", "--hops", "3", "--check")
    assert report["check_passed"] and report["products"] == 3
    # Vertices spread by METIS: the same answers, in the original labels.
    report = command_json(ranks, "bfs", "rmat:10:8:4", "--source", "3", "--partition", "metis", "--check")
    assert report["check_passed"]
    report = command_json(ranks, "reach", "rmat:8:4:4", "--hops", "2", "--algorithm", "1d", "--partition", "rcm", "--check")
    assert report["check_passed"]


def error_of(ranks, args, timeout=120):
    completed = run_mpi(ranks, ["-m", "sparsewire", *args], timeout=timeout)
    assert completed.returncode == 2, completed.stdout + completed.stderr
    lines = [line for line in completed.stderr.splitlines() if line.startswith("sparsewire: error:")]
    assert len(lines) == 1, completed.stderr  # one line, from rank 0 only
    return lines[0]


def test_cli_spgemm_bad_input(tmp_path):
    assert "unknown semiring" in error_of(2, ["spgemm", "rmat:6:4", "--semiring", "avg_times"])
    assert "product is the number of ranks" in error_of(3, ["spgemm", "rmat:6:4", "--grid", "2x2"])
    assert "random:SEED" in error_of(2, ["spgemm", "rmat:6:4", "--values", "gauss"])
    assert "give a topology" in error_of(2, ["bfs", "rmat:6:4", "--partition", "metis-hier"])
    scipy.io.mmwrite(tmp_path / "a.mtx", sp.random_array((6, 5), density=0.5, format="coo", rng=1))
    assert "A's columns must equal B's rows" in error_of(2, ["spgemm", str(tmp_path / "a.mtx"), str(tmp_path / "a.mtx")])
    nan = sp.coo_array((np.array([1.0, np.nan]), ([0, 1], [1, 0])), shape=(2, 2))
    scipy.io.mmwrite(tmp_path / "nan.mtx", nan)
    assert "NaN" in error_of(2, ["spgemm", str(tmp_path / "nan.mtx")])
    negative = sp.coo_array((np.array([1.0, -2.0]), ([0, 1], [1, 0])), shape=(2, 2))
    scipy.io.mmwrite(tmp_path / "negative.mtx", negative)
    assert "negative weights" in error_of(2, ["sssp", str(tmp_path / "negative.mtx")])
    assert "is not a vertex" in error_of(2, ["bfs", "rmat:6:4", "--source", "64"])
    assert "square" in error_of(2, ["triangles", str(tmp_path / "a.mtx")])


#: The shared matrices the graph commands run on in the suite: the three quickest of a directed citation graph, a
#: mesh and a road network (every matrix: the same test with SPARSEWIRE_ALL_MATRICES=1, about 2 minutes more).
GRAPH_MATRICES = [
    path
    for path in SHARED_MATRICES
    if os.environ.get("SPARSEWIRE_ALL_MATRICES") or path.name.split(".")[0] in ("cit-HepTh", "delaunay_n16", "luxembourg_osm")
]


@pytest.mark.skipif(not GRAPH_MATRICES, reason="../shared/data is not present")
@pytest.mark.parametrize("path", GRAPH_MATRICES, ids=lambda p: p.name.split(".")[0])
def test_shared_matrices_graph_algorithms_match_references(path):
    """BFS, SSSP (random integer weights) and triangle counts on shared matrices, 4 ranks."""
    matrix = str(path)
    for command in ("bfs", "sssp"):
        report = command_json(4, command, matrix, "--source", "1", "--values", "random:1", "--check", timeout=600)
        assert report["check_passed"], (path.name, command)
    report = command_json(4, "triangles", matrix, "--check", timeout=600)
    assert report["check_passed"], path.name


API_AND_CLI_CASES = [
    ("rmat:8:6:3", None, ["--algorithm", "summa", "--stages-per-product", "1"]),
    ("rmat:8:6:3", None, ["--algorithm", "1d", "--strategy", "joint", "--overlap", "--partition", "metis"]),
    ("delaunay:300:2", None, ["--algorithm", "auto", "--phases", "2", "--semiring", "min_plus", "--partition", "rcm"]),
    ("a.mtx", "b.mtx", ["--algorithm", "summa", "--grid", "1xP", "--semiring", "max_times"]),
    ("a.mtx", "b.mtx", ["--algorithm", "1d", "--strategy", "row", "--partition", "nnz"]),
    ("a.mtx", "b.mtx", ["--algorithm", "auto", "--partition", "rcm"]),  # B's rows follow A's reordered columns
]


@pytest.mark.parametrize("ranks", [3, 4])  # (P = 1: every semiring, algorithm and grid above)
def test_cli_spgemm_and_the_library_give_the_same_c_and_bytes(tmp_path, rng, ranks):
    """``sparsewire spgemm`` and ``DistributedMatrix.spgemm`` / ``plan_spgemm`` with the same
    options: the same C entry for entry (integer values: exact) and the same bytes delivered."""
    scipy.io.mmwrite(tmp_path / "a.mtx", sp.random_array((41, 29), density=0.12, rng=rng, format="coo"))
    scipy.io.mmwrite(tmp_path / "b.mtx", sp.random_array((29, 37), density=0.12, rng=rng, format="coo"))
    for number, (first, second, options) in enumerate(API_AND_CLI_CASES):
        operands = [str(tmp_path / name) if name and name.endswith(".mtx") else name for name in (first, second) if name]
        options = [option.replace("P", str(ranks)) if option == "1xP" else option for option in options]
        options += ["--values", "random:7"]
        cli_c, api_c = tmp_path / f"cli{number}.npz", tmp_path / f"api{number}.npz"
        report = command_json(ranks, "spgemm", *operands, *options, "--repeat", "1", "--output", str(cli_c))
        completed = run_mpi(ranks, ["tests/spgemm/spgemm_api_driver.py", str(api_c), *operands, *options], timeout=240)
        assert completed.returncode == 0, completed.stdout + completed.stderr
        library = json.loads(completed.stdout.strip().splitlines()[-1])
        label = f"{first} {options}"
        assert library["algorithm"] == report["algorithm"], label
        assert library["bytes_moved"] == report["bytes_moved"] == report["predicted_bytes"], label
        ours, theirs = sp.load_npz(cli_c), sp.load_npz(api_c)
        assert ours.shape == theirs.shape and ours.nnz == theirs.nnz == report["nnz_out"] > 0, label
        assert abs(ours - theirs).max() == 0, label
        assert float(ours.sum()) == report["checksum_sum"], label
