"""The commands' ``--trace``, ``--log-view`` and ``--plot`` on every rank of one job, as ``mpiexec -n P`` runs them:
spmm, eigs, spgemm and gcn write traces that obey the format's rules (tests/profile/trace_rules.py), with one arrow
per message in the window, summaries that count the window's multiplies or epochs, and pictures."""

from __future__ import annotations

import json

import pytest

from trace_rules import problems, receives_before_sends

PNG = b"\x89PNG\r\n\x1a\n"


def report_of(command, *args):
    status, out, err = command(*args, "--json")
    assert status == 0, err[-3000:]
    return json.loads(out)


@pytest.mark.ranks(2)
def test_spmm_trace_writes_one_valid_trace_per_run(command, shared_tmp):
    picture = shared_tmp / "timeline.png"
    args = ["spmm", "delaunay:800:2", "--mode", "bulk,early", "--repeat", "3"]
    args += ["--trace", str(shared_tmp), "--trace-window", "1:3", "--log-view", "--plot", str(picture)]
    runs = report_of(command, *args)["runs"]
    assert picture.read_bytes()[:8] == PNG and picture.stat().st_size > 20_000
    for run in runs:
        events = json.load(open(run["trace"]["path"]))["traceEvents"]
        assert problems(events) == [] and receives_before_sends(events) == []
        assert sum(e["ph"] == "s" for e in events) == 2 * run["messages"], run["mode"]  # multiplies 1 and 2
        names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        assert {name.split(" @ ")[0] for name in names} == {"rank 0", "rank 1"}
        assert {"pack", "post sends", "wait", "local product", "combine"} <= {e["name"] for e in events if e["ph"] == "X"}
        summary = run["log_view"]  # the same window: multiplies 1 and 2
        assert summary["multiplies"] == 2 and summary["ranks"] == 2
        sent = sum(row["messages"] for row in summary["phases"])
        assert sent == 2 * run["messages"] and sum(row["bytes"] for row in summary["phases"]) == 2 * run["planned_bytes"]


@pytest.mark.ranks(3)
def test_eigs_traces_summarises_and_maps_its_multiplies(command, shared_tmp):
    args = ["eigs", "stencil2d:20", "--mode", "overlap", "--log-view", "--trace", str(shared_tmp), "--trace-window", "2:5"]
    report = report_of(command, *args)
    assert report["converged"] and report["traffic_differences"] == [] and report["log_view"]["multiplies"] == 3
    events = json.load(open(report["trace"]["path"]))["traceEvents"]
    assert problems(events) == [] and receives_before_sends(events) == []
    messages = sum(sum(row) for row in report["traffic"]["messages"])  # one multiply's
    assert sum(e["ph"] == "s" for e in events) == 3 * messages > 0


@pytest.mark.ranks(2)
def test_spgemm_and_gcn_commands_trace_summarise_and_draw(command, shared_tmp):
    picture = shared_tmp / "spgemm.png"
    spgemm = ["spgemm", "rmat:9:8", "--algorithm", "summa", "--log-view", "--plot", str(picture)]
    report = report_of(command, *spgemm, "--trace", str(shared_tmp / "spgemm"), "--trace-window", "1:3")
    events = json.load(open(report["trace"]["path"]))["traceEvents"]
    assert report["trace"]["path"].endswith("trace-spgemm-summa.json") and problems(events) == []
    assert report["log_view"]["multiplies"] == 2
    assert sum(e["args"]["bytes"] for e in events if e["ph"] == "b" and e["cat"] == "send") == 2 * report["bytes_moved"]
    assert picture.read_bytes()[:8] == PNG

    picture = shared_tmp / "gcn.png"
    gcn = ["gcn", "rmat:8:4", "--features", "random:8", "--classes", "3", "--epochs", "4"]
    report = report_of(command, *gcn, "--trace-window", "1:3", "--log-view", "--plot", str(picture))
    assert report["log_view"]["epochs"] == 2 and report["log_view"]["percent_of"] == "epoch"
    phases = {row["phase"]: row for row in report["log_view"]["phases"]}
    assert phases["epoch"]["count"] == 2 and phases["layer 1 backward"]["count"] == 2 and phases["layer 0 forward"]["count"] == 4
    assert picture.read_bytes()[:8] == PNG and not (shared_tmp / "trace-gcn.json").exists()
