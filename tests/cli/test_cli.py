"""The command line: analyze's JSON contract and volumes, help, and one-line errors."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import CHILD_ENV, ROOT, SHARED_MATRICES, run_cli
from oracles import formula_volumes, inter_group_formulas
from sparsewire.io.readers import load_matrix as _load_matrix
from sparsewire.partition import partition


@functools.cache
def load_matrix(spec: str):
    """The matrix ``spec``, read once per session (the shared matrices serve several tests; none changes it)."""
    return _load_matrix(spec)


#: Every command line given to :func:`analysis` so far, with its finished process once it ran.
_ANALYSES: dict[tuple[str, ...], subprocess.CompletedProcess | None] = {}
_ANALYSES_LOCK = threading.Lock()

#: Runs each command line of the JSON list in ``argv[1]`` through the command line's own entry, in this one process,
#: and prints ``[status, stdout, stderr]`` of each as the last line.
ANALYSES_IN_ONE_PROCESS = """
import contextlib, io, json, sys
from sparsewire.cli import main
results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    results.append([status, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def analysis(matrix: str, ranks: int, *extra: str):
    """The ``prefetch`` command of ``sparsewire analyze MATRIX --ranks RANKS --json EXTRA``: a function that returns
    its finished process. The first call runs every analysis asked for by then, in one process of its own (one
    interpreter's start-up for all of them, not one each)."""
    key = ("analyze", matrix, "--ranks", str(ranks), "--json", *extra)
    with _ANALYSES_LOCK:
        _ANALYSES.setdefault(key, None)

    def finished() -> subprocess.CompletedProcess:
        with _ANALYSES_LOCK:
            pending = [args for args, done in _ANALYSES.items() if done is None]
            if pending:
                command = [sys.executable, "-c", ANALYSES_IN_ONE_PROCESS, json.dumps(pending)]
                batch = subprocess.run(command, capture_output=True, text=True, timeout=900, env=CHILD_ENV, cwd=ROOT)
                assert batch.returncode == 0, batch.stderr[-3000:]
                results = json.loads(batch.stdout.strip().splitlines()[-1])
                _ANALYSES.update({args: subprocess.CompletedProcess(args, *result) for args, result in zip(pending, results)})
            return _ANALYSES[key]

    return finished


def report_of(completed: subprocess.CompletedProcess) -> dict:
    """``analyze --json``'s report: exactly one JSON object on standard output."""
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, "analyze --json must print exactly one JSON object"
    return json.loads(lines[0])


def analyze_json(matrix: str, ranks: int, *extra: str) -> dict:
    """``sparsewire analyze ... --json``'s report, run in this process."""
    return report_of(run_cli(["analyze", matrix, "--ranks", str(ranks), "--json", *extra]))


def expected_volumes(spec: str, ranks: int, k: int, element_bytes: int, method: str = "even") -> dict[str, int]:
    """Every strategy's bytes by the papers' formulas (tests/oracles.py)."""
    matrix = load_matrix(spec)
    rows, cols = partition(matrix, ranks, method).partitions
    return formula_volumes(matrix, rows, cols, k, element_bytes)


def assert_matches_formulas(report: dict, spec: str, ranks: int, k: int, element_bytes: int, method: str = "even", expected=None):
    matrix = load_matrix(spec)
    expected = expected if expected is not None else expected_volumes(spec, ranks, k, element_bytes, method)
    got = {entry["name"]: entry["total_bytes"] for entry in report["strategies"]}
    assert got == expected
    assert report["matrix"]["n_rows"] == matrix.shape[0] and report["matrix"]["nnz"] == matrix.nnz


def test_analyze_json_contract():
    report = analyze_json("uniform:300x200:4:3", 5, "--k", "7", "--dtype", "float64", "--partition", "nnz")
    assert set(report) == {"matrix", "ranks", "k", "element_bytes", "partition", "partition_reason", "strategies"}
    assert set(report["matrix"]) == {"path", "n_rows", "n_cols", "nnz"}
    assert (report["ranks"], report["k"], report["element_bytes"], report["partition"]) == (5, 7, 8, "nnz")
    assert [e["name"] for e in report["strategies"]] == ["block", "rowwise", "column", "row", "joint"]
    for entry in report["strategies"]:
        assert set(entry) == {
            "name",
            "total_bytes",
            "messages",
            "max_rank_send_bytes",
            "max_rank_recv_bytes",
            "setup_bytes",
            "plan_seconds",
        }
    assert_matches_formulas(report, "uniform:300x200:4:3", 5, 7, 8, "nnz")


#: Each shared matrix at one of 8 and 32 ranks, in turn: both counts are met, each matrix once (the analyses run on
#: the second core, which the fast tier keeps busy already).
SHARED_AT_RANKS = [(path, (8, 32)[i % 2]) for i, path in enumerate(SHARED_MATRICES)]


@pytest.mark.prefetch(lambda path, ranks: analysis(str(path), ranks))
@pytest.mark.parametrize("path, ranks", SHARED_AT_RANKS, ids=lambda value: getattr(value, "name", str(value)))
def test_analyze_volumes_equal_formulas_on_shared_data(path, ranks, prefetched):
    expected = expected_volumes(str(path), ranks, 32, 4)
    report = report_of(prefetched)
    assert (report["k"], report["element_bytes"]) == (32, 4)
    assert_matches_formulas(report, str(path), ranks, 32, 4, expected=expected)


def test_analyze_with_topology_adds_link_classes_to_every_strategy():
    report = analyze_json("rmat:9:8:2", 6, "--group-size", "4", "--k", "3")  # groups {0..3} {4, 5}
    assert report["topology"]["name"] == "nodes:4" and report["topology"]["groups"] == 2
    names = [e["name"] for e in report["strategies"]]
    assert names == ["block", "rowwise", "column", "row", "joint", "column-hier", "joint-hier", "joint-group"]
    for entry in report["strategies"]:
        assert entry["intra_group_bytes"] + entry["inter_group_bytes"] == entry["total_bytes"]
        assert entry["intra_group_messages"] + entry["inter_group_messages"] == entry["messages"]
        assert entry["predicted_seconds"] > 0
    by_name = {e["name"]: e for e in report["strategies"]}
    assert by_name["joint-group"]["inter_group_bytes"] <= by_name["joint-hier"]["inter_group_bytes"]
    assert by_name["joint-group"]["inter_group_bytes"] <= by_name["column-hier"]["inter_group_bytes"]
    preset = analyze_json("rmat:9:8:2", 16, "--topology", "shiro-h100", "--strategies", "column-hier")
    assert preset["topology"]["name"] == "shiro-h100" and preset["topology"]["groups"] == 4


#: The two-level analysis of the shared matrices: 16 ranks in groups of 4.
INTER_GROUP = ("--group-size", "4", "--strategies", "column-hier,joint-hier,joint-group")


@pytest.mark.skipif(not SHARED_MATRICES, reason="../shared/data is not present")
@pytest.mark.prefetch(lambda path: analysis(str(path), 16, *INTER_GROUP))
@pytest.mark.parametrize("path", SHARED_MATRICES, ids=lambda p: p.name)
def test_analyze_inter_group_bytes_equal_formulas_on_shared_data(path, prefetched):
    matrix = load_matrix(str(path))
    rows, cols = partition(matrix, 16, "even").partitions
    expected = inter_group_formulas(matrix, rows, cols, np.arange(16) // 4, 32, 4)
    report = report_of(prefetched)
    got = {e["name"]: e["inter_group_bytes"] for e in report["strategies"]}
    assert got["column-hier"] == expected["column-hier"] and got["joint-group"] == expected["joint-group"]
    assert got["joint-group"] <= min(got["joint-hier"], got["column-hier"])


def test_analyze_table_and_strategy_subset():
    completed = run_cli(["analyze", "stencil2d:30", "--ranks", "3", "--strategies", "joint,column"])
    assert completed.returncode == 0, completed.stderr
    assert "joint" in completed.stdout and "column" in completed.stdout and "rowwise" not in completed.stdout
    assert "vs block" in completed.stdout


def test_help_explains_commands():
    for args in (["--help"], ["analyze", "--help"], ["spmm", "--help"]):
        completed = run_cli(args)
        assert completed.returncode == 0 and "usage:" in completed.stdout
    assert "rmat:SCALE" in run_cli(["analyze", "--help"]).stdout


def write(tmp_path, text, name="bad.mtx"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing", "no such file"),
        ("header", "line 1: symmetry 'generl' is not supported"),
        ("fields", "fields, expected 3"),
        ("range", "out of bounds"),
        ("strategy", "unknown strategy 'fastest'"),
        ("k", "argument --k: must be from 1 to 2147483647 (got 0)"),
        ("ranks", "argument --ranks/-P: must be from 1 to 2147483647 (got 0)"),
        ("hierarchical without topology", "needs a topology; add --group-size G or --topology PRESET"),
        ("unknown topology", "unknown topology 'ring'"),
        ("both topologies", "not allowed with argument"),
        ("mpi topology in analyze", "--topology mpi needs MPI"),
    ],
)
def test_bad_input_gives_one_clear_line(tmp_path, case, needle):
    good = write(tmp_path, "%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n", "good.mtx")
    args = {
        "missing": [str(tmp_path / "absent.mtx"), "--ranks", "2"],
        "header": [write(tmp_path, "%%MatrixMarket matrix coordinate real generl\n2 2 1\n1 1 1\n", "h.mtx"), "--ranks", "2"],
        "fields": [
            write(tmp_path, "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1\n2 2 1\n", "f.mtx"),
            "--ranks",
            "2",
        ],
        "range": [write(tmp_path, "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1\n", "r.mtx"), "--ranks", "2"],
        "strategy": [good, "--ranks", "2", "--strategies", "joint,fastest"],
        "k": [good, "--ranks", "2", "--k", "0"],
        "ranks": [good, "--ranks", "0"],
        "hierarchical without topology": [good, "--ranks", "2", "--strategies", "joint-group"],
        "unknown topology": [good, "--ranks", "2", "--topology", "ring"],
        "both topologies": [good, "--ranks", "2", "--topology", "flat", "--group-size", "2"],
        "mpi topology in analyze": [good, "--ranks", "2", "--topology", "mpi"],
    }[case]
    completed = run_cli(["analyze", *args])
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("sparsewire: error:") and needle in lines[0]
    assert "Traceback" not in completed.stderr and completed.stdout == ""


def test_nan_with_check_is_an_error_without_mpiexec(tmp_path):
    path = write(tmp_path, "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 nan\n2 2 1\n")
    completed = run_cli(["spmm", path, "--check"])
    assert completed.returncode == 2 and "NaN" in completed.stderr and "Traceback" not in completed.stderr


def test_spmm_runs_as_a_single_process():
    completed = run_cli(["spmm", "delaunay:500:3", "--check", "--json", "--repeat", "2", "--k", "3"])
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["ranks"] == 1 and report["planned_bytes"] == report["measured_bytes"] == 0
    assert report["max_abs_error"] <= 1e-9
    assert np.isfinite(report["checksum_fro"])
    # the time to the first C: planning, then a first multiply (timed apart from the warm-up and the timed ones)
    assert report["first_product_seconds"] > report["plan_seconds"] > 0


def test_spmm_rounds_time_every_run_in_each_turn():
    args = ["spmm", "rmat:7:4:1", "--strategy", "column,joint", "--mode", "bulk,early", "--k", "2", "--check", "--json"]
    report = json.loads(run_cli([*args, "--repeat", "3", "--rounds", "2"]).stdout)
    assert [(r["timed_multiplies"], r["rounds"], r["check_passed"]) for r in report["runs"]] == [(6, 2, True)] * 4
    given = [("column", "bulk"), ("column", "early"), ("joint", "bulk"), ("joint", "early")]
    assert [(r["strategy"], r["mode"]) for r in report["runs"]] == given
    for run in report["runs"]:  # every timed multiply, in turn order: the medians and minima come from them
        samples = run["multiply_seconds"]
        assert len(samples) == 6 and min(samples) > 0
        assert (np.median(samples), min(samples)) == (run["median_seconds"], run["min_seconds"])
    # the runs take turns in the given order, then reversed (each follows its neighbours as often as they follow it),
    # and are reported in the given order
    shown = run_cli(["spmm", "rmat:7:4:1", "--strategy", "column,joint,row", "--mode", "bulk", "--k", "2", "--rounds", "3"])
    turns = re.findall(r"round (\d) of 3: running (\w+)/bulk", shown.stderr)
    assert turns == [("2", "row"), ("2", "joint"), ("2", "column"), ("3", "column"), ("3", "joint"), ("3", "row")], shown.stderr
    refused = run_cli(["spmm", "rmat:7:4:1", "--rounds", "2", "--log-view"])
    assert refused.returncode == 2 and "trace with --rounds 1" in refused.stderr and "Traceback" not in refused.stderr


def test_auto_beside_named_strategies_is_timed_in_turns_with_them():
    args = ["spmm", "stencil2d:12", "--strategy", "joint, auto,column", "--k", "3", "--check", "--json", "--rounds", "2"]
    report = json.loads(run_cli([*args, "--repeat", "2"]).stdout)
    runs = [(r["strategy_requested"], r["timed_multiplies"], r["check_passed"]) for r in report["runs"]]
    assert runs == [("auto", 4, True), ("joint", 4, True), ("column", 4, True)]
    assert report["runs"][0]["strategy"] in {"block", "column", "row", "joint"}
    for blank in ("", " , "):
        refused = run_cli(["spmm", "stencil2d:12", "--strategy", blank])
        assert refused.returncode == 2 and "no strategy given" in refused.stderr, refused.stderr


def test_json_with_nan_results_is_strict_json_with_a_warning(tmp_path):
    """C holds NaN when A does: the report says null (Python's json would write bare NaN tokens,
    which JSON parsers reject) and a warning line says so."""
    path = tmp_path / "nan.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 nan\n3 1 2.0\n")
    completed = run_cli(["spmm", str(path), "--json", "--k", "2", "--repeat", "1"])
    assert completed.returncode == 0, completed.stderr

    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    report = json.loads(completed.stdout, parse_constant=refuse)
    assert report["checksum_sum"] is None and report["checksum_fro"] is None
    assert "2 numbers in the JSON are NaN or infinite; written as null" in completed.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["advise", "stencil2d:20", "--ranks", "2", "--plot", "/nonexistent-dir/advice.png"],
            "the directory /nonexistent-dir does not exist",
        ),
        (["advise", "stencil2d:20", "--ranks", "2", "--plot", "{tmp}"], "is a directory; give a file path"),
        (
            ["netsparse", "rmat:8:4:1", "--nodes", "4", "--rack", "2", "--compare-plans", "--plot", "/nonexistent-dir/x.png"],
            "the directory /nonexistent-dir does not exist",
        ),
        (["calibrate", "--output", "/nonexistent-dir/rate.json"], "the directory /nonexistent-dir does not exist"),
    ],
)
def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(tmp_path, args, expected):
    """It was a traceback after the whole run."""
    completed = run_cli([arg.replace("{tmp}", str(tmp_path)) for arg in args])
    assert completed.returncode == 2 and completed.stderr.count("sparsewire: error:") == 1, completed.stderr
    assert expected in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize("command", ["bfs", "sssp"])
def test_graph_commands_on_an_empty_graph_say_so(tmp_path, command):
    path = tmp_path / "empty.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n0 0 0\n")
    completed = run_cli([command, str(path)])
    assert completed.returncode == 2 and "the graph has no vertices (a 0 x 0 matrix)" in completed.stderr, completed.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["gcn", "--lr", "inf"], "argument --lr: must be a finite number (got 'inf')"),
        (["gcn", "--lr", "0"], "argument --lr: must be greater than 0 (got 0)"),
        (["gcn", "--weight-decay", "nan"], "argument --weight-decay: must be a finite number (got 'nan')"),
        (["gcn", "--dropout", "1"], "argument --dropout: must be less than 1 (got 1)"),
        (["eigs", "stencil2d:8", "--tol", "inf"], "argument --tol: must be a finite number (got 'inf')"),
        (["eigs", "stencil2d:8", "--tol=-1e-8"], "argument --tol: must be greater than 0 (got -1e-8)"),
        (["analyze", "stencil2d:8", "--ranks", "2", "--imbalance", "abc"], "argument --imbalance: expected a number (got 'abc')"),
        (["spmm", "stencil2d:8", "--wait-timeout=-5"], "argument --wait-timeout: must be at least 1 (got -5)"),
        (["spmm", "stencil2d:8", "--wait-timeout", "1e-6"], "argument --wait-timeout: must be at least 1 (got 1e-6)"),
        (["emulate", "--delay-us", "nan", "--", "true"], "argument --delay-us: must be a finite number (got 'nan')"),
        (["netsparse", "rmat:8:4:1", "--cache-mb=-2"], "argument --cache-mb: must be at least -1 (got -2)"),
        (["netsparse", "rmat:8:4:1", "--cache-mb", "1e308"], "argument --cache-mb: must be less than 8.79609e+12 (got 1e308)"),
        (["gcn", "--seed=-1"], "argument --seed: must be from 0 to 2**63 - 1 (got -1)"),
        (["gcn", "--seed", str(2**64)], f"argument --seed: must be from 0 to 2**63 - 1 (got {2**64})"),
    ],
)
def test_numbers_outside_their_domain_are_one_error_line(args, expected):
    """They ran and exited 0 (``--lr inf``, ``--weight-decay nan``, ``eigs --tol inf``)."""
    completed = run_cli(args)
    assert completed.returncode == 2 and completed.stderr.count("sparsewire: error:") == 1, completed.stderr
    assert expected in completed.stderr and "Traceback" not in completed.stderr, completed.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["analyze", "stencil2d:8", "--ranks", "300000000"], "--ranks 300000000: planning 300000000 ranks in one process needs"),
        (["advise", "stencil2d:8", "--ranks", "300000000"], "--ranks 300000000: planning 300000000 ranks in one process needs"),
        (["simulate", "stencil2d:8", "-P", "300000000", "--topology", "fat-tree:4"], "--ranks 300000000: planning"),
        (["spmm", "stencil2d:8", "--k", "2147483647"], "--k 2147483647: B and C (128 rows x 2147483647 columns) needs"),
        (["spmm", "uniform:10x900000000000:1", "--k", "2"], "--k 2: B and C (900000000010 rows x 2 columns) needs"),
        (["eigs", "stencil2d:8", "--block", "2147483647"], "--block 2147483647 --steps 8: a Krylov basis"),
        (["gcn", "stencil2d:8", "--features", "random:2147483647", "--classes", "3"], "--features random:2147483647 for 64"),
        (["gcn", "stencil2d:8", "--features", "random:4", "--classes", "3", "--hidden", "2147483647"], "--hidden 2147483647"),
        (["gcn", "stencil2d:8", "--features", "random:4", "--classes", "2147483647"], "with 2147483647 classes needs"),
        (["analyze", "stencil2d:8", "--ranks", "4", "--k", str(10**21)], "argument --k: must be from 1 to 2147483647"),
        (["spgemm", "stencil2d:8", "--phases", "65"], "--phases 65: give 1 to 64 (B has 64 columns)"),
    ],
)
def test_sizes_the_arguments_imply_are_refused_before_allocating(args, expected):
    """Each was a MemoryError traceback (745 GiB, 224 GiB), a process killed for memory (gcn
    --hidden 10^9, analyze --ranks 300000: 23 GB) or, for --phases, thousands of empty rounds."""
    completed = run_cli(args)
    assert completed.returncode == 2 and completed.stderr.count("sparsewire: error:") == 1, completed.stderr
    assert expected in completed.stderr and "Traceback" not in completed.stderr, completed.stderr
    assert "use a smaller" in completed.stderr or "give 1 to" in completed.stderr or "must be from" in completed.stderr


@pytest.mark.parametrize(
    "args, expected, misleading",
    [
        (["eigs", "rmat:6:4:1"], "A and A^T differ in", "--symmetrize"),  # a generator: the flag does nothing there
        (["spmm", "stencil2d:4", "--symmetrize"], "--symmetrize (symmetrize=True) applies to edge lists", "Traceback"),
        (
            ["gcn", "stencil2d:4", "--features", "random:3", "--classes", "2", "--strategy", "joint-group"],
            "add --group-size G or --topology PRESET",
            "Topology.nodes",
        ),
        (["spgemm", "stencil2d:4", "--semiring", "times.div"], "(try minus, first, truediv, pow)", "first, div)"),
        (["spgemm", "stencil2d:4", "--semiring", "plus.lt"], "the plus monoid cannot add", "KeyError"),
        (["spgemm", "stencil2d:4", "--values", "random:-1"], "the seed must be from 0 to 2**63 - 1", "ValueError"),
        (["spmm", "stencil2d:4", "--transfer-calibration", "MATRIX"], "--output NEW.json", "--output MATRIX"),
        (["advise", "stencil2d:4", "-P", "2", "--plot", "PLOT.xyz"], "the extension .xyz is not an image format", "Traceback"),
        (["advise", "stencil2d:4", "-P", "2", "--plot", "PLOT"], "plot: no extension; end the name in .png", "written"),
        (["spmm", "stencil2d:4", "--trace", "MATRIX"], "is a file; give a folder (it is made when missing)", "Traceback"),
    ],
)
def test_hints_name_only_what_exists_and_never_overwrite_an_input(tmp_path, args, expected, misleading):
    """Each hint misled before: --symmetrize offered where it does nothing, Topology.nodes(2) printed on
    the command line, the refused operator offered back (div), a calibration command writing over the
    user's matrix, a --plot without an extension written elsewhere (``.png`` added); and three
    tracebacks (plus.lt, a negative --values seed, a --plot extension matplotlib cannot write)."""
    matrix = tmp_path / "a.mtx"
    matrix.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.0\n")
    args = [str(matrix) if a == "MATRIX" else a.replace("PLOT", str(tmp_path / "plot")) for a in args]
    completed = run_cli(args)
    assert completed.returncode == 2 and completed.stderr.count("sparsewire: error:") == 1, completed.stderr
    assert expected in completed.stderr, completed.stderr
    assert misleading.replace("MATRIX", str(matrix)) not in completed.stderr, completed.stderr
    assert matrix.read_text().startswith("%%MatrixMarket") and not list(tmp_path.glob("plot*"))


@pytest.mark.parametrize(
    "args",
    [
        ["eigs", "uniform:6:0", "--check", "--nev", "2"],  # ARPACK cannot start on a zero matrix: the reference is 0
        ["advise", "EMPTY", "--ranks", "2", "--partitions", "rcm,even"],  # SciPy's RCM fails on a 0 x 0 graph
        ["analyze", "EMPTY", "--ranks", "3", "--partition", "rcm"],
        ["advise", "uniform:6:0", "--ranks", "4", "--json"],  # METIS printed "Cannot bisect" into the JSON
        ["analyze", "stencil3d:3", "--ranks", "30", "--partition", "metis", "--json"],  # and "too many parts"
        ["analyze", "uniform:6:0", "--ranks", "4", "--partition", "metis-hier", "-G", "2", "--json"],
        ["spmm", "stencil2d:4", "--traffic-map", "OUT/map.png", "--plot", "OUT/timeline.png"],  # one rank: no messages
        ["reach", "stencil2d:4", "--hops", "2147483648", "--check"],  # the reference made 2**31 products
    ],
)
def test_what_the_argument_fuzzer_found_runs(tmp_path, args):
    empty = tmp_path / "empty.mtx"
    empty.write_text("%%MatrixMarket matrix coordinate real general\n0 0 0\n")
    completed = run_cli([str(empty) if a == "EMPTY" else a.replace("OUT", str(tmp_path)) for a in args])
    assert completed.returncode == 0 and "Traceback" not in completed.stderr, completed.stderr[-3000:]
    for picture in (a.replace("OUT", str(tmp_path)) for a in args if a.startswith("OUT")):
        assert open(picture, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    if "--json" in args:
        assert completed.stdout.count("\n") == 1 and isinstance(json.loads(completed.stdout), dict), completed.stdout[:300]


def test_a_closed_stdout_ends_the_command_quietly():
    """``sparsewire ... | head -1`` ended in a BrokenPipeError traceback; now exit status 141, as a
    shell tool killed by SIGPIPE, and nothing on stderr but the progress lines."""
    command = [sys.executable, "-m", "sparsewire", "analyze", "stencil2d:12", "--ranks", "4"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=CHILD_ENV, cwd=ROOT)
    process.stdout.close()  # before the command writes anything: its first write meets a closed pipe
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 141 and b"Traceback" not in errors and b"Error" not in errors, errors.decode()


def test_spgemm_output_is_written_to_exactly_the_path_given(tmp_path):
    """``--output c.txt`` wrote ``c.txt.npz`` without saying so."""
    import scipy.sparse as sp

    from sparsewire.io.readers import load_matrix

    target = tmp_path / "c.txt"
    completed = run_cli(["spgemm", "stencil2d:6", "--output", str(target)])
    assert completed.returncode == 0, completed.stderr
    assert target.exists() and not (tmp_path / "c.txt.npz").exists()
    a = load_matrix("stencil2d:6")
    np.testing.assert_array_equal(sp.load_npz(target).toarray(), (a @ a).toarray())


def test_run_cli_never_empties_the_environment_another_thread_reads():
    """run_cli puts the environment back after a command while the prefetch thread reads it (a job's variables, the
    session seed): no variable the command left alone may vanish meanwhile, even for a moment."""
    import os
    import threading

    watched, missing, done = ("PATH", "SPARSEWIRE_TEST_SEED"), [], threading.Event()

    def watch():
        while not done.is_set():
            missing.extend(name for name in watched if name not in os.environ)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: a short window shows
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(20):
            assert run_cli(["--version"]).returncode == 0
    finally:
        done.set()
        watcher.join()
        sys.setswitchinterval(interval)
    assert not missing, f"another thread saw {sorted(set(missing))} missing while run_cli ran"
