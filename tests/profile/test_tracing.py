"""Tracing (sparsewire.profile.tracing): the format's rules on hand-made events, and under mpiexec at
P = 1..4 a trace of every traced mode on both transports, flat and hierarchical, valid, with one arrow per message, no
receive before its send on the aligned clock and planted clock offsets recovered within 10 us
(tests/profile/trace_driver.py)."""

from __future__ import annotations

import pytest

from conftest import ROOT, run_mpi
from trace_rules import problems, receives_before_sends


def test_the_rules_catch_each_kind_of_broken_trace():
    good = [
        {"ph": "X", "name": "wait", "ts": 10.0, "dur": 5.0, "pid": 1, "tid": 0},
        {"ph": "X", "name": "pack", "ts": 0.0, "dur": 4.0, "pid": 0, "tid": 0},
        {"ph": "X", "name": "post sends", "ts": 1.0, "dur": 1.0, "pid": 0, "tid": 0},
        {"ph": "b", "name": "send 0->1", "cat": "send", "id": "0:0:0:1", "ts": 1.5, "pid": 0},
        {"ph": "e", "cat": "send", "id": "0:0:0:1", "ts": 3.0, "pid": 0},
        {"ph": "s", "name": "message", "cat": "flow", "id": "0:0:0:1", "ts": 1.5, "pid": 0},
        {"ph": "f", "name": "message", "cat": "flow", "id": "0:0:0:1", "ts": 12.0, "pid": 1, "bp": "e"},
    ]
    assert problems(good) == [] and receives_before_sends(good) == []
    assert problems(good[:-1])  # the arrival dropped
    assert problems(good[:3] + [{**good[2], "ts": 3.5}] + good[3:])  # a span crossing another's end
    assert problems([e for e in good if e["ph"] != "e"])  # an async begin without its end
    early = [dict(e) for e in good]
    early[-1]["ts"] = 1.0
    assert receives_before_sends(early) == ["0:0:0:1: 0.500 us early"]


def test_an_epoch_window_and_regions_record_only_inside_it():
    from sparsewire.profile.tracing import Tracer, region

    ticks = iter(range(0, 10_000, 10))
    tracer = Tracer(0, window=(1, 3), clock=lambda: next(ticks), unit="epoch")
    for epoch in range(4):
        tracer.begin_epoch()
        tracer.begin_multiply()  # multiplies inside an epoch do not move an epoch window
        assert tracer.recording == (epoch in (1, 2))
        with region(tracer, "epoch", epoch=epoch):
            with region(tracer, "layer 0 forward"):
                pass
    with region(None, "nothing"):  # no tracer: a no-op context
        pass
    assert tracer.epochs == 2 and tracer.multiplies == 2 and tracer.phases["epoch"][0] == 2
    spans = [e for e in tracer.events if e["name"] == "epoch"]
    assert [e["args"]["epoch"] for e in spans] == [1, 2] and all(e["dur"] == 0.03 for e in spans)  # 3 ticks of 10 ns
    assert problems(tracer.events) == []


@pytest.mark.parametrize("ranks", [1, 3])  # (P = 2 and 4 are traced by the gcn and spgemm tests below, same rules)
def test_traces_of_every_message_mode_are_valid_and_aligned(rng, tmp_path, ranks):
    completed = run_mpi(
        ranks, [str(ROOT / "tests" / "profile" / "trace_driver.py"), str(int(rng.integers(2**31))), str(tmp_path)]
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert int(completed.stdout.split("OK ")[1].split()[0]) == 18, completed.stdout


def test_spmm_trace_writes_one_valid_trace_per_run(tmp_path):
    import json

    args = ["-m", "sparsewire", "spmm", "delaunay:800:2", "--mode", "bulk,early", "--repeat", "3", "--json"]
    picture = tmp_path / "timeline.png"
    extra = ["--trace", str(tmp_path), "--trace-window", "1:3", "--log-view", "--plot", str(picture)]
    completed = run_mpi(2, [*args, *extra], timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 20_000
    runs = json.loads(completed.stdout)["runs"]
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


@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_a_planted_imbalance_shows_as_max_min_and_load_balance(ranks):
    import json

    completed = run_mpi(ranks, [str(ROOT / "tests" / "profile" / "log_view_driver.py")], timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = json.loads(completed.stdout.strip().splitlines()[-1])
    local = next(row for row in summary["phases"] if row["phase"] == "local product")
    assert summary["multiplies"] == 5 and local["count"] == 5
    assert local["time_max"] >= 5 * 0.020  # the sleeping rank's five sleeps
    if ranks == 1:
        assert summary["load_balance_efficiency"] == 1.0 and local["max_min_ratio"] == 1.0
    else:
        assert local["max_min_ratio"] > 10, local
        assert abs(summary["load_balance_efficiency"] - 1 / ranks) < 0.1, summary["load_balance_efficiency"]
    assert 0 < summary["communication_efficiency"] <= 1 and summary["timer_seconds"] > 0 and summary["record_seconds"] > 0


def test_eigs_traces_summarises_and_maps_its_multiplies(tmp_path):
    import json

    args = ["-m", "sparsewire", "eigs", "stencil2d:20", "--mode", "overlap", "--json", "--log-view"]
    completed = run_mpi(3, [*args, "--trace", str(tmp_path), "--trace-window", "2:5"], timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert report["converged"] and report["traffic_differences"] == [] and report["log_view"]["multiplies"] == 3
    events = json.load(open(report["trace"]["path"]))["traceEvents"]
    assert problems(events) == [] and receives_before_sends(events) == []
    messages = sum(sum(row) for row in report["traffic"]["messages"])  # one multiply's
    assert sum(e["ph"] == "s" for e in events) == 3 * messages > 0


@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_spgemm_traces_are_valid_and_carry_the_bytes_mpi_delivered(rng, tmp_path, ranks):
    completed = run_mpi(
        ranks, [str(ROOT / "tests" / "profile" / "spgemm_trace_driver.py"), str(int(rng.integers(2**31))), str(tmp_path)]
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert completed.stdout.split("OK ")[1].split()[0] == "4", completed.stdout  # SUMMA and the three 1D strategies


@pytest.mark.parametrize(("ranks", "model"), [(2, "gcn"), (3, "sage")])
def test_training_traces_layers_propagations_and_the_planned_messages(rng, tmp_path, ranks, model):
    seed = str(int(rng.integers(2**31)))
    completed = run_mpi(ranks, [str(ROOT / "tests" / "profile" / "gcn_trace_driver.py"), seed, str(tmp_path), model], timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert completed.stdout.strip().endswith("OK"), completed.stdout


def test_spgemm_and_gcn_commands_trace_summarise_and_draw(tmp_path):
    import json

    picture = tmp_path / "spgemm.png"
    spgemm = ["-m", "sparsewire", "spgemm", "rmat:9:8", "--algorithm", "summa", "--json", "--log-view", "--plot", str(picture)]
    completed = run_mpi(2, [*spgemm, "--trace", str(tmp_path / "spgemm"), "--trace-window", "1:3"], timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    events = json.load(open(report["trace"]["path"]))["traceEvents"]
    assert report["trace"]["path"].endswith("trace-spgemm-summa.json") and problems(events) == []
    assert report["log_view"]["multiplies"] == 2
    assert sum(e["args"]["bytes"] for e in events if e["ph"] == "b" and e["cat"] == "send") == 2 * report["bytes_moved"]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    picture = tmp_path / "gcn.png"
    gcn = ["-m", "sparsewire", "gcn", "rmat:8:4", "--features", "random:8", "--classes", "3", "--epochs", "4", "--json"]
    completed = run_mpi(2, [*gcn, "--trace-window", "1:3", "--log-view", "--plot", str(picture)], timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    assert report["log_view"]["epochs"] == 2 and report["log_view"]["percent_of"] == "epoch"
    phases = {row["phase"]: row for row in report["log_view"]["phases"]}
    assert phases["epoch"]["count"] == 2 and phases["layer 1 backward"]["count"] == 2 and phases["layer 0 forward"]["count"] == 4
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "trace-gcn.json").exists()
