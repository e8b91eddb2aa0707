"""Collective: run on every rank of a collective job by tests/mpi/test_traces.py (``check``).

GNN training traced (sparsewire.trace on a GraphOperator, window in epochs): three layers on a
random R-MAT graph with random features, three epochs, window [1, 3). The trace must obey the
format's rules with no receive before its send on the aligned clock; per rank each layer's forward
twice an epoch (training step and evaluation) and its backward once; its flow arrows and message
bytes must equal what the planner says the propagations send (forward plans twice an epoch per
layer, transposed plans once); the summary counts the two epochs. The losses equal an untraced
run's exactly. Returns ``OK``."""

from __future__ import annotations

import json
from collections import Counter

import torch
from mpi4py import MPI

import sparsewire
from sparsewire.gnn import distribute_graph, load_graph, train
from trace_rules import problems, receives_before_sends

torch.set_num_threads(1)


def check(seed: int, directory: str, model: str) -> str:
    comm = MPI.COMM_WORLD
    data = load_graph(f"rmat:8:4:{seed % 1000}", features="random:6", classes=3, seed=seed) if comm.Get_rank() == 0 else None
    graph = distribute_graph(comm, data, model, dtype=torch.float32)
    settings = {"model": model, "layers": 3, "hidden": 5, "epochs": 3, "seed": seed}
    untraced = train(comm, graph, **settings)
    with sparsewire.trace(graph.operator, directory, window=(1, 3)) as tracer:
        traced = train(comm, graph, **settings)
    assert [h["loss"] for h in traced.history] == [h["loss"] for h in untraced.history], "tracing changed the training"
    # What each layer propagates: GCN its output width; SAGE projects first where out < in (6 -> 5, 5 -> 3) and
    # aggregates its input where out = in (5 -> 5): the same widths.
    widths = [5, 5, 3]
    planned_messages = planned_bytes = 0
    for width in widths:
        plan = graph.operator.plans[(width, str(torch.float32))]
        planned_messages += 2 * (2 * plan.stats.messages + plan.transpose().stats.messages)  # two epochs
        planned_bytes += 2 * (2 * plan.stats.total_bytes + plan.transpose().stats.total_bytes)
    graph.operator.close()
    if comm.Get_rank() != 0:
        return ""
    events = json.load(open(tracer.path))["traceEvents"]
    assert problems(events) == [], problems(events)[:5]
    assert receives_before_sends(events) == [], receives_before_sends(events)[:5]
    spans = Counter((e["pid"], e["name"]) for e in events if e["ph"] == "X")
    for rank in range(comm.Get_size()):
        for layer in range(3):
            assert spans[(rank, f"layer {layer} forward")] == 4, (rank, layer, spans)
            assert spans[(rank, f"layer {layer} backward")] == 2, (rank, layer, spans)
        assert spans[(rank, "epoch")] == 2 and spans[(rank, "propagate backward")] == 6, spans
    flows = sum(e["ph"] == "s" for e in events)
    sent = sum(e["args"]["bytes"] for e in events if e["ph"] == "b" and e["cat"] == "send")
    assert (flows, sent) == (planned_messages, planned_bytes), (flows, sent, planned_messages, planned_bytes)
    summary = tracer.summary
    assert summary["epochs"] == 2 and summary["percent_of"] == "epoch", summary
    assert sum(row["messages"] for row in summary["phases"]) == planned_messages
    return "OK"
