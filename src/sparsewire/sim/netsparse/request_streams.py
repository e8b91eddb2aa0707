"""The per-request pipeline of NetSparse, compiled with Numba: property-request (PR) generation by
RIG units with filtering and coalescing (NetSparse sec. 5), concatenation queues (sec. 6.1) and
the top-of-rack property cache (sec. 6.2); and, in NumPy, the order of requests by (group, time) that
the queues take them in (:func:`order_by`).

Time is counted in NIC clock cycles (2.2 GHz, Table 5). The model, per node:

* The node's nonzeros, in CSR order, are cut into RIG batches of ``batch`` nonzeros; batch ``b``
  goes to client unit ``b mod units``. A unit reads one nonzero per cycle; a unit starts its next
  batch when every response of the current one has returned (``command_cycles`` of host-NIC
  handshake in between). A unit has at most ``pending`` outstanding PRs (its Pending PR Table):
  the next PR waits until the oldest one's response is back.
* A remote nonzero (column owned by another node) whose property already arrived at this node
  (an earlier PR's issue time + round trip <= now) is **filtered** (Idx Filter); one whose PR from
  the *same unit* is still outstanding is **coalesced** (Pending PR Table); otherwise a read PR is
  issued at the current cycle. Units run concurrently: the kernel always advances the unit with
  the earliest clock, so filtering sees the other units' earlier PRs.
* The round trip of a PR is the zero-load RTT of its (node, owner) pair; queueing is left to the
  flow model.

A **concatenation point** (a NIC, or a switch for the packets its hosts send out of the switch)
holds one queue per destination; a PR joins its destination's queue if the queue was opened at
most ``delay`` cycles ago and holds fewer than ``capacity`` PRs, otherwise the queue leaves as one
packet and a new one opens. ``delay = 0`` and ``capacity = 1`` disable concatenation.

The **property cache** of a switch is set-associative with LRU replacement; it sees the reads its
hosts send to other switches (a hit turns the read into a response at the switch) and is filled by
the responses of missed reads when they pass back (at lookup time + the pair's round trip).
"""

from __future__ import annotations

import numpy as np

from sparsewire._lib.cores import in_turn, node_cores, on_threads
from sparsewire._lib.distinct import sort_in_place
from sparsewire._lib.jit import njit
from sparsewire.sim.heap import heap_pop, heap_push

__all__ = [
    "issue_requests",
    "new_column_state",
    "concatenate",
    "property_cache",
    "cache_lookups",
    "unique_destinations_per_window",
    "core_requests",
    "order_by",
    "UNBOUNDED",
]

UNBOUNDED = np.iinfo(np.int64).max // 4


def new_column_state(n_cols: int) -> np.ndarray:
    """Not collective. The per-column scratch of :func:`issue_requests`, set by no node yet."""
    state = np.zeros((n_cols, 4), np.int64)
    state[:, 0] = -1
    return state


@njit(nogil=True, cache=True)  # nodes are issued in threads (sparsewire.sim.netsparse.rig)
def issue_requests(
    cols,
    col_owner,
    node,
    rtt_cycles,
    batch,
    units,
    pending,
    use_filter,
    use_coalesce,
    command_cycles,
    column_state,
    out_cols,
    out_dest,
    out_time,
):
    """Issue one node's read PRs (module docstring). ``cols``: the node's nonzeros' columns in CSR
    order; ``rtt_cycles[d]``: round trip to node d. ``column_state`` (n_cols x 4, int64, shared
    across the nodes one thread issues; make it with :func:`new_column_state`) holds per column the node that last set it
    (-1: none; another node's values count as unset), the first response's arrival, and the unit and
    cycle of the last read: one row per column, so a nonzero's lookups touch one cache line, not four.
    Writes the issued PRs to ``out_*`` and returns ``(issued, filtered, coalesced, last_cycle)``,
    ``last_cycle`` being when the node's last response returns."""
    n = cols.size
    n_batches = (n + batch - 1) // batch
    clock = np.zeros(units, np.int64)
    current = np.arange(units).astype(np.int64)  # batch index each unit works on
    position = np.zeros(units, np.int64)
    batch_done = np.zeros(units, np.int64)  # latest response of the unit's current batch
    ring = np.zeros((units, pending), np.int64)  # response times of the last `pending` PRs per unit
    ring_next = np.zeros(units, np.int64)
    issued = 0
    filtered = 0
    coalesced = 0
    last_cycle = 0
    while True:
        unit = -1
        earliest = UNBOUNDED
        for u in range(units):
            if current[u] < n_batches and clock[u] < earliest:
                earliest = clock[u]
                unit = u
        if unit < 0:
            break
        index = current[unit] * batch + position[unit]
        now = clock[unit]
        col = cols[index]
        owner = col_owner[col]
        if owner != node:
            state = column_state[col]  # [node that set it, first response, last unit, last read's cycle]
            if state[0] != node:
                state[0] = node
                state[1] = UNBOUNDED
                state[2] = -1
                state[3] = -UNBOUNDED
            round_trip = rtt_cycles[owner]
            if use_filter and state[1] <= now:
                filtered += 1
            elif use_coalesce and state[2] == unit and now < state[3] + round_trip:
                coalesced += 1
            else:
                slot = ring_next[unit] % pending
                if ring_next[unit] >= pending and ring[unit, slot] > now:
                    now = ring[unit, slot]  # Pending PR Table full: wait for the oldest response
                back = now + round_trip
                ring[unit, slot] = back
                ring_next[unit] += 1
                out_cols[issued] = col
                out_dest[issued] = owner
                out_time[issued] = now
                issued += 1
                if back < state[1]:
                    state[1] = back
                state[2] = unit
                state[3] = now
                if back > batch_done[unit]:
                    batch_done[unit] = back
        clock[unit] = now + 1
        position[unit] += 1
        end = min(batch, n - current[unit] * batch)
        if position[unit] >= end:
            finished = max(clock[unit], batch_done[unit])
            if finished > last_cycle:
                last_cycle = finished
            clock[unit] = finished + command_cycles
            current[unit] += units
            position[unit] = 0
            batch_done[unit] = 0
    return issued, filtered, coalesced, last_cycle


@njit(cache=True)
def concatenate(order, points, destinations, times, n_points, n_destinations, delay, capacity):
    """Packets per (point, destination) from PRs taken in ``order`` (by point, then time: :func:`order_by`;
    PR ``j`` is ``points[j]``, ``destinations[j]``, ``times[j]``) (module docstring)."""
    packets = np.zeros((n_points, n_destinations), np.int64)
    opened = np.zeros(n_destinations, np.int64)
    count = np.zeros(n_destinations, np.int64)
    owner = np.full(n_destinations, -1, np.int64)
    for i in range(order.size):
        j = order[i]
        point = points[j]
        destination = destinations[j]
        time = times[j]
        if owner[destination] != point:
            owner[destination] = point
            count[destination] = 0
        if count[destination] > 0 and (time - opened[destination] > delay or count[destination] >= capacity):
            count[destination] = 0
        if count[destination] == 0:
            packets[point, destination] += 1
            opened[destination] = time
        count[destination] += 1
    return packets


def property_cache(order, switches, cols, times, fill_delays, n_sets, ways, unbounded, n_cols) -> np.ndarray:
    """Not collective. Hit (True) or miss of every read at its switch's cache, the reads taken in ``order`` (by switch, then
    time: :func:`order_by`); read ``j`` is ``switches[j]``, ``cols[j]``, ... and its hit is ``hits[j]``.

    ``n_sets x ways`` lines per switch, LRU within a set, set = column mod ``n_sets``; with
    ``unbounded`` every filled column stays. A miss fills its column at ``time + fill_delay``. The switches'
    caches share nothing, so runs of one switch's reads go to this node's cores in threads (the compiled
    kernel releases the GIL), each thread with its own cache arrays: the same hits as one pass."""
    hits = np.zeros(cols.size, np.bool_)
    if order.size == 0:
        return hits
    ordered_switches = switches[order]
    bounds = np.concatenate(([0], np.flatnonzero(ordered_switches[1:] != ordered_switches[:-1]) + 1, [order.size]))
    del ordered_switches
    runs = list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
    runs.sort(key=lambda run: run[0] - run[1])  # the longest first, so that no thread is left with one at the end
    next_run = in_turn(runs)

    def worker() -> None:
        tags = np.empty((max(n_sets, 1), ways), np.int64)
        used = np.empty((max(n_sets, 1), ways), np.int64)
        present = np.full(n_cols if unbounded else 1, -1, np.int64)
        for start, stop in iter(next_run, None):
            _switch_cache(
                order[start:stop], switches, cols, times, fill_delays, n_sets, ways, unbounded, tags, used, present, hits
            )

    on_threads(worker, min(node_cores(), len(runs)))
    return hits


@njit(nogil=True, cache=True)
def _switch_cache(order, switches, cols, times, fill_delays, n_sets, ways, unbounded, tags, used, present, hits):
    """:func:`property_cache` for the reads ``order`` of one switch, written to ``hits``; ``tags``, ``used`` and
    ``present`` are the caller's scratch (reset here, except ``present``, marked by switch)."""
    n = order.size
    switch = switches[order[0]]
    keys = np.empty(n + 1, np.int64)
    values = np.empty(n + 1, np.int64)
    tags[:, :] = -1
    used[:, :] = 0
    size = 0
    for i in range(n):
        j = order[i]
        now = times[j]
        while size > 0 and keys[0] <= now:
            fill_time, col, size = heap_pop(keys, values, size)
            if unbounded:
                present[col] = switch
                continue
            row = col % n_sets
            victim = 0
            found = False
            for way in range(ways):
                if tags[row, way] == col:
                    victim = way
                    found = True
                    break
                if used[row, way] < used[row, victim]:
                    victim = way
            if not found:
                tags[row, victim] = col
            used[row, victim] = fill_time + 1
        col = cols[j]
        if unbounded:
            hit = present[col] == switch
        else:
            row = col % n_sets
            hit = False
            for way in range(ways):
                if tags[row, way] == col:
                    hit = True
                    used[row, way] = now + 1
                    break
        hits[j] = hit
        if not hit:
            size = heap_push(keys, values, size, now + fill_delays[j], col)


@njit(cache=True)
def cache_lookups(index, requester, pair, times, node_switch, uplink_cycles, round_trip_cycles):
    """For the reads ``index`` that leave their switch: the switch whose cache each one meets, when it meets
    it (issue time + the requester's uplink latency) and the cycles until a miss's fill returns (the
    pair's round trip, ``round_trip_cycles[requester n + owner]`` = ``pair``). One pass; every term is a
    table lookup of the read's requester or pair."""
    switch = np.empty(index.size, np.int64)
    lookup = np.empty(index.size, np.int64)
    fill = np.empty(index.size, np.int64)
    for i in range(index.size):
        read = index[i]
        node = requester[read]
        switch[i] = node_switch[node]
        lookup[i] = times[read] + uplink_cycles[node]
        fill[i] = round_trip_cycles[pair[read]]
    return switch, lookup, fill


@njit(nogil=True, cache=True)  # in a second thread beside NetSparse (sparsewire.sim.netsparse.simulator.headline)
def unique_destinations_per_window(node_starts, cols, remote, col_owner, window):
    """Average number of distinct destinations in consecutive, non-overlapping windows of ``window`` PRs
    of each node's SA stream (a node's last, shorter window counts when it is its only one). The stream of
    node i is the owner ``col_owner[cols[e]]`` of every remote nonzero e (``remote[e]``) in
    ``node_starts[i]:node_starts[i + 1]``, in order; read in place, with no array of the PRs. Returns (sum of
    distinct counts, number of windows)."""
    n_nodes = node_starts.size - 1
    seen = np.full(col_owner.max() + 1 if col_owner.size else 1, -1, np.int64)
    total = 0
    windows = 0
    stamp = 0
    for node in range(n_nodes):
        stamp += 1
        distinct = 0
        in_window = 0
        closed = 0
        for e in range(node_starts[node], node_starts[node + 1]):
            if not remote[e]:
                continue
            d = col_owner[cols[e]]
            if seen[d] != stamp:
                seen[d] = stamp
                distinct += 1
            in_window += 1
            if in_window == window:
                total += distinct
                windows += 1
                closed += 1
                stamp += 1
                distinct = 0
                in_window = 0
        if closed == 0 and in_window > 0:
            total += distinct
            windows += 1
    return total, windows


@njit(nogil=True, cache=True)  # nodes go to threads (sparsewire.sim.netsparse.baselines)
def core_requests(cols, remote, col_owner, cores, n_nodes, stamp, stamp_base):
    """SAOpt's reads of one node (:func:`sparsewire.sim.netsparse.baselines.sa_opt`): nonzero ``e`` of the
    node's ``n`` belongs to core ``e cores // n``; a core reads each remote column once. Returns the reads
    per (core, owner node). ``stamp`` (per column, shared across nodes) marks the core that last read a
    column as ``stamp_base + core``; the caller gives each node bases past every earlier one. One pass
    over the nonzeros instead of sorting (core, column) keys."""
    n = cols.size
    reads = np.zeros((cores, n_nodes), np.int64)
    for e in range(n):
        if remote[e]:
            core = (e * cores) // n
            col = cols[e]
            if stamp[col] != stamp_base + core:
                stamp[col] = stamp_base + core
                reads[core, col_owner[col]] += 1
    return reads


def order_by(groups: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Not collective. ``np.lexsort((times, groups))``: by group, then time, ties in their order. Where the key
    ``(group (T + 1) + time - t0) 2^b + position`` (b bits for the positions) fits 63 bits, one in-place
    ``sort`` of it (the keys are distinct, so any sort is stable) and the positions read back from its low
    bits: 30x faster than lexsort on 35M requests, the same order. The requests mostly come grouped and in time
    order already (a node's reads in issue order), so where fewer than a third of the keys are smaller than
    the one before, NumPy's run-adaptive stable sort (4-12x faster than the split sort on such keys,
    timed on the same keys, 4-15M requests of ``netsparse rmat:21:16``), else the quicksort on all cores
    (:func:`sparsewire._lib.distinct.sort_in_place`). Otherwise one stable argsort of ``group (T + 1) + time - t0``,
    or lexsort where that does not fit 63 bits either."""
    if times.size == 0:
        return np.zeros(0, np.int64)
    if not (np.issubdtype(times.dtype, np.integer) and np.issubdtype(groups.dtype, np.integer)):
        return np.lexsort((times, groups))
    low, high = int(times.min()), int(times.max())
    span = high - low + 1
    largest = int(groups.max()) * span + span - 1  # the largest group-and-time key
    if largest >= 2**62 or int(groups.min()) < 0:
        return np.lexsort((times, groups))
    position_bits = int(times.size - 1).bit_length()
    if largest.bit_length() + position_bits > 63:
        key = groups.astype(np.int64) * span
        key += times
        key -= low
        return np.argsort(key, kind="stable")
    key = _positioned_keys(groups, times, span, low, position_bits)
    if 3 * _descents(key) < key.size:
        key.sort(kind="stable")
    else:
        sort_in_place(key)
    key &= (1 << position_bits) - 1
    return key


@njit(cache=True)
def _descents(key):
    """How many elements are smaller than the one before (one pass, no temporary)."""
    count = 0
    for i in range(1, key.size):
        if key[i] < key[i - 1]:
            count += 1
    return count


@njit(cache=True)
def _positioned_keys(groups, times, span, low, position_bits):
    """``((group span + time - low) << position_bits) | position`` of every element, in one pass."""
    key = np.empty(times.size, np.int64)
    for i in range(times.size):
        key[i] = ((np.int64(groups[i]) * span + times[i] - low) << position_bits) | i
    return key
