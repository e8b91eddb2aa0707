"""The executor through the command line under ``mpiexec -n P`` (a job each, as users run it), and the
partitioned fallback's one warning per job; the executor's collective cases are in tests/mpi/test_executor.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from conftest import SHARED_MATRICES, _seed, run_mpi

pytestmark = pytest.mark.mpi  # every test here starts mpiexec


def test_partitioned_fallback_to_point_to_point():
    completed = run_mpi(3, ["tests/exec/mpi_driver.py", str(_seed()), "2", "mpi-p2p-partitions"], timeout=400)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    # A library user (the driver) sees Python's own warning, once for the job.
    notices = [line.split(": ", 1)[1] for line in completed.stderr.splitlines() if "FallbackWarning" in line]
    assert notices == [
        "FallbackWarning: MPI partitioned communication is not available; the partitioned mode runs on "
        "persistent point-to-point requests, one per partition"
    ]


def spmm_json(ranks, matrix, *extra, timeout=240):
    completed = run_mpi(ranks, ["-m", "sparsewire", "spmm", matrix, "--json", *extra], timeout=timeout)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, completed.stdout  # exactly one JSON object, from rank 0
    return json.loads(lines[0])


@pytest.mark.parametrize("ranks", [3, 4])
def test_cli_spmm_all_strategies_and_modes(ranks):
    report = spmm_json(ranks, "rmat:10:8:5", "--strategy", "all", "--mode", "all", "--check", "--repeat", "2", "--k", "8")
    assert report["ranks"] == ranks and len(report["runs"]) == 4 * 5
    checksums = {round(run["checksum_sum"], 9) for run in report["runs"]}
    assert len(checksums) == 1  # every strategy and mode computes the same C
    for run in report["runs"]:
        assert run["max_abs_error"] <= 1e-9
        assert run["measured_bytes"] == run["planned_bytes"]


def test_cli_spmm_rounds_take_turns():
    # Every plan made first, then the runs take turns: each run's median over rounds x repeat multiplies, C and
    # bytes as in one round.
    args = ["rmat:9:8:2", "--strategy", "joint,column-hier", "-G", "2", "--mode", "overlap,early", "--k", "4", "--check"]
    once = spmm_json(3, *args, "--repeat", "2")
    turns = spmm_json(3, *args, "--repeat", "2", "--rounds", "3")
    assert [(r["strategy"], r["mode"]) for r in turns["runs"]] == [(r["strategy"], r["mode"]) for r in once["runs"]]
    for first, run in zip(once["runs"], turns["runs"]):
        assert (first["timed_multiplies"], first["rounds"], run["timed_multiplies"], run["rounds"]) == (2, 1, 6, 3)
        assert run["check_passed"] and run["max_abs_error"] == first["max_abs_error"] == 0.0
        assert run["measured_bytes"] == run["planned_bytes"] == first["planned_bytes"]
        assert run["checksum_sum"] == first["checksum_sum"]
    completed = run_mpi(3, ["-m", "sparsewire", "spmm", *args, "--repeat", "1", "--rounds", "2"], timeout=240)
    assert completed.returncode == 0, completed.stderr
    lines = [line for line in completed.stderr.splitlines() if "running" in line]
    runs = ["joint/overlap", "joint/early", "column-hier/overlap", "column-hier/early"]
    assert lines == [f"planning and running {run}" for run in runs] + [f"round 2 of 2: running {run}" for run in runs]
    assert "2 timed multiplies in 2 rounds" in completed.stdout
    traced = run_mpi(2, ["-m", "sparsewire", "spmm", "rmat:6:4:1", "--rounds", "2", "--log-view"], timeout=120)
    assert traced.returncode != 0 and "trace with --rounds 1" in traced.stderr


HIERARCHICAL = "column-hier,joint-hier,joint-group"


def assert_hierarchical_runs(report, n_runs):
    assert len(report["runs"]) == n_runs
    for run in report["runs"]:
        label = f"{run['strategy']}/{run['mode']}"
        assert run["max_abs_error"] <= 1e-9, label
        assert run["measured_bytes"] == run["planned_bytes"], label
        assert run["measured_intra_group_bytes"] == run["intra_group_bytes"], label
        assert run["measured_inter_group_bytes"] == run["inter_group_bytes"], label
        assert run["intra_group_bytes"] + run["inter_group_bytes"] == run["planned_bytes"], label
    by_strategy = {run["strategy"]: run["inter_group_bytes"] for run in report["runs"]}
    assert by_strategy["joint-group"] <= min(by_strategy["joint-hier"], by_strategy["column-hier"])


@pytest.mark.parametrize("ranks, group_size, proxy", [(4, 2, "local"), (4, 2, "balanced"), (3, 3, "local"), (4, 3, "balanced")])
def test_cli_spmm_hierarchical_strategies_every_mode(ranks, group_size, proxy):
    report = spmm_json(
        ranks,
        "rmat:10:8:3",
        "--group-size",
        str(group_size),
        "--proxy",
        proxy,
        "--strategy",
        HIERARCHICAL,
        "--mode",
        "all",
        "--check",
        "--repeat",
        "2",
        "--k",
        "4",
    )
    assert_hierarchical_runs(report, 3 * 5)
    assert {run["layout"] for run in report["runs"] if run["mode"] == "pipelined"} == {"pipelined"}


def test_cli_spmm_hierarchical_when_groups_need_nothing_from_each_other(tmp_path):
    # Block diagonal over the two groups of --group-size 2 at P = 4 (rows 0-19 and 20-39), plus
    # traffic inside each group: no byte may cross between groups.
    rng = np.random.default_rng(5)
    dense = np.zeros((40, 40))
    for start in (0, 20):
        block = rng.integers(-3, 4, (20, 20)) * (rng.random((20, 20)) < 0.2)
        dense[start : start + 20, start : start + 20] = block
    path = tmp_path / "two_islands.mtx"
    scipy.io.mmwrite(path, sp.coo_array(dense))
    report = spmm_json(
        4, str(path), "--group-size", "2", "--strategy", HIERARCHICAL, "--mode", "all", "--check", "--repeat", "1", "--k", "8"
    )
    assert_hierarchical_runs(report, 3 * 5)
    for run in report["runs"]:
        assert run["inter_group_bytes"] == 0 and run["intra_group_bytes"] > 0


def test_cli_spmm_single_run_fields():
    report = spmm_json(2, "stencil2d:40", "--strategy", "column", "--mode", "bulk", "--k", "1", "--check", "--repeat", "3")
    for key in (
        "ranks",
        "strategy",
        "mode",
        "k",
        "dtype",
        "median_seconds",
        "min_seconds",
        "planned_bytes",
        "measured_bytes",
        "checksum_sum",
        "checksum_fro",
        "max_abs_error",
    ):
        assert key in report
    assert report["strategy"] == "column" and report["mode"] == "bulk" and report["k"] == 1
    # The stencil's column partition boundary: 40 B rows cross each way, 8 bytes each, k = 1.
    assert report["planned_bytes"] == report["measured_bytes"] == 2 * 40 * 8
    assert report["max_abs_error"] <= 1e-9


#: Every shared matrix runs through one of the two tests below (alternating by name), flat or two-level.
FLAT_MATRICES, HIERARCHICAL_MATRICES = SHARED_MATRICES[0::2], SHARED_MATRICES[1::2]


@pytest.mark.skipif(not FLAT_MATRICES, reason="../shared/data is not present")
@pytest.mark.parametrize("path", FLAT_MATRICES, ids=lambda p: p.name)
def test_cli_spmm_on_shared_matrices(path):
    # k = 8: exactness and bytes do not depend on k, the time does.
    report = spmm_json(4, str(path), "--strategy", "all", "--mode", "bulk,overlap", "--check", "--repeat", "1", "--k", "8")
    for run in report["runs"]:
        assert run["max_abs_error"] <= 1e-9 and run["measured_bytes"] == run["planned_bytes"]


@pytest.mark.skipif(not HIERARCHICAL_MATRICES, reason="../shared/data is not present")
@pytest.mark.parametrize("path", HIERARCHICAL_MATRICES, ids=lambda p: p.name)
def test_cli_spmm_hierarchical_on_shared_matrices(path):
    report = spmm_json(
        4, str(path), "--group-size", "2", "--strategy", HIERARCHICAL, "--mode", "all", "--check", "--repeat", "1", "--k", "8"
    )
    assert_hierarchical_runs(report, 3 * 5)


def test_cli_spmm_errors_are_one_line_without_hang(tmp_path):
    missing = run_mpi(3, ["-m", "sparsewire", "spmm", str(tmp_path / "none.mtx")], timeout=60)
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sparsewire: error:") and "no such file" in lines[0]
    nan_file = tmp_path / "nan.mtx"
    nan_file.write_text("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 nan\n2 2 1\n")
    nan = run_mpi(2, ["-m", "sparsewire", "spmm", str(nan_file), "--check"], timeout=60)
    assert nan.returncode == 2 and "NaN" in nan.stderr and "Traceback" not in nan.stderr
    bad_k = run_mpi(3, ["-m", "sparsewire", "spmm", "stencil2d:8", "--k", "0"], timeout=60)
    assert bad_k.returncode == 2 and bad_k.stderr.strip().splitlines() == [
        "sparsewire: error: argument --k: must be from 1 to 2147483647 (got 0); see 'sparsewire spmm --help'"
    ]
    rowwise = run_mpi(2, ["-m", "sparsewire", "spmm", "stencil2d:8", "--strategy", "rowwise"], timeout=60)
    assert rowwise.returncode == 2 and "accounting only" in rowwise.stderr
    no_topology = run_mpi(2, ["-m", "sparsewire", "spmm", "stencil2d:8", "--strategy", "joint-group"], timeout=60)
    assert no_topology.returncode == 2 and "--group-size" in no_topology.stderr
    assert len(no_topology.stderr.strip().splitlines()) == 1
    bad_topology = run_mpi(3, ["-m", "sparsewire", "spmm", "stencil2d:8", "--topology", "torus"], timeout=60)
    assert bad_topology.returncode == 2 and "unknown topology" in bad_topology.stderr
    assert len(bad_topology.stderr.strip().splitlines()) == 1


def test_cli_spmm_topology_from_mpi_groups_one_node():
    # All ranks share this machine's memory: one group, so nothing crosses between groups.
    report = spmm_json(3, "stencil2d:20", "--topology", "mpi", "--strategy", "column-hier,joint", "--check", "--repeat", "1")
    for run in report["runs"]:
        assert run["topology"] == "mpi-nodes" and run["inter_group_bytes"] == 0
        assert run["measured_intra_group_bytes"] == run["planned_bytes"] > 0 and run["max_abs_error"] <= 1e-9


def test_default_mode_follows_the_benchmark_rule():
    # 2 ranks x 1 thread fit this test's cores only where there are 2 or more; the rule itself:
    from sparsewire.kernels.compiled import default_threads
    from sparsewire.plan.modes import choose_mode

    cores = default_threads(1)
    assert choose_mode(8, 1, 1) == "early" and choose_mode(16, 1, 1) == "early"
    assert choose_mode(32, 1, 1) == "overlap"
    assert choose_mode(8, cores + 1, 1) == "overlap"  # oversubscribed: overlap
    small = spmm_json(1, "stencil2d:12", "--k", "4", "--threads", "1", "--check", "--repeat", "1")
    large = spmm_json(1, "stencil2d:12", "--k", "32", "--threads", "1", "--check", "--repeat", "1")
    assert small["mode"] == "early" and large["mode"] == "overlap"
    assert small["max_abs_error"] <= 1e-9 and large["max_abs_error"] <= 1e-9
