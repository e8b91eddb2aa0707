"""Max-min fair flow-level network solver and link-load lower bounds.

A *phase* is a set of flows that all start at time 0, each with a size in bytes and a route (a list
of directed links). At any moment the active flows share the links max-min fairly, computed by
progressive filling (water filling): repeatedly take the link whose remaining capacity divided by
its number of unfrozen flows is smallest, give each of those flows that rate, freeze them and take
their rate off every link they cross. Rates stay fixed until the next flow completes (the event);
then the survivors are refilled. This is what an RDMA fabric with round-robin arbitration gives,
and what SimGrid's CM02 model computes with zero latencies (``../shared/research/simulation.md``;
``tests/golden/`` holds SimGrid results this solver is checked against).

Latency, per-message software overhead and per-packet headers are added outside the solver by the
callers (:mod:`sparsewire.sim.plan_timing`, :mod:`sparsewire.sim.netsparse.simulator`): a flow's finish time is
``max-min completion + path latency``.

The lower bound of a phase is ``max over links of (bytes crossing the link) / capacity``: no
schedule can finish before its busiest link has carried its load.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sparsewire._lib.jit import njit
from sparsewire.errors import InputError
from sparsewire.sim.heap import heap_pop, heap_push

__all__ = ["FlowResult", "solve_max_min", "link_loads", "lower_bound"]

_RELATIVE_TOLERANCE = 1e-12


@njit(cache=True)
def _progressive_filling(active, flow_offsets, flow_links, link_offsets, link_flows, capacities, rates):
    """Max-min fair rates of the active flows (rates[f] = 0 for inactive ones).

    Links wait in a min-heap keyed by their fair share ``remaining / unfrozen flows``. Freezing
    flows at the smallest share never lowers another link's share (``(c - r) / (n - 1) >= c / n``
    when ``r <= c / n``), so stale heap keys are only ever too small: a popped link whose share has
    grown is pushed back with its new key (lazy update)."""
    n_links = capacities.size
    remaining = capacities.copy()
    unfrozen_count = np.zeros(n_links, np.int64)
    n_flows = active.size
    frozen = np.zeros(n_flows, np.bool_)
    for f in range(n_flows):
        rates[f] = 0.0
        if active[f]:
            for position in range(flow_offsets[f], flow_offsets[f + 1]):
                unfrozen_count[flow_links[position]] += 1
        else:
            frozen[f] = True
    capacity = n_links + flow_links.size + 1
    keys = np.empty(capacity, np.float64)
    values = np.empty(capacity, np.int64)
    size = 0
    for link in range(n_links):
        if unfrozen_count[link] > 0:
            size = heap_push(keys, values, size, remaining[link] / unfrozen_count[link], link)
    while size > 0:
        key, link, size = heap_pop(keys, values, size)
        if unfrozen_count[link] == 0:
            continue
        share = remaining[link] / unfrozen_count[link]
        if share > key * (1.0 + 1e-12) and size > 0 and keys[0] < share:
            size = heap_push(keys, values, size, share, link)
            continue
        for position in range(link_offsets[link], link_offsets[link + 1]):
            f = link_flows[position]
            if frozen[f]:
                continue
            frozen[f] = True
            rates[f] = share
            for q in range(flow_offsets[f], flow_offsets[f + 1]):
                other = flow_links[q]
                remaining[other] -= share
                unfrozen_count[other] -= 1
        remaining[link] = 0.0
        unfrozen_count[link] = 0
    return rates


@njit(cache=True)
def _link_index_compiled(flow_offsets, flow_links, n_links):
    n_flows = flow_offsets.size - 1
    link_offsets = np.zeros(n_links + 1, np.int64)
    for position in range(flow_links.size):
        link_offsets[flow_links[position] + 1] += 1
    for link in range(n_links):
        link_offsets[link + 1] += link_offsets[link]
    fill = link_offsets[:-1].copy()
    link_flows = np.empty(flow_links.size, np.int64)
    for f in range(n_flows):
        for position in range(flow_offsets[f], flow_offsets[f + 1]):
            link = flow_links[position]
            link_flows[fill[link]] = f
            fill[link] += 1
    return link_offsets, link_flows


@njit(cache=True)
def _compact(active, ids, flow_offsets, flow_links, sizes, left):
    """Keep only the active flows (so the work per event follows the flows still running)."""
    keep = np.flatnonzero(active)
    offsets = np.zeros(keep.size + 1, np.int64)
    for i in range(keep.size):
        f = keep[i]
        offsets[i + 1] = offsets[i] + flow_offsets[f + 1] - flow_offsets[f]
    links = np.empty(offsets[-1], np.int64)
    for i in range(keep.size):
        start = flow_offsets[keep[i]]
        for q in range(offsets[i + 1] - offsets[i]):  # (a slice assignment compiles Numba's shape-mismatch message: 4 s)
            links[offsets[i] + q] = flow_links[start + q]
    return ids[keep].copy(), offsets, links, sizes[keep].copy(), left[keep].copy()


@njit(nogil=True, cache=True)  # SAOpt's flows are solved in a second thread (sparsewire.sim.netsparse.simulator.headline)
def _solve(flow_offsets, flow_links, sizes, capacities, tolerance):
    n_total = sizes.size
    finish = np.zeros(n_total, np.float64)
    ids = np.arange(n_total)
    left = sizes.copy()
    active = sizes > 0.0
    ids, flow_offsets, flow_links, sizes, left = _compact(active, ids, flow_offsets, flow_links, sizes, left)
    link_offsets, link_flows = _link_index_compiled(flow_offsets, flow_links, capacities.size)
    n_flows = sizes.size
    active = np.ones(n_flows, np.bool_)
    n_active = n_flows
    rates = np.zeros(n_flows, np.float64)
    now = 0.0
    events = 0
    while n_active > 0:
        if n_active < n_flows - n_flows // 32:  # compacting keeps the order, so the arithmetic is unchanged
            ids, flow_offsets, flow_links, sizes, left = _compact(active, ids, flow_offsets, flow_links, sizes, left)
            link_offsets, link_flows = _link_index_compiled(flow_offsets, flow_links, capacities.size)
            n_flows = sizes.size
            active = np.ones(n_flows, np.bool_)
            rates = np.zeros(n_flows, np.float64)
        _progressive_filling(active, flow_offsets, flow_links, link_offsets, link_flows, capacities, rates)
        step = np.inf
        for f in range(n_flows):
            if active[f] and rates[f] > 0.0:
                candidate = left[f] / rates[f]
                if candidate < step:
                    step = candidate
        if step == np.inf:
            break
        now += step
        events += 1
        for f in range(n_flows):
            if active[f]:
                left[f] -= rates[f] * step
                # Flows finishing within rounding of this event finish now (ties are common).
                if left[f] <= tolerance * sizes[f] or left[f] <= rates[f] * step * 1e-9:
                    left[f] = 0.0
                    active[f] = False
                    finish[ids[f]] = now
                    n_active -= 1
    return finish, events


@dataclass(frozen=True)
class FlowResult:
    """Completion time of every flow (seconds, without latency), the makespan, the number of
    solver events, and the lower bound with its busiest link."""

    finish: np.ndarray
    makespan: float
    events: int
    lower_bound: float
    bottleneck_link: int


def link_loads(flow_offsets: np.ndarray, flow_links: np.ndarray, sizes: np.ndarray, n_links: int) -> np.ndarray:
    """Not collective. Bytes crossing every link: the sum of the sizes of the flows whose route holds it."""
    counts = np.diff(flow_offsets)
    return np.bincount(flow_links, weights=np.repeat(np.asarray(sizes, np.float64), counts), minlength=n_links)


def lower_bound(flow_offsets: np.ndarray, flow_links: np.ndarray, sizes: np.ndarray, capacities: np.ndarray) -> tuple[float, int]:
    """Not collective. ``max_l load_l / capacity_l`` and the link attaining it (-1 when nothing moves)."""
    loads = link_loads(flow_offsets, flow_links, sizes, capacities.size)
    if loads.size == 0 or loads.max(initial=0.0) == 0.0:
        return 0.0, -1
    times = loads / capacities
    link = int(np.argmax(times))
    return float(times[link]), link


def solve_max_min(flow_offsets: np.ndarray, flow_links: np.ndarray, sizes: np.ndarray, capacities: np.ndarray) -> FlowResult:
    """Not collective. Completion time of every flow of one phase under max-min fair sharing (module docstring).

    ``flow_offsets``/``flow_links``: routes as CSR (flow f crosses ``flow_links[flow_offsets[f]:
    flow_offsets[f+1]]``); ``sizes`` in bytes; ``capacities`` in bytes/s per link, finite and positive (a zero, negative
    or NaN capacity is an InputError: the flows on it would never finish). Zero-size flows
    finish at 0.
    """
    flow_offsets = np.asarray(flow_offsets, np.int64)
    flow_links = np.asarray(flow_links, np.int64)
    sizes = np.asarray(sizes, np.float64)
    capacities = np.asarray(capacities, np.float64)
    if flow_offsets.size != sizes.size + 1:
        raise InputError(f"{sizes.size} flow sizes but {flow_offsets.size - 1} routes")
    if np.any(~np.isfinite(sizes)) or np.any(sizes < 0):
        raise InputError("flow sizes must be finite and non-negative")
    if flow_links.size and (flow_links.min() < 0 or flow_links.max() >= capacities.size):
        raise InputError("a route names a link the network does not have")
    bad_link = ~(np.isfinite(capacities) & (capacities > 0))  # NaN fails both comparisons
    if bad_link.any():
        first = int(np.argmax(bad_link))
        raise InputError(f"link {first} has capacity {capacities[first]}; every link needs a finite positive capacity (bytes/s)")
    empty_route = (np.diff(flow_offsets) == 0) & (sizes > 0)
    if empty_route.any():
        raise InputError(f"flow {int(np.argmax(empty_route))} has bytes but no links (a host to itself?)")
    finish, events = _solve(flow_offsets, flow_links, sizes, capacities, _RELATIVE_TOLERANCE)
    bound, link = lower_bound(flow_offsets, flow_links, sizes, capacities)
    return FlowResult(finish, float(finish.max(initial=0.0)), int(events), bound, link)
