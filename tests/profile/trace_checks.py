"""Run under ``mpiexec -n P`` by tests/profile/test_tracing.py, a job per P: ``python tests/profile/trace_checks.py
SEED DIR`` (in a collective job with the other cases it hung once at P = 3, cause not yet found).

For the flat joint strategy and the hierarchical joint-group, every mode on the MPI transport
(bulk, overlap, pipelined, early, partitioned with two threads) and every mode of the torch
transport (all but partitioned): four multiplies, window [1, 3); the trace must obey the format's
rules (tests/profile/trace_rules.py), hold one flow arrow per message the plan sends in the window, and no
receive may complete before its send was posted on the aligned clock. Each rank's clock is a
stand-in running ``rank`` seconds ahead (plus the real one): the alignment must find that offset
within 10 microseconds. A planted fault (one arrival record dropped) must break the rules. The same
window summarised alone (the schedule's laps, no proxies) must count every phase and message as the
trace did, and every relayed message posted alone (all modes but partitioned), as is every message of an exchange
that sends to another group first (``send_order``) and every piece of a message cut for the slower link.
Returns ``OK N`` (N traces checked) and the largest residual."""

from __future__ import annotations

import itertools
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import sparsewire
from trace_rules import problems, receives_before_sends


def same_as_the_trace(traced, alone, case, threads: int) -> None:
    """A summary alone (laps in the schedule, sparsewire.profile.laps) counts every phase and message as the trace's
    proxies do; its phases, one after the other on each of the ``threads`` threads, fit inside the multiplies."""
    counts = {name: count for name, (count, _) in traced.phases.items() if count}
    assert {name: count for name, (count, _) in alone.phases.items() if count} == counts, (case, alone.phases, traced.phases)
    assert {n: v for n, v in alone.sent.items() if v[0]} == {n: v for n, v in traced.sent.items() if v[0]}, case
    assert all(ns >= 0 for _, ns in alone.phases.values()), (case, alone.phases)
    inside = sum(ns for name, (_, ns) in alone.phases.items() if name != "multiply")
    assert inside <= threads * alone.phases["multiply"][1], (case, alone.phases)


def check(seed: int, directory: str) -> str:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    matrix = sparsewire.distribute(comm, f"delaunay:600:{seed % 1000}")
    start, stop = matrix.col_partition.range(rank)
    b = np.ones((stop - start, 3))
    planted_offset = rank * 1_000_000_000  # this rank's stand-in clock runs rank seconds ahead

    def clock() -> int:
        return time.perf_counter_ns() + planted_offset

    checked, residuals = 0, []
    groups = sparsewire.Topology.nodes(2)
    strategies = (("joint", None), ("joint-group", groups))
    modes = ("bulk", "overlap", "pipelined", "early", "partitioned")
    for (strategy, topology), mode, transport in itertools.product(strategies, modes, ("mpi", "torch")):
        if mode == "partitioned" and transport == "torch":  # the torch transport has no partitioned mode
            continue
        chosen = groups if mode == "pipelined" else topology
        threads = 2 if mode == "partitioned" else 1  # two threads: two tracks per rank
        with matrix.spmm_plan(3, strategy=strategy, mode=mode, topology=chosen, transport=transport, threads=threads) as plan:
            name = f"{strategy}-{mode}-{transport}.json"
            with sparsewire.trace(plan, directory, window=(1, 3), clock=clock, name=name) as tracer:
                for _ in range(4):
                    plan.multiply(b)
            with sparsewire.trace(plan, window=(1, 3), clock=clock, summary=False) as alone:
                for _ in range(4):
                    plan.multiply(b)
            messages = plan.stats.messages
            relayed = sum(len(ex.send_ranks) for ex in plan.rank_plan.exchanges if ex.input is not None)
            # (an exchange sending to another group and to its own posts the other group's messages first, one by one;
            # one whose messages to another group are cut posts every piece, and each whole message, on its own)
            ordered = sum(
                sum(len(rows) - 1 for rows in ex.send_pieces) if ex.send_pieces is not None else len(ex.send_order or ())
                for ex in plan.executor.buffers.exchanges
            )
        same_as_the_trace(tracer, alone, (strategy, mode, transport, rank), threads)
        # Every mode but partitioned sends a relayed message alone, as soon as its inputs are in (bulk and
        # pipelined too: a two-level plan's second hop does not wait for the whole first one), and each message of an
        # exchange with a send order.
        alone_sends = alone.phases.get("post send", [0])[0]
        expected = 0 if mode == "partitioned" else 2 * (relayed + ordered)
        assert alone_sends == expected, (strategy, mode, transport, alone_sends, relayed, ordered)
        case = (strategy, mode, transport)
        if checked == 0:  # a second trace of one plan inside the first is refused, on every rank alike
            with matrix.spmm_plan(3, strategy=strategy, mode=mode, topology=chosen) as again:
                with sparsewire.trace(again, summary=False):
                    try:
                        with sparsewire.trace(again, summary=False):
                            raise AssertionError("a nested trace of one plan was accepted")
                    except sparsewire.InputError as error:
                        assert "being traced already" in str(error), error
        for meta in tracer.metadata["ranks"] if rank == 0 else []:
            error = abs(meta["offset_ns"] + meta["rank"] * 1_000_000_000)
            assert error <= 10_000, f"{case} rank {meta['rank']}: planted offset recovered to {error} ns"
            residuals.append(meta["residual_us"])
        if rank == 0:
            events = json.load(open(tracer.path))["traceEvents"]
            broken = problems(events)
            assert not broken, (case, broken[:5])
            flows = sum(1 for e in events if e["ph"] == "s")
            assert flows == 2 * messages, (case, flows, messages)  # the window holds two multiplies
            early = receives_before_sends(events)
            assert not early, (case, early[:5])
            if mode == "partitioned":  # each thread packs its share of every message on a track of its own
                assert {e["tid"] for e in events if e["ph"] == "X" and e["name"] == "pack"} == {0, 1} or size == 1, case
            if checked == 0 and size > 1:  # planted fault: one arrival record dropped
                dropped = next(i for i, e in enumerate(events) if e["ph"] == "f")
                assert problems(events[:dropped] + events[dropped + 1 :]), "a dropped arrival went unnoticed"
        checked += 1
    return f"OK {checked} residual_us {max(residuals, default=0.0):.2f}"


if __name__ == "__main__":
    result = check(int(sys.argv[1]), sys.argv[2])
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(result, flush=True)
