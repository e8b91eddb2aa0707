"""``sparsewire spmm`` on every rank of one job, as ``mpiexec -n P sparsewire spmm`` runs it: every strategy and
mode exact with the bytes as planned, rounds, the two-level strategies, the report's fields, the shared matrices,
the default mode, every partitioner, the check at large magnitudes and the traffic map. Its refusals end their jobs
and run in jobs of their own (tests/exec/test_executor_mpi.py)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import SHARED_MATRICES, matrix_file
from sparsewire.partition import PARTITIONERS

HIERARCHICAL = "column-hier,joint-hier,joint-group"
#: Every two-level strategy in every mode on groups of 2, checked, once, k = 8.
EVERY_TWO_LEVEL_RUN = ("--group-size", "2", "--strategy", HIERARCHICAL, "--mode", "all", "--check", "--repeat", "1", "--k", "8")
#: Every shared matrix runs through one of the two tests below (alternating by name), flat or two-level.
FLAT_MATRICES, HIERARCHICAL_MATRICES = SHARED_MATRICES[0::2], SHARED_MATRICES[1::2]


def spmm_json(command, matrix, *extra):
    status, out, err = command("spmm", matrix, "--json", *extra)
    assert status == 0, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1, out  # exactly one JSON object, from rank 0
    return json.loads(lines[0])


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


@pytest.mark.ranks(3, 4)
def test_cli_spmm_all_strategies_and_modes(command, comm):
    ranks = comm.Get_size()
    report = spmm_json(command, "rmat:10:8:5", "--strategy", "all", "--mode", "all", "--check", "--repeat", "2", "--k", "8")
    assert report["ranks"] == ranks and len(report["runs"]) == 4 * 5
    checksums = {round(run["checksum_sum"], 9) for run in report["runs"]}
    assert len(checksums) == 1  # every strategy and mode computes the same C
    for run in report["runs"]:
        assert run["max_abs_error"] <= 1e-9
        assert run["measured_bytes"] == run["planned_bytes"]


@pytest.mark.ranks(3)
def test_cli_spmm_rounds_take_turns(command):
    # Every plan made first, then the runs take turns: each run's median over rounds x repeat multiplies, C and
    # bytes as in one round.
    args = ["rmat:9:8:2", "--strategy", "joint,column-hier", "-G", "2", "--mode", "overlap,early", "--k", "4", "--check"]
    once = spmm_json(command, *args, "--repeat", "2")
    turns = spmm_json(command, *args, "--repeat", "2", "--rounds", "3")
    assert [(r["strategy"], r["mode"]) for r in turns["runs"]] == [(r["strategy"], r["mode"]) for r in once["runs"]]
    for first, run in zip(once["runs"], turns["runs"]):
        assert (first["timed_multiplies"], first["rounds"], run["timed_multiplies"], run["rounds"]) == (2, 1, 6, 3)
        assert run["check_passed"] and run["max_abs_error"] == first["max_abs_error"] == 0.0
        assert run["measured_bytes"] == run["planned_bytes"] == first["planned_bytes"]
        assert run["checksum_sum"] == first["checksum_sum"]
    status, out, err = command("spmm", *args, "--repeat", "1", "--rounds", "2")
    assert status == 0, err
    lines = [line for line in err.splitlines() if "running" in line]
    runs = ["joint/overlap", "joint/early", "column-hier/overlap", "column-hier/early"]
    # the second turn in reverse order (no run always follows the same one)
    assert lines == [f"planning and running {run}" for run in runs] + [f"round 2 of 2: running {run}" for run in runs[::-1]]
    assert "2 timed multiplies in 2 rounds" in out
    status, _, err = command("spmm", "rmat:6:4:1", "--rounds", "2", "--log-view")
    assert status == 2 and "trace with --rounds 1" in err


@pytest.mark.ranks(3, 4)
@pytest.mark.parametrize("group_size, proxy", [(2, "local"), (2, "balanced"), (3, "local"), (3, "balanced")])
def test_cli_spmm_hierarchical_strategies_every_mode(command, comm, group_size, proxy):
    if comm.Get_size() == 3 and group_size == 2:
        pytest.skip("groups of 2 run at P = 4")
    report = spmm_json(
        command,
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


@pytest.mark.ranks(4)
def test_cli_spmm_hierarchical_when_groups_need_nothing_from_each_other(command, comm, shared_tmp):
    # Block diagonal over the two groups of --group-size 2 at P = 4 (rows 0-19 and 20-39), plus
    # traffic inside each group: no byte may cross between groups.
    rng = np.random.default_rng(5)
    dense = np.zeros((40, 40))
    for start in (0, 20):
        block = rng.integers(-3, 4, (20, 20)) * (rng.random((20, 20)) < 0.2)
        dense[start : start + 20, start : start + 20] = block
    path = matrix_file(comm, shared_tmp / "two_islands.mtx", dense)
    report = spmm_json(command, str(path), *EVERY_TWO_LEVEL_RUN)
    assert_hierarchical_runs(report, 3 * 5)
    for run in report["runs"]:
        assert run["inter_group_bytes"] == 0 and run["intra_group_bytes"] > 0


@pytest.mark.ranks(2)
def test_cli_spmm_single_run_fields(command):
    report = spmm_json(command, "stencil2d:40", "--strategy", "column", "--mode", "bulk", "--k", "1", "--check", "--repeat", "3")
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


@pytest.mark.skipif(not FLAT_MATRICES, reason="../shared/data is not present")
@pytest.mark.parametrize("path", FLAT_MATRICES, ids=lambda p: p.name)
@pytest.mark.ranks(2)  # (the two-level runs below take P = 4; these run where the 2 cores are not oversubscribed)
def test_cli_spmm_on_shared_matrices(command, path):
    # k = 8: exactness and bytes do not depend on k, the time does.
    report = spmm_json(command, str(path), "--strategy", "all", "--mode", "bulk,overlap", "--check", "--repeat", "1", "--k", "8")
    for run in report["runs"]:
        assert run["max_abs_error"] <= 1e-9 and run["measured_bytes"] == run["planned_bytes"]


@pytest.mark.skipif(not HIERARCHICAL_MATRICES, reason="../shared/data is not present")
@pytest.mark.parametrize("path", HIERARCHICAL_MATRICES, ids=lambda p: p.name)
@pytest.mark.ranks(4)
def test_cli_spmm_hierarchical_on_shared_matrices(command, path):
    report = spmm_json(command, str(path), *EVERY_TWO_LEVEL_RUN)
    assert_hierarchical_runs(report, 3 * 5)


@pytest.mark.ranks(3)
def test_cli_spmm_topology_from_mpi_groups_one_node(command):
    # All ranks share this machine's memory: one group, so nothing crosses between groups.
    report = spmm_json(
        command, "stencil2d:20", "--topology", "mpi", "--strategy", "column-hier,joint", "--check", "--repeat", "1"
    )
    for run in report["runs"]:
        assert run["topology"] == "mpi-nodes" and run["inter_group_bytes"] == 0
        assert run["measured_intra_group_bytes"] == run["planned_bytes"] > 0 and run["max_abs_error"] <= 1e-9


@pytest.mark.ranks(1)
def test_default_mode_follows_the_benchmark_rule(command):
    # 2 ranks x 1 thread fit this test's cores only where there are 2 or more; the rule itself:
    from sparsewire.kernels.compiled import default_threads
    from sparsewire.plan.modes import choose_mode

    cores = default_threads(1)
    assert choose_mode(8, 1, 1) == "early" and choose_mode(16, 1, 1) == "early"
    assert choose_mode(32, 1, 1) == "overlap"
    assert choose_mode(8, cores + 1, 1) == "overlap"  # oversubscribed: overlap
    small = spmm_json(command, "stencil2d:12", "--k", "4", "--threads", "1", "--check", "--repeat", "1")
    large = spmm_json(command, "stencil2d:12", "--k", "32", "--threads", "1", "--check", "--repeat", "1")
    assert small["mode"] == "early" and large["mode"] == "overlap"
    assert small["max_abs_error"] <= 1e-9 and large["max_abs_error"] <= 1e-9


@pytest.mark.ranks(1, 3)
def test_cli_spmm_check_passes_on_values_near_1e12(command, comm, rng, shared_tmp):
    """An absolute 1e-9 would fail these: their relative error is 1e-16 (sparsewire._lib.tolerance)."""
    matrix = sp.random_array((80, 80), density=0.1, rng=rng, format="coo")
    matrix.data = rng.uniform(1e12, 2e12, matrix.nnz)
    report = spmm_json(command, matrix_file(comm, shared_tmp / "big.mtx", matrix), "--k", "4", "--check", "--repeat", "1")
    assert report["check_passed"], report


@pytest.mark.ranks(3)  # (C in the original order at P = 1 and 3: test_partitions.py)
@pytest.mark.parametrize("method", PARTITIONERS)
def test_cli_spmm_check_for_every_partitioner_and_strategy(command, method):
    args = ["--partition", method, "--group-size", "2", "--strategy", "all", "--mode", "bulk", "--repeat", "1", "--check"]
    report = spmm_json(command, "delaunay:700:2", *args)
    assert len(report["runs"]) == 7, method
    for run in report["runs"]:
        assert run["check_passed"] and run["max_abs_error"] < 1e-12, (method, run["strategy"], run["max_abs_error"])
        assert run["measured_bytes"] == run["planned_bytes"], (method, run["strategy"])


@pytest.mark.ranks(2, 4)
def test_cli_spmm_partitions_by_default_where_metis_cuts_the_crossing_rows(command, comm):
    # delaunay_n16's file order is random: METIS cuts the B rows that cross by far more than auto's 10%. The same
    # count from the planner's side: the column plan's bytes, k x 8 per crossing row.
    ranks = comm.Get_size()
    default = spmm_json(command, "delaunay_n16", "--strategy", "column", "--repeat", "1", "--k", "2", "--check")
    even = spmm_json(command, "delaunay_n16", "--strategy", "column", "--repeat", "1", "--k", "2", "--partition", "even")
    assert default["partition"] == "metis" and even["partition"] == "even" and even["partition_reason"] == ""
    crossing, kept = (
        int(n)
        for n in re.findall(r"(\d+) B rows cross", default["partition_reason"])
        + re.findall(r"against (\d+)", default["partition_reason"])
    )
    assert default["planned_bytes"] == default["measured_bytes"] == crossing * 2 * 8
    assert even["planned_bytes"] == kept * 2 * 8 and crossing <= 0.9 * kept
    assert default["check_passed"] and default["checksum_sum"] == pytest.approx(even["checksum_sum"], rel=1e-12)
    assert default["first_product_seconds"] >= default["partition_seconds"] + default["plan_seconds"] > 0
    if ranks == 4:  # groups of 2: the rows between groups, by METIS into the groups first
        grouped = spmm_json(command, "delaunay_n16", "-G", "2", "--strategy", "column-hier", "--repeat", "1", "--k", "2")
        assert grouped["partition"] == "metis-hier" and "between groups" in grouped["partition_reason"]


@pytest.mark.ranks(3)
def test_cli_spmm_reports_every_runs_traffic_map_and_draws_the_first(command, shared_tmp):
    picture = shared_tmp / "traffic.png"
    args = ["-G", "2", "--strategy", "all", "--mode", "bulk", "--traffic-map", str(picture)]
    report = spmm_json(command, "stencil2d:9", *args)
    assert len(report["runs"]) == 7
    for run in report["runs"]:
        traffic = run["traffic"]
        assert run["traffic_differences"] == [] and sum(map(sum, traffic["bytes"])) == run["planned_bytes"], run["strategy"]
        assert sum(c["bytes"] for c in traffic["per_link_class"].values()) == run["planned_bytes"]
        assert len(traffic["bytes"]) == 3 and all(row[i] == 0 for i, row in enumerate(traffic["bytes"]))
        # the planner's all-to-all, uncoded without --compress: as many bytes as its int64 words
        assert run["setup_exchange_wire_bytes"] == run["setup_exchange_bytes"] > 0, run["strategy"]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 10_000
