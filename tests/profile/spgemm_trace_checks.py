"""Collective: run on every rank of a collective job by tests/mpi/test_traces.py (``check``).

SpGEMM traced (sparsewire.spgemm.traced): for SUMMA and each 1D strategy, C = A A of a random
R-MAT, four multiplies, window [1, 3); the trace must obey the format's rules, hold one flow arrow
per message, no receive before its send on the aligned clock, and its messages' bytes (the
senders' arrays) must equal the bytes MPI delivered (receive statuses) and the plan's prediction
from counts, each over the two multiplies. The traced multiplies' C equals the untraced one. A
planted fault (one arrival dropped) must break the rules. Returns ``OK N``."""

from __future__ import annotations

import json

from mpi4py import MPI

import sparsewire
from sparsewire.distributed.spgemm import plan_spgemm
from trace_rules import problems, receives_before_sends


def check(seed: int, directory: str) -> str:
    comm = MPI.COMM_WORLD
    a = sparsewire.distribute(comm, f"rmat:8:6:{seed % 1000}")
    checked = 0
    for algorithm, strategy in (("summa", "auto"), ("1d", "column"), ("1d", "row"), ("1d", "joint")):
        plan = plan_spgemm(a, a, algorithm=algorithm, strategy=strategy)
        expected = plan.gather(plan.multiply())
        name = f"{plan.algorithm.replace('/', '-')}.json"
        with sparsewire.trace(plan, directory, window=(1, 3), name=name) as tracer:
            plan.multiply()  # multiply 0: outside the window
            before = plan.bytes_received
            results = [plan.multiply() for _ in range(2)]
            delivered = comm.allreduce(plan.bytes_received - before, op=MPI.SUM)
            plan.multiply()
        for result in results:
            c = plan.gather(result)
            if comm.Get_rank() == 0:
                assert (c != expected).nnz == 0, f"{plan.algorithm}: a traced multiply changed C"
        plan.close()
        if comm.Get_rank() != 0:
            continue
        events = json.load(open(tracer.path))["traceEvents"]
        case = plan.algorithm
        assert problems(events) == [], (case, problems(events)[:5])
        assert receives_before_sends(events) == [], (case, receives_before_sends(events)[:5])
        sent = [e for e in events if e["ph"] == "b" and e["cat"] == "send"]
        arrived = [e for e in events if e["ph"] == "e" and e["cat"] == "receive"]
        flows = sum(e["ph"] == "s" for e in events)
        assert flows == len(sent) == len(arrived), (case, flows, len(sent), len(arrived))
        traced_bytes = sum(e["args"]["bytes"] for e in sent)
        assert traced_bytes == sum(e["args"]["bytes"] for e in arrived) == delivered == 2 * plan.predicted_bytes, (
            case,
            traced_bytes,
            delivered,
            plan.predicted_bytes,
        )
        assert {"multiply", "local product", "post send", "wait"} <= {e["name"] for e in events if e["ph"] == "X"} or (
            comm.Get_size() == 1
        ), case
        assert tracer.summary["multiplies"] == 2
        assert sum(row["bytes"] for row in tracer.summary["phases"]) == traced_bytes
        if flows:  # the planted fault: one arrival dropped
            dropped = next(i for i, e in enumerate(events) if e["ph"] == "f")
            assert problems(events[:dropped] + events[dropped + 1 :]), case
        checked += 1
    return f"OK {checked}"
