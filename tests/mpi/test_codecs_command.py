"""Coded messages on every rank of one job, as ``mpiexec -n P sparsewire ...`` runs them: SpMM with ``--compress``
(C within the plan's bound, the payload as planned, the wire bytes a quarter (bf16, fp16) or an eighth plus row
metadata (int8) of float64's), eigs and GCN on coded messages, ``inter:`` and ``auto`` choosing by link, the codec's
spans in the trace; and SpGEMM with its integers coded (``--compress index``: C bit-identical) and its values in bf16.
Their refusals end their jobs and run in jobs of their own (tests/wire/test_codecs.py,
tests/spgemm/test_index_coding.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import SHARED_DATA, SHARED_MATRICES, matrix_file, on_rank_zero, slow_link_topology
from trace_rules import problems


def report_of(command, *args):
    status, out, err = command(*args, "--json")
    assert status == 0, out[-2000:] + err[-3000:]
    return json.loads(out)


@pytest.mark.parametrize(
    ("ranks", "name", "modes"),
    [
        pytest.param(2, "bf16", "bulk,overlap", marks=pytest.mark.ranks(2)),
        pytest.param(3, "bf16", "pipelined", marks=pytest.mark.ranks(3)),
        pytest.param(4, "bf16", "early", marks=pytest.mark.ranks(4)),
        pytest.param(3, "fp16", "overlap", marks=pytest.mark.ranks(3)),
        pytest.param(3, "int8", "bulk,early", marks=pytest.mark.ranks(3)),
    ],
)
def test_spmm_with_coded_messages_is_within_the_plans_bound_on_fewer_bytes(command, ranks, name, modes):
    matrix = str(SHARED_MATRICES[ranks % len(SHARED_MATRICES)]) if SHARED_MATRICES else "delaunay:3000:4"
    args = ["spmm", matrix, "--compress", name, "--check", "--repeat", "2"]
    args += ["--strategy", "joint,column,joint-group", "-G", "2", "--mode", modes, "--k", "16"]
    args += ["--partition", "even"]  # the original order: a setup exchange large enough for the packing's ratio below
    width, meta = {"bf16": (2, 0), "fp16": (2, 4), "int8": (1, 16)}[name]
    for run in report_of(command, *args)["runs"]:
        case = (matrix, ranks, name, run["strategy"], run["mode"])
        assert run["check_passed"] and run["delivery_problems"] == 0, case
        assert run["payload_bytes"] == run["planned_bytes"] and run["codec_passes"] >= 1, case
        rows = run["payload_bytes"] // (16 * 8)
        metadata = rows * (1 + meta) + 24 * run["messages"]  # a flag and metadata per row; a header and padding
        assert run["wire_bytes"] <= run["payload_bytes"] * width / 8 + metadata, (case, run["wire_bytes"])
        assert run["options"]["compress"] == name
        # the planner's all-to-all travels bit-packed too: its int64 words are small integers (ranks, kinds, sorted keys)
        assert 0 < run["setup_exchange_wire_bytes"] < 0.2 * run["setup_exchange_bytes"], (case, run["setup_exchange_wire_bytes"])


@pytest.mark.ranks(2)
def test_eigs_with_coded_messages_converges_within_the_codecs_reach(command):
    report = report_of(command, "eigs", "delaunay:3000:1", "--compress", "fp16", "--tol", "1e-3", "--check")
    assert report["converged"] and report["check_passed"] and report["options"]["compress"] == "fp16"


@pytest.mark.ranks(3)
@pytest.mark.skipif(not (SHARED_DATA / "gnn" / "cora.npz").exists(), reason="needs ../shared/data/gnn/cora.npz")
def test_gcn_trains_on_int8_messages_with_fewer_wire_bytes(command):
    report = report_of(command, "gcn", str(SHARED_DATA / "gnn" / "cora.npz"), "--compress", "int8", "--epochs", "30")
    assert report["compress"] == "int8" and report["test_accuracy"] > 0.5
    # float32 rows of 16 and 7 entries: 1 byte an entry plus 8 bytes of range and a flag per row, against 4 an entry
    assert report["wire_bytes_per_epoch"] < 0.6 * report["bytes_per_epoch"], report


@pytest.mark.ranks(4)
def test_only_the_messages_between_groups_are_coded_with_inter(command):
    """P = 4 in two groups of 2: inter:bf16 codes the messages between the groups only, so the wire carries the
    intra-group payload whole and the rest at about a quarter."""
    args = ["spmm", "delaunay:4000:2", "-G", "2", "--strategy", "joint", "--mode", "overlap,early"]
    for run in report_of(command, *args, "--compress", "inter:bf16", "--check", "--repeat", "2")["runs"]:
        intra, inter = run["measured_intra_group_bytes"], run["measured_inter_group_bytes"]
        assert run["check_passed"] and intra > 0 and inter > 0, run
        assert intra + inter / 4 < run["wire_bytes"] < intra + inter / 3, (intra, inter, run["wire_bytes"])
        assert run["transfer_paths"]["intra_group"].keys() == {"direct"}
        assert run["transfer_paths"]["inter_group"].keys() == {"encoded"}


@pytest.mark.ranks(3)
def test_auto_codes_only_the_links_where_the_wire_time_saved_exceeds_the_codec_time(command, comm, shared_tmp):
    """P = 3, ranks 0 and 1 on one node: under a measured topology whose link between nodes runs at 100 Mbit/s, auto
    codes the messages between the nodes (bf16's saving there, 60 ns a byte, is above any codec's measured cost)
    and not those inside a node (50 GB/s: 0.015 ns a byte saved); with the assumed 12.5 GB/s network of -G 2 it
    codes nothing, bitwise as none."""
    topology = str(on_rank_zero(comm, slow_link_topology, shared_tmp / "slow.json", [0, 0, 1]))
    args = ["spmm", "delaunay:3000:2", "--strategy", "joint", "--check", "--repeat", "2"]
    run = report_of(command, *args, "--topology", topology, "--compress", "auto")
    choice = run["compress_auto"]["links"]
    assert choice["measured inter-node"]["coded"] and not choice["measured intra-node"]["coded"], choice
    assert run["transfer_paths"]["intra_group"].keys() == {"direct"}
    assert run["transfer_paths"]["inter_group"].keys() == {"encoded"}
    intra, inter = run["measured_intra_group_bytes"], run["measured_inter_group_bytes"]
    assert run["check_passed"] and intra > 0 and inter > 0 and run["codec_passes"] > 0, run
    assert intra + inter / 4 < run["wire_bytes"] < intra + inter / 3, (intra, inter, run["wire_bytes"])
    run = report_of(command, *args, "-G", "2", "--compress", "auto")
    assert not any(entry["coded"] for entry in run["compress_auto"]["links"].values()), run["compress_auto"]
    assert run["wire_bytes"] == run["payload_bytes"] and run["codec_passes"] == 0 and run["check_passed"]


@pytest.mark.ranks(2)
def test_coding_and_decoding_are_spans_of_their_own_in_the_trace_and_the_summary(command, shared_tmp):
    """P = 2, bf16 on every message: in the trace one ``encode`` span per message sent (inside the span that posts
    it) and one ``decode`` per message received (inside a wait), the format's rules hold; the summary lists both."""
    args = ["spmm", "delaunay:1500:2", "--mode", "overlap,early", "--compress", "bf16"]
    args += ["--repeat", "3", "--trace", str(shared_tmp), "--trace-window", "1:3", "--log-view"]
    for run in report_of(command, *args)["runs"]:
        events = json.load(open(run["trace"]["path"]))["traceEvents"]
        assert problems(events) == [], run["mode"]
        spans = [e for e in events if e["ph"] == "X"]
        for name, around in (("encode", ("post sends", "post send")), ("decode", ("wait",))):
            inner = [e for e in spans if e["name"] == name]
            assert len(inner) == sum(e["ph"] == ("s" if name == "encode" else "f") for e in events) > 0, (run["mode"], name)
            for e in inner:
                assert any(
                    o["name"] in around
                    and (o["pid"], o["tid"]) == (e["pid"], e["tid"])
                    and o["ts"] <= e["ts"]
                    and e["ts"] + e["dur"] <= o["ts"] + o["dur"] + 1e-3
                    for o in spans
                ), (run["mode"], e)
        rows = {row["phase"]: row for row in run["log_view"]["phases"]}
        assert rows["encode"]["count"] > 0 and rows["decode"]["count"] > 0 and rows["encode"]["time_max"] > 0


def spgemm_report(command, algorithm: str, *extra: str) -> dict:
    matrix = str(SHARED_MATRICES[1]) if len(SHARED_MATRICES) > 1 else "rmat:12:8:1"
    report = report_of(command, "spgemm", matrix, "--algorithm", algorithm, "--check", "--repeat", "1", *extra)
    assert report["check_passed"] and report["exact"], report
    assert report["bytes_moved"] == report["predicted_bytes"], report
    return report


@pytest.mark.ranks(2)
def test_spgemm_with_coded_indices_is_bit_identical(command):
    plain, coded = spgemm_report(command, "1d"), spgemm_report(command, "1d", "--compress", "index")
    assert coded["compress"] == "index" and coded["compress_auto"] is None
    assert (coded["nnz_out"], coded["checksum_sum"]) == (plain["nnz_out"], plain["checksum_sum"])
    assert coded["bytes_moved"] == plain["bytes_moved"] == plain["wire_bytes"]
    assert coded["wire_bytes"] < 0.9 * coded["bytes_moved"], (coded["wire_bytes"], coded["bytes_moved"])
    # the integer arrays alone, from their own receive statuses: the same decoded, fewer on the wire
    assert plain["index_wire_bytes"] == plain["index_bytes"] == coded["index_bytes"] > 0
    assert coded["index_wire_bytes"] < 0.7 * coded["index_bytes"], (coded["index_wire_bytes"], coded["index_bytes"])


@pytest.mark.parametrize(
    ("algorithm", "groups"),
    [
        pytest.param("1d", [0, 0, 1], marks=pytest.mark.ranks(3)),
        pytest.param("summa", [0, 0, 1, 1], marks=pytest.mark.ranks(4)),
    ],
)
def test_auto_codes_the_indices_of_the_slow_links_only(command, comm, shared_tmp, algorithm, groups):
    """Under a measured topology of two nodes joined at 100 Mbit/s, ``--compress auto`` codes the messages between the
    nodes (a coded integer saves nanoseconds there, more than coding costs) and not those inside a node (50 GB/s);
    so the integers' wire bytes lie strictly between every link coded and none (SUMMA's 2 x 2 grid: a grid row
    inside a node, a grid column across, whose sub-communicators' ranks the decision must translate). With every
    rank in one node nothing is coded, bitwise as none."""
    ranks = comm.Get_size()
    topology = str(on_rank_zero(comm, slow_link_topology, shared_tmp / "slow.json", groups))
    coded = spgemm_report(command, algorithm, "--compress", "index")
    slow = spgemm_report(command, algorithm, "--compress", "auto", "--topology", topology)
    fast = spgemm_report(command, algorithm, "--compress", "auto", "--topology", f"nodes:{ranks}")
    for run in (slow, fast):  # (each also checked exact against GraphBLAS)
        assert (run["nnz_out"], run["checksum_sum"], run["bytes_moved"], run["index_bytes"]) == (
            coded["nnz_out"],
            coded["checksum_sum"],
            coded["bytes_moved"],
            coded["index_bytes"],
        )
    links = slow["compress_auto"]["links"]
    assert links["measured inter-node"]["coded"] and not links["measured intra-node"]["coded"], links
    # (index_bytes: the integers as decoded, what every link would carry uncoded)
    assert coded["index_wire_bytes"] < slow["index_wire_bytes"] < coded["index_bytes"], (coded, slow)
    assert not any(entry["coded"] for entry in fast["compress_auto"]["links"].values()), fast["compress_auto"]
    assert fast["wire_bytes"] == fast["bytes_moved"] and fast["index_wire_bytes"] == fast["index_bytes"]


@pytest.mark.parametrize(
    "algorithm", [pytest.param("1d", marks=pytest.mark.ranks(3)), pytest.param("summa", marks=pytest.mark.ranks(4))]
)
def test_spgemm_with_bf16_values_is_within_its_bound_on_about_a_quarter_of_the_bytes(command, comm, rng, shared_tmp, algorithm):
    """Real-valued A (magnitudes over 20 orders) times itself with ``--compress bf16``: ``--check`` passes under the
    bound for the plan's passes (SUMMA 2, 1D 1), the uncoded bytes equal the prediction, and the wire carries
    under 0.3x of them (float64 values to 2 bytes, integers bit-packed)."""
    matrix = sp.random_array((2000, 2000), density=0.003, rng=rng, format="coo")
    matrix.data = rng.standard_normal(matrix.nnz) * np.exp(rng.uniform(-23, 23, matrix.nnz))
    args = ["spgemm", matrix_file(comm, shared_tmp / "a.mtx", matrix), "--algorithm", algorithm, "--compress", "bf16"]
    report = report_of(command, *args, "--check", "--repeat", "1")
    assert report["check_passed"] and not report["exact"] and report["codec_passes"] == (2 if algorithm == "summa" else 1)
    assert report["bytes_moved"] == report["predicted_bytes"] > 0
    assert report["wire_bytes"] < 0.3 * report["bytes_moved"], (report["wire_bytes"], report["bytes_moved"])
