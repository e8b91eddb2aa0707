"""Tracing (sparsewire.profile.tracing): the format's rules on hand-made events, and every traced mode on both
transports, flat and hierarchical, in a job per P (tests/profile/trace_checks.py): valid, one arrow per message, no
receive before its send on the aligned clock, planted clock offsets recovered within 10 us. The other whole runs
traced are collective cases in tests/mpi/test_traces.py and tests/mpi/test_tracing_command.py."""

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


@pytest.mark.alone  # (it recovers a planted clock offset to 10 us from message times: nothing beside it)
@pytest.mark.parametrize("ranks", [1, 3])  # (P = 2 and 4 are traced by the spgemm and training cases, same rules)
def test_traces_of_every_message_mode_are_valid_and_aligned(rng, tmp_path, ranks):
    script = str(ROOT / "tests" / "profile" / "trace_checks.py")
    completed = run_mpi(ranks, [script, str(int(rng.integers(2**31))), str(tmp_path)])
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert int(completed.stdout.split("OK ")[1].split()[0]) == 18, completed.stdout
