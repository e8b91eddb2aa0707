"""The cost model: predicted time per multiply of a plan's volumes (:class:`~sparsewire.plan.stats.PlanStats`)
under a :class:`~sparsewire.topology.model.Topology`: its messages over the link classes
(:func:`predicted_communication_seconds`) and its ranks' local products (:func:`local_parts`), added or, where
the mode multiplies the diagonal block while messages are in flight, partly hidden behind the messages
(:func:`predicted_seconds`), where the topology carries a measured local rate (``calibrate --network``), and where
the overlap schedule works on the messages between groups while others cross, that work beside the stream too
(:func:`beside_parts`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from sparsewire._lib.distinct import distinct
from sparsewire.errors import InputError
from sparsewire.topology.model import Topology

if TYPE_CHECKING:  # for annotations only: stats imports this module
    from sparsewire.plan.stats import PlanStats

__all__ = [
    "predicted_seconds",
    "predicted_communication_seconds",
    "predicted_local_seconds",
    "predicted_relay_seconds",
    "local_parts",
    "beside_parts",
    "message_copies",
    "INTER_GROUP_COPIES",
    "INTRA_GROUP_COPIES",
    "NEAR_TIE",
    "preferred",
    "plan_steps",
]


def _topology_of(stats: PlanStats, topology: Topology | None) -> Topology:
    topology = topology or stats.topology
    if topology is None:
        raise InputError("a predicted time needs a topology; pass topology= or compute the stats with one")
    return topology


def predicted_seconds(
    stats: PlanStats,
    topology: Topology | None = None,
    *,
    steps_in_flight: int | None = None,
    overlaps_diagonal: bool = False,
    beside_stream: bool = False,
) -> float:
    """Not collective. Time per multiply from the communication time ``T_comm``
    (:func:`predicted_communication_seconds`) and each rank's local work split as :func:`local_parts` does, into
    the diagonal block ``d_r`` (the product that needs no message) and the rest ``w_r`` (packing, the received
    rows' products, the copies):

    - ``overlaps_diagonal`` (every mode but ``bulk``, :attr:`~sparsewire.plan.modes.Mode.overlaps_diagonal`: the
      diagonal block is multiplied while the first messages are in flight, PETSc's MatMult ordering), on whole
      messages: ``T = max_r (T_comm + d_r - h min(T_comm, d_r) + w_r)``, h the topology's measured ``overlap`` (the
      fraction of a stream that ranks computing at the same time hide, ``calibrate --network``; 1 where unknown,
      which is ``max(T_comm, d_r) + w_r``);
    - and where the overlap schedule works on the messages to and from another group while other messages cross
      (``beside_stream``, :func:`~sparsewire.exec.options.cuts_messages`: on a plan that relays nothing each message
      goes in pieces, each packed and applied while the next crosses; on one that relays a step's whole messages
      are applied while the next step's cross, and a relay's are packed as its inputs arrive), the part ``p_r`` of
      ``w_r`` on them (:func:`beside_parts`) runs while the stream left after the diagonal block,
      ``S_r = T_comm - h min(T_comm, d_r)``, crosses, and that stream takes ``(1 - h_p)`` of the cores' time:
      ``T = max_r (d_r + max(S_r, (1 - h_p) S_r + p_r) + w_r - p_r)``, h_p the topology's measured
      ``piece_overlap`` (a stream in pieces with the work done between them, measured with the two about as long,
      where ``together = (1 - h_p) stream + work``); with none measured, the first form;
    - otherwise (``bulk`` multiplies it before it sends): ``T = T_comm + max_r (d_r + w_r)``, i.e.
      ``T_comm`` + :func:`predicted_local_seconds`.

    ``T_comm`` alone where the topology has no measured local rate or the stats no per-rank work; without the
    diagonal split (``block``) the sum. Why a measured h: on the emulated cluster the modes that overlap ran
    faster than the sum, except where the cores that compute also move the bytes through the network stack,
    where they hid almost nothing (docs/strategies.md and docs/design-decisions.md, "Cost model and the link").
    Why a second fraction for the pieces: on the emulated 4 nodes x 1 rank at 1 Gbit/s a stream stopped while a
    rank ran one long call (h 0.00-0.24), and the plans whose local work is mostly the received rows' ran within 4%
    of ``T_comm``, predicted 1.25-1.35x that with their work after the link; work between pieces took the cores
    from the stream as ``(1 - h_p) S_r + p_r`` says at three sizes of the work. On 2 nodes x 2 ranks at 1 Gbit/s
    the relaying plans, priced with their work after the link, ran at 0.68-0.85 of that; a trace showed each rank
    applying its first step's messages while the second step's crossed (docs/design-decisions.md)."""
    topology = _topology_of(stats, topology)
    communication = predicted_communication_seconds(stats, topology, steps_in_flight=steps_in_flight)
    parts = local_parts(stats, topology)
    if parts is None:
        return communication
    diagonal, rest = parts
    if overlaps_diagonal:  # an unknown diagonal block (0) hides nothing: the sum
        stream = communication - (1.0 if topology.overlap is None else topology.overlap) * np.minimum(communication, diagonal)
        aside = beside_parts(stats, topology) if beside_stream and topology.piece_overlap is not None else None
        if aside is None:
            return float((diagonal + stream + rest).max())
        beside = np.maximum(stream, (1.0 - topology.piece_overlap) * stream + aside)
        return float((diagonal + beside + rest - aside).max())
    return communication + float((diagonal + rest).max())


def local_parts(stats: PlanStats, topology: Topology | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """Not collective. Per rank r, seconds of local work per multiply in two parts: ``d_r = D_r * k / local_rate``
    (its diagonal block's nonzeros :attr:`~sparsewire.plan.stats.PlanStats.rank_diagonal_entries`; 0 where not
    known) and ``w_r = (e_r - D_r) * k / local_rate + c_r / copy_rate``, where ``e_r`` is the
    nonzeros of every sparse operator rank r applies (its diagonal block, its send matrices, which pack copied B
    rows, relayed rows and computed partial C rows, and its receive matrices, which apply what arrives; each
    nonzero a k-wide multiply-add, :attr:`~sparsewire.plan.stats.PlanStats.rank_entries`), ``c_r`` the bytes its
    messages are copied (:func:`message_copies`: twice at each end of a message between groups, once inside one),
    and the two rates the topology's, measured on every rank of the job at once (so
    cores shared by ranks, or by ranks and the network stack, are in them; ``calibrate --network``). None where
    either rate or the per-rank work is unknown.

    Contention: ``w_r`` runs while messages arrive, when the ranks whose messages are in wait (yielding their
    cores where ranks share them), so a rank with more of it than the others runs up to the rates one rank gets
    alone: its products ``(e_r - D_r) k`` at ``local_rate_alone`` and its copies at ``copy_rate_alone`` (measured by
    ``calibrate --network``; each taken as the all-at-once rate where unknown or below it), ``v_r``; but the ranks
    with more than the mean cannot all be done before the cores have done the mean's work:
    ``w_r <- max(v_r, min(w_r, mean_s w_s))`` (``w_r`` itself where both rates alone are the shared ones). The
    two ratios differ: the kernel shares cores, the copy the memory's bandwidth (on the emulated 4x1 cluster, 4
    ranks on 2 cores, the copy slowed more than the kernel). Why: a plan whose rank 0 receives ten times the others'
    bytes had been predicted well above its measured time with the whole ``w_r`` after the link
    (docs/strategies.md, docs/design-decisions.md, "Cost model and the link")."""
    parts = _contended_parts(stats, topology)
    return None if parts is None else parts[:2]


def _contended_parts(stats: PlanStats, topology: Topology | None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`local_parts`'s ``d_r`` and ``w_r``, and ``w_r`` before contention (all rates the shared ones)."""
    topology = _topology_of(stats, topology)
    if topology.local_rate is None or topology.copy_rate is None or stats.rank_entries is None or not stats.rank_entries.size:
        return None
    entries, diagonal_entries = stats.rank_entries, stats.rank_diagonal_entries
    if diagonal_entries is None:
        diagonal_entries = np.zeros_like(entries)
    products = (entries - diagonal_entries) * stats.k
    copies = message_copies(stats, topology)
    rest = products / topology.local_rate + copies / topology.copy_rate
    alone = products / max(topology.local_rate_alone or 0.0, topology.local_rate) + copies / max(
        topology.copy_rate_alone or 0.0, topology.copy_rate
    )
    return diagonal_entries * stats.k / topology.local_rate, np.maximum(alone, np.minimum(rest, rest.mean())), rest


def beside_parts(stats: PlanStats, topology: Topology | None = None) -> np.ndarray | None:
    """Not collective. Per rank, the part ``p_r`` of :func:`local_parts`'s ``w_r`` on the messages to and from another
    group, which the overlap schedule works on while other messages cross: ``(C_r k / local_rate + x_r / copy_rate)
    * w_r / u_r``, ``C_r`` the nonzeros of :attr:`~sparsewire.plan.stats.PlanStats.rank_inter_group_entries`, ``x_r``
    the bytes its messages to and from another group are copied (:func:`message_copies` of those alone), ``u_r``
    ``w_r`` at the rates all ranks share (the contention that scales ``w_r`` scales its part alike). None where
    ``w_r`` or the inter-group entries are unknown; zero where no message leaves a group."""
    topology = _topology_of(stats, topology)
    parts = _contended_parts(stats, topology)
    if parts is None or stats.rank_inter_group_entries is None:
        return None
    _, rest, shared = parts
    if not stats.rank_inter_group_entries.any():
        return np.zeros_like(rest)
    copies = _at_both_ends(stats, INTER_GROUP_COPIES * stats.message_bytes * stats.inter_group(topology))
    work = stats.rank_inter_group_entries * stats.k / topology.local_rate + copies / topology.copy_rate
    return work * np.divide(rest, shared, out=np.ones_like(rest), where=shared > 0)


INTER_GROUP_COPIES = 2  # per end of a message between groups (message_copies)
INTRA_GROUP_COPIES = 1  # per end of a message inside a group


def message_copies(stats: PlanStats, topology: Topology | None = None) -> np.ndarray:
    """Not collective. Per rank, the bytes its messages are copied per multiply, ``c_r = sum over its messages
    (sent and received) of copies x bytes``: :data:`INTER_GROUP_COPIES` at each end of a message between groups
    (packed and handed to the network stack, taken from it and applied), :data:`INTRA_GROUP_COPIES` at each end of
    one inside a group, which the MPI library moves through shared memory. Why not two everywhere: on the emulated
    cluster, the plans that move the most bytes inside a node were over-predicted with two copies and within 25%
    with one (docs/strategies.md, "Cost model")."""
    copies = np.where(stats.inter_group(_topology_of(stats, topology)), INTER_GROUP_COPIES, INTRA_GROUP_COPIES)
    return _at_both_ends(stats, copies * stats.message_bytes)


def _at_both_ends(stats: PlanStats, weights: np.ndarray) -> np.ndarray:
    """Per rank, the sum of ``weights`` (one per message) over the messages it sends and those it receives."""
    return np.bincount(stats.sources, weights=weights, minlength=stats.n_ranks) + np.bincount(
        stats.destinations, weights=weights, minlength=stats.n_ranks
    )


def predicted_local_seconds(stats: PlanStats, topology: Topology | None = None) -> float:
    """Not collective. The busiest rank's local work per multiply, ``max_r (d_r + w_r)`` of :func:`local_parts`
    (without contention, ``a = 1``: ``max_r (e_r * k / local_rate + c_r / copy_rate)``). 0 where
    either rate or the per-rank work is unknown."""
    parts = local_parts(stats, topology)
    return 0.0 if parts is None else float((parts[0] + parts[1]).max())


def predicted_communication_seconds(
    stats: PlanStats, topology: Topology | None = None, *, steps_in_flight: int | None = None
) -> float:
    """Not collective. Communication time per multiply under the topology's link classes.

    For every step s, link class c and rank x, with m messages and b bytes that x sends over class
    c in step s (and m', b' that it receives):
    ``t(s, c, x) = max(m (latency_c + overhead_c) + b / bandwidth_c, m' (...) + b' / bandwidth_c)``.
    A step lasts as long as its slowest (class, rank): its parts are in flight together (SHIRO
    Alg. 1 overlaps the intra- and inter-group halves of each stage; CoLa Alg. 3 overlaps round
    d+1's inter-group fetch with round d's distribution). Steps run one after the other:
    ``T = sum_s max_{c, x} t(s, c, x)`` over the classes that are not ``shared``.

    A ``shared`` link class is one full-duplex link per level-0 group g (a node's network card, as
    ``calibrate --network`` measures it): every rank of g sends and receives through it, so per
    direction ``t_c(S) = max_x sum_{s in S} m (latency_c + overhead_c) + max_g sum_{s in S} b_g / bandwidth_c``
    over a set of steps S. Where the plan has no more steps than the mode keeps in flight (``steps_in_flight``,
    :attr:`~sparsewire.plan.modes.Mode.steps_in_flight`; None: every step) the traffic of every step queues on it
    together: ``T = max(sum_s ..., max_c t_c(all steps))``; measured on the emulated cluster
    (docs/benchmarks.md) the sum over steps overpredicted the two-level strategies 1.5x there,
    since their two steps cross the link in opposite directions. Otherwise (a pipelined plan of more rounds than
    two, each round's messages a permutation of the nodes; the partitioned mode, which relays whole steps) each
    step also lasts at least its own ``t_c({s})``: ``T = sum_s max(max_{c, x} t(s, c, x), max_c t_c({s}))``.

    Where the links of all groups together carry less than the sum of their rates (the shared class's
    ``aggregate``, measured by ``calibrate --network`` with every node sending at once), the bytes of all groups
    also queue on that: ``max_g b_g / bandwidth_c`` becomes ``max(max_g b_g / bandwidth_c, sum_g b_g / aggregate_c)``
    (on the emulated cluster the links together carried less than the sum of their rates alone, where the cores
    forward every node's bytes; docs/design-decisions.md, "Cost model and the link").

    A shared link's ``burst`` (bytes a rate limiter passes at once after idle, as a multiply between barriers
    finds it) comes off each group's bytes once per multiply: ``max(b_g - burst, 0)`` over all steps together,
    or in the first step where steps follow each other (``bench/cluster/link_burst.py`` measures what a link passes
    after idle against its sustained rate); the aggregate's own ``aggregate_burst``
    (measured with every node sending at once) off the bytes on the aggregate, ``max(sum_g b_g -
    aggregate_burst, 0)``: where the links set the aggregate it is about the links' bursts together, where a
    common path caps them (cores that forward for every node) what that path passes after idle. Why a burst of its
    own: each link's burst taken off the aggregate's bytes, or a threshold on the aggregate's share of the links,
    predicted the emulated cluster worse (docs/design-decisions.md, "Cost model and the link").

    Each step after the first also pays for its relays beyond their hops, :func:`predicted_relay_seconds`.
    """
    topology = _topology_of(stats, topology)
    levels = topology.link_levels(stats.sources, stats.destinations, stats.n_ranks)
    groups = topology.groups(stats.n_ranks)
    n_groups = int(groups.max()) + 1
    steps = distinct(stats.steps)
    steps_together = steps_in_flight is None or len(steps) <= steps_in_flight

    def shared_seconds(link, mask: np.ndarray, after_idle: bool) -> float:
        burst, aggregate_burst = (link.burst, link.aggregate_burst) if after_idle else (0.0, 0.0)
        slowest = 0.0
        for ranks in (stats.sources[mask], stats.destinations[mask]):
            counts = np.bincount(ranks, weights=stats.message_counts[mask], minlength=stats.n_ranks)
            per_group = np.bincount(groups[ranks], weights=stats.message_bytes[mask], minlength=n_groups)
            carrying = max(per_group.max() - burst, 0.0) / link.bandwidth
            if link.aggregate is not None:
                carrying = max(carrying, max(per_group.sum() - aggregate_burst, 0.0) / link.aggregate)
            slowest = max(slowest, float(counts.max() * (link.latency + link.overhead) + carrying))
        return slowest

    total = 0.0
    for position, step in enumerate(steps):
        slowest = 0.0
        for level_index, level in enumerate(topology.levels):
            mask = (stats.steps == step) & (levels == level_index)
            if not mask.any() or (level.link.shared and steps_together):
                continue
            if level.link.shared:
                slowest = max(slowest, shared_seconds(level.link, mask, position == 0))
                continue
            for ranks in (stats.sources[mask], stats.destinations[mask]):
                counts = np.bincount(ranks, weights=stats.message_counts[mask], minlength=stats.n_ranks)
                nbytes = np.bincount(ranks, weights=stats.message_bytes[mask], minlength=stats.n_ranks)
                slowest = max(slowest, float(level.link.seconds(counts, nbytes).max()))
        total += slowest
    if steps_together:
        for level_index, level in enumerate(topology.levels):
            mask = levels == level_index
            if level.link.shared and mask.any():
                total = max(total, shared_seconds(level.link, mask, True))
    return total + predicted_relay_seconds(stats, topology)


def predicted_relay_seconds(stats: PlanStats, topology: Topology | None = None) -> float:
    """Not collective. What a plan's relays add beyond their two hops: a message of a step after the plan's first
    leaves only once the message it forwards (a proxy's B rows, SHIRO Alg. 1 stage II) or sums (an aggregator's C
    rows) has arrived whole. Per such step s, ``relay_seconds + relay_seconds_per_byte * max_r b_r(s)``, ``b_r(s)`` the
    bytes rank r sends in s, at the price of the link class among those the plan crosses whose price is the highest
    (``calibrate --network`` times a relay on the job's own links; 0 where unknown), summed over the steps. Why: on
    the emulated cluster at 5 Gbit/s the two-level plans, predicted faster than ``joint`` by their fewer bytes, ran
    slower (docs/design-decisions.md, "A relay's store and forward")."""
    topology = _topology_of(stats, topology)
    steps = distinct(stats.steps)
    if steps.size < 2:
        return 0.0
    levels = topology.link_levels(stats.sources, stats.destinations, stats.n_ranks)
    crossed = [topology.levels[i].link for i in distinct(levels)]
    if not any(link.relay_seconds or link.relay_seconds_per_byte for link in crossed):
        return 0.0
    total = 0.0
    for step in steps[1:]:
        mask = stats.steps == step
        busiest = float(np.bincount(stats.sources[mask], weights=stats.message_bytes[mask], minlength=stats.n_ranks).max())
        total += max(link.relay_seconds + link.relay_seconds_per_byte * busiest for link in crossed)
    return total


NEAR_TIE = 0.02
"""Predicted times within this fraction of the least are one tie for :func:`preferred`: closer than that the model
does not order plans that relay and plans that do not (measured on the emulated cluster: docs/strategies.md,
"auto")."""

_Key = TypeVar("_Key", bound=Hashable)


def preferred(candidates: Mapping[_Key, tuple[float, int, int]]) -> _Key:
    """Not collective. The key of the candidate ``(predicted seconds, bytes, steps)`` to run: among those predicted
    within :data:`NEAR_TIE` of the least, ``seconds <= (1 + NEAR_TIE) min seconds``, the one of fewest steps (a
    step waits on the one before it: on the emulated cluster a relaying plan's slowest rank waited far longer for
    its sends than ``joint``'s, which the model does not price), then the least predicted time, then the fewest
    bytes."""
    least = min(seconds for seconds, _, _ in candidates.values())
    near = [key for key, (seconds, _, _) in candidates.items() if seconds <= least * (1 + NEAR_TIE)]
    return min(near, key=lambda key: (candidates[key][2], candidates[key][0], candidates[key][1]))


def plan_steps(stats: PlanStats) -> int:
    """Not collective. The plan's steps that carry a message (a step waits for the one before it)."""
    return int(np.unique(stats.steps).size)
