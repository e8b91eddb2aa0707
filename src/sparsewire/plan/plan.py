"""Communication plans for distributed SpMM ``C = A @ B`` with a 1D row partition.

A plan is computed once from the sparsity pattern, the partitions, the strategy and the topology,
and reused for every multiply with that pattern. Per rank it holds the diagonal block A(p, p) and a
list of :class:`Exchange` s. Each exchange is one round of messages:

* ``send_matrix`` packs: ``send_buffer = send_matrix @ [B_p ; receive buffer of input]``. A row of it
  is a B row (a single 1: select), a partial C row (A entries: multiply), a relayed B row (a 1 on a
  row of the input exchange's receive buffer: forward) or a summed partial C row (A entries and 1s
  on received partial rows: aggregate). Rows are grouped by destination.
* ``receive_matrix`` unpacks: ``C_p += receive_matrix @ receive_buffer`` (A entries on received B
  rows, 1s on received C rows; all-zero rows of it belong to rows this rank only relays).

So ``C_p = diagonal @ B_p + sum_e receive_matrix_e @ receive_buffer_e``.

Every transferred row is one *record* (kind, sender, receiver, key, round): key is the global column
j for B rows and the global row i for C rows; round is the group offset (group of the B owner minus
group of the C owner, modulo the number of groups). The kinds:

==============  ==========================================================  ===
kind            meaning                                                     hop
==============  ==========================================================  ===
``DIRECT_B``    owner q sends B row j to p (column-based)                   1
``DIRECT_C``    q sends p's partial row i (row-based)                       1
``FETCH_B``     q sends B row j to the proxy of p's group (hierarchical)    1
``PARTIAL_C``   q sends its partial row i to its group's aggregator          1
``FORWARD_B``   the proxy forwards B row j to p                             2
``AGGREGATE_C`` the aggregator sends p the sum of its group's partials of i  2
==============  ==========================================================  ===

Layouts: ``merged`` puts every hop-1 record in exchange 0 and every hop-2 record in exchange 1 (SHIRO
Alg. 1: stage I = inter-group B fetch with intra-group C aggregation, stage II = inter-group C with
intra-group B distribution). ``pipelined`` (CoLa Alg. 3) has one exchange for round 0 (traffic
inside groups) and, per remote round d, an exchange for its hop 1 (step d-1, double-buffered
receives) and one for its hop 2 (step d), so the slow transfer of round d+1 is in flight while
round d is distributed and computed. Exchanges of one step run concurrently.

Planning is receiver-driven: rank p decides how each of its off-diagonal nonzeros is served and
writes the records that serve it; one all-to-all hands each record to its sender (and to a relaying
receiver); every rank then assembles its matrices from the records it knows. :func:`build_plan` runs
this for all ranks without MPI, :func:`build_rank_plan_collective` on each rank over MPI; both run
the same code (:func:`_plan_ranks`), so the plans are identical. Over MPI the flat strategies with one
exchange take :mod:`sparsewire.plan.flat` instead (no records; the same plans, tested equal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.distinct import distinct
from sparsewire._lib.sizes import check_derived_fits, serial_planning_bytes
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.partition import RowPartition
from sparsewire.plan import hierarchy
from sparsewire.plan.assemble import assemble
from sparsewire.plan.blocks import LocalBlocks, check_partitions, split_local_rows
from sparsewire.plan.flat import build_flat_rank_plan, plans_flat
from sparsewire.plan.records import (
    BufferRows,
    RecordKeys,
    Records,
    check_key_space,
    deliver_all,
    exchange_boxes,
    request_records,
    unique_records,
)
from sparsewire.plan.strategies import Strategy, choose_row_based
from sparsewire.plan.types import (
    AGGREGATE_C,
    DIRECT_B,
    DIRECT_C,
    FETCH_B,
    FORWARD_B,
    LAYOUTS,
    PARTIAL_C,
    PROXY_POLICIES,
    RECORD_KINDS,
    CommPlan,
    Exchange,
    RankPlan,
    RecordKind,
)
from sparsewire.topology.model import Topology

GroupCall = Callable[[dict, Callable[[list], list]], dict]
Deliver = Callable[[dict], dict]
Progress = Callable[[str, int, int], None]

# The plan's types and records are re-exported: this module is where users of the planner look.
__all__ = [
    "Exchange",
    "RankPlan",
    "CommPlan",
    "LAYOUTS",
    "RECORD_KINDS",
    "RecordKind",
    "RecordKeys",
    "BufferRows",
    "check_key_space",
    "DIRECT_B",
    "DIRECT_C",
    "FETCH_B",
    "PARTIAL_C",
    "FORWARD_B",
    "AGGREGATE_C",
    "build_plan",
    "build_rank_plan_collective",
]


def _plan_ranks(
    local_blocks: dict[int, LocalBlocks],
    strategy: Strategy,
    row_partition: RowPartition,
    col_partition: RowPartition,
    groups: np.ndarray,
    layout: str,
    proxy_policy: str,
    group_call: GroupCall,
    deliver: Deliver,
    progress: Progress | None = None,
) -> dict[int, RankPlan]:
    """Plan the ranks in ``local_blocks`` (all of them, or this MPI rank's).

    ``group_call(values, function)`` hands the values of each group's ranks (a list in rank order)
    to ``function`` once per group and returns each rank's entry of the result; ``deliver(owned)``
    takes each planned rank's unique records and returns, per planned rank, the records the other
    ranks' :func:`~sparsewire.plan.records.outboxes` send it, in source order (an all-to-all).
    ``progress(stage, done, total)``, if given, hears of each rank planned in the stages ``records`` and
    ``assemble``.
    """
    n_ranks = row_partition.n_parts
    n_groups = int(groups.max(initial=0)) + 1
    hierarchical = strategy.hierarchical
    keys = RecordKeys(n_ranks, max(row_partition.n, col_partition.n))

    row_based = {rank: choose_row_based(strategy, blocks, n_ranks) for rank, blocks in local_blocks.items()}
    if strategy is Strategy.JOINT_GROUP and n_groups > 1:
        off_group = {rank: groups[b.sources] != groups[rank] for rank, b in local_blocks.items()}
        values = {
            rank: (b.rows[off] + row_partition.offsets[rank], b.cols[off], groups[b.sources[off]])
            for (rank, b), off in zip(local_blocks.items(), off_group.values())
        }
        decided = group_call(values, lambda members: hierarchy.group_cover_row_based(*map(list, zip(*members)), n_groups))
        for rank, mask in decided.items():
            row_based[rank][off_group[rank]] = mask

    # B rows from outside the group that another member needs too: only these are fetched through a
    # proxy (a row one member needs crosses the slow link once either way; sent directly it skips
    # the relay's second hop and its wait).
    relayed_cols: dict[int, np.ndarray] = {rank: np.zeros(0, np.int64) for rank in local_blocks}
    if hierarchical and n_groups > 1:
        needs = {}
        for rank, b in local_blocks.items():
            wanted = ~row_based[rank] & (groups[b.sources] != groups[rank])
            needs[rank] = distinct(b.cols[wanted])
        relayed_cols = group_call(needs, hierarchy.shared_columns)

    proxies: dict[int, np.ndarray] = {}
    if hierarchical and proxy_policy == "balanced":

        def balance(members: list) -> list:
            # Relayed rows the group receives from each source: the union over its ranks.
            needed = distinct(np.concatenate(members))
            rows_from_source = np.bincount(col_partition.owner(needed), minlength=n_ranks).astype(np.int64)
            return [rows_from_source] * len(members)

        counts = group_call(relayed_cols, balance)
        proxies = {rank: hierarchy.balanced_proxies(groups, int(groups[rank]), counts[rank]) for rank in local_blocks}
    elif hierarchical:
        proxies = {rank: hierarchy.local_proxies(groups, int(groups[rank])) for rank in local_blocks}

    serving, owned = {}, {}
    for rank, blocks in local_blocks.items():
        proxy = proxies.get(rank, np.full(n_ranks, -1, np.int64))
        aggregator = hierarchy.aggregators(groups, rank) if hierarchical else np.full(n_groups, -1, np.int64)
        records, serving[rank] = request_records(
            blocks,
            row_based[rank],
            hierarchical,
            groups,
            proxy,
            aggregator,
            relayed_cols[rank],
            row_partition,
            col_partition,
            strategy,
        )
        owned[rank] = unique_records(records, keys)
        if progress:
            progress("records", len(owned), len(local_blocks))
    delivered = deliver(owned)
    plans = {}
    for rank, blocks in local_blocks.items():
        parts = [owned.pop(rank)] + delivered.pop(rank)  # (popped: each rank's records go once it is planned)
        plans[rank] = assemble(
            rank, blocks, Records.concat(parts), serving[rank], strategy, layout, groups, row_partition, col_partition, keys
        )
        if progress:
            progress("assemble", len(plans), len(local_blocks))
    return plans


def _check_inputs(strategy, layout: str, proxy: str, topology: Topology | None, n_ranks: int) -> tuple[Strategy, np.ndarray]:
    strategy = Strategy(strategy)
    if not strategy.executable:
        raise InputError(
            "strategy 'rowwise' is accounting only and has no plan; use sparsewire.plan.stats.rowwise_stats for its volumes"
        )
    if layout not in LAYOUTS:
        raise InputError(f"unknown plan layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    if proxy not in PROXY_POLICIES:
        raise InputError(f"unknown proxy policy {proxy!r}; choose from {', '.join(PROXY_POLICIES)}")
    if strategy.hierarchical and topology is None:
        raise InputError(f"strategy {strategy.value!r} needs a topology; pass topology=Topology.nodes(G) or a preset")
    groups = (topology or Topology.flat()).groups(n_ranks)
    return strategy, groups


def build_plan(
    matrix: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy | str,
    topology: Topology | None = None,
    *,
    layout: str = "merged",
    proxy: str = "local",
    progress: Progress | None = None,
) -> CommPlan:
    """Plan every rank at once from the global matrix. Not collective; needs no MPI.

    Runs the same procedure as :func:`build_rank_plan_collective` with the group step and the
    all-to-all done in memory, so ``build_plan(...).ranks[p]`` equals rank p's collective plan.

    Args:
        topology: groups of ranks; required by hierarchical strategies. Flat strategies use it only
            for the ``pipelined`` layout's rounds.
        layout: ``merged`` (for the bulk and overlap modes) or ``pipelined`` (the pipelined mode).
        proxy: ``local`` (CoLa's local-rank matching) or ``balanced`` (even bytes per proxy).
        progress: ``progress(stage, done, total)`` after each rank of the ``records`` and ``assemble`` stages.
    """
    csr = sp.csr_array(matrix)
    check_partitions(csr.shape, row_partition, col_partition)
    n_ranks = row_partition.n_parts
    check_derived_fits(
        serial_planning_bytes(n_ranks),
        f"planning for {n_ranks} ranks in one process (every rank's messages to every rank)",
        "plan for fewer ranks, or let the ranks plan themselves (spmm_plan under mpiexec)",
    )
    strategy, groups = _check_inputs(strategy, layout, proxy, topology, n_ranks)
    local_blocks = {
        rank: split_local_rows(rank, csr[slice(*row_partition.range(rank))], col_partition) for rank in range(n_ranks)
    }

    def group_call(values: dict, function) -> dict:
        result = {}
        for members in hierarchy.group_members(groups):
            outputs = function([values[int(r)] for r in members])
            result.update({int(r): out for r, out in zip(members, outputs)})
        return result

    def deliver(owned: dict) -> dict:
        return deliver_all(owned, n_ranks)

    plans = _plan_ranks(
        local_blocks, strategy, row_partition, col_partition, groups, layout, proxy, group_call, deliver, progress
    )
    return CommPlan(strategy, row_partition, col_partition, tuple(plans[r] for r in range(n_ranks)))


def build_rank_plan_collective(
    comm,
    local_rows: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy | str,
    topology: Topology | None = None,
    *,
    layout: str = "merged",
    proxy: str = "local",
    code_setup: bool = False,
) -> RankPlan:
    """Collective. Each rank plans from its own rows only. ``column``, ``row`` and ``joint`` with one exchange
    go to :func:`~sparsewire.plan.flat.build_flat_rank_plan` (no records: the exchange writes the send side
    straight into the plan's arrays, memory linear in the rows); otherwise group leaders gather what a
    group-level decision needs (``joint-group``'s cover, ``balanced`` proxies) and one all-to-all delivers
    the records to the ranks that send or relay them. Both give the plan :func:`build_plan` gives. Arguments
    as :func:`build_plan`; ``code_setup``: the records all-to-all's boxes travel bit-packed
    (:func:`~sparsewire.plan.records.exchange_boxes`, lossless; flat strategies too then take the records
    path). The plan's ``setup_exchange_bytes`` says what the exchange took.

    Args:
        comm: an mpi4py communicator whose size equals the partitions' number of parts.
        local_rows: this rank's rows of A, shape (rows owned, global columns), global column indices.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    problem = None
    if row_partition.n_parts != size or col_partition.n_parts != size:
        problem = (
            f"the partitions have {row_partition.n_parts} and {col_partition.n_parts} parts but the communicator has "
            f"{size} ranks; partition for {size} ranks"
        )
    elif local_rows.shape != (int(row_partition.counts()[rank]), col_partition.n):
        problem = (
            f"rank {rank} holds a {local_rows.shape[0]} x {local_rows.shape[1]} block but the partitions say "
            f"{int(row_partition.counts()[rank])} x {col_partition.n}; give each rank exactly its rows of A"
        )
    problems = [p for p in comm.allgather(problem) if p]
    if problems:
        raise PlanMismatchError(problems[0])
    strategy, groups = _check_inputs(strategy, layout, proxy, topology, size)
    if plans_flat(strategy, layout, int(groups.max(initial=0)) + 1, code_setup):
        return build_flat_rank_plan(comm, local_rows, row_partition, col_partition, strategy, groups, layout)
    blocks = split_local_rows(rank, local_rows, col_partition)
    group_comm = comm.Split(int(groups[rank]), rank)

    def group_call(values: dict, function) -> dict:
        gathered = group_comm.gather(values[rank], root=0)
        outputs = function(gathered) if group_comm.Get_rank() == 0 else None
        return {rank: group_comm.scatter(outputs, root=0)}

    received = np.zeros(2, np.int64)

    def deliver(owned: dict) -> dict:
        boxes, sizes = exchange_boxes(comm, owned[rank], rank, code_setup)
        received[:] += sizes
        return {rank: boxes}

    try:
        plans = _plan_ranks({rank: blocks}, strategy, row_partition, col_partition, groups, layout, proxy, group_call, deliver)
    finally:
        group_comm.Free()
    return dataclasses.replace(plans[rank], setup_exchange_bytes=(int(received[0]), int(received[1])))
