"""NetSparse's RIG stage (the NetSparse paper, sec. 5): the read property requests every node issues, with
filtering and coalescing, from its nonzeros in CSR order (the per-node model is
:func:`sparsewire.sim.netsparse.request_streams.issue_requests`). Shared by every configuration of
:class:`sparsewire.sim.netsparse.simulator.NetSparseSimulator` with the same RIG settings."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sparsewire._lib.cores import in_turn, node_cores, on_threads
from sparsewire.sim.netsparse import request_streams
from sparsewire.sim.netsparse.workload import Hardware, Mechanisms, Workload

__all__ = ["IssuedReads", "issue_reads"]


@dataclass
class IssuedReads:
    """Every issued read, node by node (``nodes`` ascending), each node's in issue order: requester, column,
    owner and issue cycle; the reads filtered and coalesced; and the cycle each node's last response returns."""

    nodes: np.ndarray
    cols: np.ndarray
    destinations: np.ndarray
    times: np.ndarray
    filtered: int
    coalesced: int
    last_cycle: np.ndarray


def issue_reads(
    workload: Workload, one_way: np.ndarray, batch: int, hardware: Hardware, mechanisms: Mechanisms, say: Callable[[str], None]
) -> IssuedReads:
    """Not collective. The RIG stage of every node (module docstring) with the round trips ``2 one_way[i, j]``
    and RIG commands of ``batch`` nonzeros; ``say`` gets a progress line every 32 nodes."""
    n = workload.nodes
    remote_counts = workload.remote_counts()
    total = int(remote_counts.sum())
    rtt = hardware.cycles(2 * one_way)
    largest = int(remote_counts.max(initial=0))
    per_node: list = [None] * n
    # A node's reads depend on its own nonzeros only (the scratch is marked per node), so the nodes go to
    # this machine's cores in threads (the compiled kernel releases the GIL) with the same result.
    next_node, done, lock = in_turn(range(n)), itertools.count(1), threading.Lock()
    started = time.perf_counter()

    def issue_nodes() -> None:
        # A worker's own scratch: one row per column, and buffers for the busiest node's reads (kept as
        # exact copies, so that nothing sized for every remote nonzero of the cluster exists).
        column_state = request_streams.new_column_state(workload.n_cols)
        buffers = (np.empty(largest, np.int32), np.empty(largest, np.int32), np.empty(largest, np.int64))
        for node in iter(next_node, None):
            begin, end = workload.node_starts[node], workload.node_starts[node + 1]
            issued, node_filtered, node_coalesced, node_last = request_streams.issue_requests(
                workload.indices[begin:end],
                workload.col_owner,
                node,
                rtt[node],
                batch,
                hardware.units,
                hardware.pending,
                mechanisms.filter,
                mechanisms.coalesce,
                int(hardware.cycles(hardware.command_seconds)),
                column_state,
                *buffers,
            )
            per_node[node] = (*(buffer[:issued].copy() for buffer in buffers), node_filtered, node_coalesced, node_last)
            with lock:
                finished = next(done)
            if finished % 32 == 0 or finished == n:
                say(f"  requests: {finished}/{n} nodes of {total:,} remote nonzeros ({time.perf_counter() - started:.1f} s)")

    on_threads(issue_nodes, min(node_cores(), n))
    counts = np.array([len(part[0]) for part in per_node], np.int64)
    filtered = int(sum(part[3] for part in per_node))
    coalesced = int(sum(part[4] for part in per_node))
    last_cycle = np.array([part[5] for part in per_node], np.int64)
    trimmed = [np.repeat(np.arange(n, dtype=np.int32), counts)]
    for field in range(3):
        trimmed.append(np.concatenate([part[field] for part in per_node]))  # n >= 1: never empty
    per_node.clear()
    say(f"  requests: {int(counts.sum()):,} issued of {total:,} remote nonzeros")
    return IssuedReads(*trimmed, filtered, coalesced, last_cycle)
