"""Predicted time of a communication plan on a modelled network, with a compute model per rank.

Rank r runs on host r. For every step s of a plan (:class:`~sparsewire.plan.stats.PlanStats`), the
messages between each (source, destination) pair become one flow of

    wire_bytes = bytes + packets * header,   packets = ceil(bytes / (mtu - header))

over the pair's route; the max-min solver (:mod:`sparsewire.sim.flows`) gives each flow's
completion, and

    finish(flow) = overhead * messages sent by its source in s + completion + path latency,
    T_s = max over flows of finish(flow),      T_comm = sum_s T_s

(steps run one after the other: a relayed row leaves the proxy only after it arrived). The lower
bound of a step is ``max over links of load / capacity`` plus the smallest path latency.

Compute model (CoLa sec. 5 / SHIRO sec. VII measure the same split): rank r multiplies its
diagonal block (``d_r`` nonzeros) and its received rows (``o_r`` off-diagonal nonzeros) at
``rate`` nonzero-columns per second (``sparsewire calibrate`` measures it on this machine). The
``overlap`` executor multiplies the diagonal block while messages fly:

    T_r = max(T_comm, d_r * k / rate) + o_r * k / rate,      T = max_r T_r.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.distinct import distinct
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition
from sparsewire.plan.stats import PlanStats
from sparsewire.sim.flows import solve_max_min
from sparsewire.sim.network import Network

__all__ = ["StepTime", "PlanTime", "wire_bytes", "simulate_plan", "rank_nonzeros"]


@dataclass(frozen=True)
class StepTime:
    """One plan step: predicted seconds, its lower bound, the slowest receiving rank, flows."""

    step: int
    seconds: float
    lower_bound_seconds: float
    slowest_rank: int
    flows: int
    bytes: int


@dataclass(frozen=True)
class PlanTime:
    """Predicted communication (per step and in all), compute and total time of one plan."""

    strategy: str
    steps: list[StepTime]
    communication_seconds: float
    lower_bound_seconds: float
    compute_seconds: float
    total_seconds: float
    slowest_rank: int

    def as_dict(self) -> dict:
        """Not collective. The JSON fields of ``sparsewire simulate``."""
        return {
            "name": self.strategy,
            "communication_seconds": self.communication_seconds,
            "lower_bound_seconds": self.lower_bound_seconds,
            "compute_seconds": self.compute_seconds,
            "total_seconds": self.total_seconds,
            "slowest_rank": self.slowest_rank,
            "steps": [
                {
                    "step": s.step,
                    "seconds": s.seconds,
                    "lower_bound_seconds": s.lower_bound_seconds,
                    "slowest_rank": s.slowest_rank,
                    "flows": s.flows,
                    "bytes": s.bytes,
                }
                for s in self.steps
            ],
        }


def wire_bytes(payload: np.ndarray, network: Network) -> np.ndarray:
    """Not collective. Payload plus one ``packet_header_bytes`` per packet of at most ``mtu`` bytes."""
    payload = np.asarray(payload, np.int64)
    room = network.mtu - network.packet_header_bytes
    if room <= 0:
        raise InputError(
            f"network {network.name!r}: MTU {network.mtu} leaves no room after {network.packet_header_bytes}-byte headers"
        )
    packets = -(-payload // room)
    return payload + packets * network.packet_header_bytes


def rank_nonzeros(matrix: sp.sparray, row_partition: RowPartition, col_partition: RowPartition) -> tuple[np.ndarray, np.ndarray]:
    """Not collective. Per rank: nonzeros of its diagonal block and of its off-diagonal blocks."""
    coo = sp.coo_array(matrix)
    rows = np.asarray(row_partition.owner(coo.row), np.int64)
    cols = np.asarray(col_partition.owner(coo.col), np.int64)
    n = row_partition.n_parts
    diagonal = np.bincount(rows[rows == cols], minlength=n)
    off = np.bincount(rows[rows != cols], minlength=n)
    return diagonal.astype(np.int64), off.astype(np.int64)


def simulate_plan(
    stats: PlanStats,
    network: Network,
    *,
    diagonal_nonzeros: np.ndarray | None = None,
    off_diagonal_nonzeros: np.ndarray | None = None,
    compute_rate: float | None = None,
) -> PlanTime:
    """Not collective. Predicted time of one plan (module docstring). Without ``compute_rate`` the compute terms
    are zero (communication only)."""
    n = stats.n_ranks
    if n > network.n_hosts:
        raise InputError(f"{n} ranks do not fit network {network.name!r} with {network.n_hosts} hosts (one rank per host)")
    steps = []
    for step in distinct(stats.steps):
        mask = stats.steps == step
        sources, destinations = stats.sources[mask].astype(np.int64), stats.destinations[mask]  # block's are 32-bit
        keys, inverse = np.unique(sources * n + destinations, return_inverse=True)
        pair_bytes = np.bincount(inverse, weights=stats.message_bytes[mask]).astype(np.int64)
        pair_messages = np.bincount(inverse, weights=stats.message_counts[mask]).astype(np.int64)
        pair_sources, pair_destinations = keys // n, keys % n
        sizes = wire_bytes(pair_bytes, network)
        offsets, links = network.route_lists(pair_sources, pair_destinations)
        result = solve_max_min(offsets, links, sizes.astype(np.float64), network.capacities)
        sent_messages = np.bincount(pair_sources, weights=pair_messages, minlength=n)
        latency = network.path_latency(pair_sources, pair_destinations)
        finish = network.message_overhead * sent_messages[pair_sources] + result.finish + latency
        slowest = int(np.argmax(finish))
        steps.append(
            StepTime(
                int(step),
                float(finish[slowest]),
                result.lower_bound + float(latency.min()),
                int(pair_destinations[slowest]),
                int(keys.size),
                int(sizes.sum()),
            )
        )
    communication = sum(s.seconds for s in steps)
    bound = sum(s.lower_bound_seconds for s in steps)
    compute = 0.0
    total = communication
    slowest_rank = max(steps, key=lambda s: s.seconds).slowest_rank if steps else 0
    if compute_rate is not None:
        if compute_rate <= 0:
            raise InputError(f"the compute rate must be positive (got {compute_rate})")
        if diagonal_nonzeros is None or off_diagonal_nonzeros is None:
            raise InputError("a compute model needs the diagonal and off-diagonal nonzeros of every rank")
        diagonal_time = np.asarray(diagonal_nonzeros, np.float64) * stats.k / compute_rate
        off_time = np.asarray(off_diagonal_nonzeros, np.float64) * stats.k / compute_rate
        per_rank = np.maximum(communication, diagonal_time) + off_time
        slowest_rank = int(np.argmax(per_rank))
        total = float(per_rank[slowest_rank])
        compute = float((diagonal_time + off_time)[slowest_rank])
    return PlanTime(stats.strategy.value, steps, communication, bound, compute, total, slowest_rank)
