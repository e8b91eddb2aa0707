"""Assembly: one rank's :class:`~sparsewire.plan.types.RankPlan` from the records it knows, every
buffer ordered by (peer, kind, key) so that sender and receiver agree without further messages."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire.partition import RowPartition
from sparsewire.plan.blocks import LocalBlocks
from sparsewire.plan.records import ColumnServing, RecordKeys, Records, positions_in, unique_records
from sparsewire.plan.strategies import Strategy
from sparsewire.plan.types import AGGREGATE_C, DIRECT_B, DIRECT_C, FETCH_B, FORWARD_B, HOP, PARTIAL_C, Exchange, RankPlan

__all__ = ["exchange_index", "exchange_layout", "assemble"]


def exchange_index(hop: np.ndarray, round_: np.ndarray, layout: str, hierarchical: bool) -> np.ndarray:
    """Not collective."""
    if layout == "merged":
        return hop - 1
    if not hierarchical:
        return round_.copy()
    return np.where(round_ == 0, 0, 2 * round_ - 2 + hop)


def exchange_layout(layout: str, hierarchical: bool, n_groups: int) -> list[tuple[int, int | None, int | None]]:
    """Not collective. (step, input, receive_slot) of every exchange."""
    if layout == "merged":
        return [(0, None, None), (1, 0, None)] if hierarchical else [(0, None, None)]
    result = [(0, None, None)]
    for d in range(1, n_groups):
        result.append((d - 1, None, d % 2))
        if hierarchical:
            result.append((d, len(result) - 1, None))
    return result


def assemble(
    rank: int,
    blocks: LocalBlocks,
    known: Records,
    column_serving: ColumnServing,
    strategy: Strategy,
    layout: str,
    groups: np.ndarray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    keys: RecordKeys,
) -> RankPlan:
    """Not collective. Sender and receiver matrices of every exchange of one rank from the records it knows."""
    known = unique_records(known, keys)
    hierarchical = strategy.hierarchical
    exchange_of = exchange_index(HOP[known.kind], known.round, layout, hierarchical)
    n_groups = int(groups.max(initial=0)) + 1
    specs = exchange_layout(layout, hierarchical, n_groups)
    n_b = int(col_partition.counts()[rank])
    n_c = blocks.n_local_rows
    col_start, row_start = int(col_partition.offsets[rank]), int(row_partition.offsets[rank])
    served = column_serving
    served_exchange = exchange_index(HOP[served.kind], served.round, layout, hierarchical)

    receive_orders = []
    exchanges = []
    for index, (step, input_index, slot) in enumerate(specs):
        mine = exchange_of == index
        # Receive side: buffer ordered by (sender, kind, key).
        incoming = np.flatnonzero(mine & (known.receiver == rank))
        recv_order = np.sort(keys.order(known.sender[incoming], known.kind[incoming], known.key[incoming]))
        receive_orders.append(recv_order)
        received = keys.rows_of(recv_order)
        recv_ranks, recv_counts = np.unique(received.peer, return_counts=True)
        on = served_exchange == index
        b_slots = positions_in(recv_order, keys.order(served.sender[on], served.kind[on], served.cols[on]), "received B rows")
        c_slots = np.flatnonzero(np.isin(received.kind, (DIRECT_C, AGGREGATE_C)))
        receive_matrix = sp.csr_array(
            (
                np.concatenate([served.values[on], np.ones(c_slots.size)]),
                (np.concatenate([served.rows[on], received.key[c_slots] - row_start]), np.concatenate([b_slots, c_slots])),
            ),
            shape=(n_c, recv_order.size),
        )

        # Send side: rows ordered by (receiver, kind, key).
        outgoing = np.flatnonzero(mine & (known.sender == rank))
        send_order = np.sort(keys.order(known.receiver[outgoing], known.kind[outgoing], known.key[outgoing]))
        sent = keys.rows_of(send_order)
        send_kind, send_key = sent.kind, sent.key
        send_ranks, send_counts = np.unique(sent.peer, return_counts=True)
        rows, cols, values = [], [], []
        selected = np.flatnonzero(np.isin(send_kind, (DIRECT_B, FETCH_B)))
        rows.append(selected)
        cols.append(send_key[selected] - col_start)
        values.append(np.ones(selected.size))
        term_on = known.term_sender == rank
        # A term's round: from this rank's group to the group owning its C row.
        term_round = (groups[rank] - groups[row_partition.owner(known.term_key[term_on])]) % n_groups
        term_exchange = exchange_index(HOP[known.term_kind[term_on]], term_round, layout, hierarchical)
        term_here = term_exchange == index
        rows.append(
            positions_in(
                send_order,
                keys.order(
                    known.term_receiver[term_on][term_here],
                    known.term_kind[term_on][term_here],
                    known.term_key[term_on][term_here],
                ),
                "partial C rows",
            )
        )
        cols.append(known.term_col[term_on][term_here] - col_start)
        values.append(known.term_value[term_on][term_here])
        if input_index is not None:
            input_order = receive_orders[input_index]
            _, input_kind, input_key = keys.rows_of(input_order)
            forwards = np.flatnonzero(send_kind == FORWARD_B)
            owners = np.asarray(col_partition.owner(send_key[forwards]), np.int64)
            rows.append(forwards)
            cols.append(n_b + positions_in(input_order, keys.order(owners, FETCH_B, send_key[forwards]), "forwarded B rows"))
            values.append(np.ones(forwards.size))
            partial_slots = np.flatnonzero(input_kind == PARTIAL_C)
            aggregates = np.flatnonzero(send_kind == AGGREGATE_C)
            by_key = aggregates[np.argsort(send_key[aggregates], kind="stable")]
            rows.append(by_key[positions_in(send_key[by_key], input_key[partial_slots], "aggregated C rows")])
            cols.append(n_b + partial_slots)
            values.append(np.ones(partial_slots.size))
            n_input = input_order.size
        else:
            n_input = 0
        send_matrix = sp.csr_array(
            (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
            shape=(send_order.size, n_b + n_input),
        )
        exchanges.append(
            Exchange(
                step=step,
                input=input_index,
                receive_slot=slot,
                send_ranks=send_ranks.astype(np.int64),
                send_counts=send_counts.astype(np.int64),
                send_matrix=send_matrix,
                recv_ranks=recv_ranks.astype(np.int64),
                recv_counts=recv_counts.astype(np.int64),
                receive_matrix=receive_matrix,
                send_kinds=send_kind.astype(np.int8),
                receive_kinds=received.kind.astype(np.int8),
                receive_keys=received.key.astype(np.int64),
            )
        )
    setup_entries = int(np.count_nonzero(known.term_sender == rank))
    return RankPlan(
        rank=rank,
        strategy=strategy,
        layout=layout,
        row_partition=row_partition,
        col_partition=col_partition,
        groups=groups,
        diagonal=blocks.diagonal,
        exchanges=tuple(exchanges),
        setup_entries=setup_entries,
    )
