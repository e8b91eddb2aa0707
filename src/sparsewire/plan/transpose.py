"""The transposed plan: ``A.T @ G`` on the partitions of a plan for ``A @ B`` (the adjoint dataflow).

A rank plan is a linear program (:mod:`sparsewire.plan.plan`)::

    s_e = S_e [B_p ; r_in(e)]    (pack, send s_e, receive r_e)
    C_p = D B_p + sum_e R_e r_e

Its adjoint, run in reverse step order, maps G_p (rows of A owned) to ``(A.T G)_p`` (columns of A
owned): ``g_e = R_e^T G_p + S_f[:, r_e]^T h_f`` for the exchange f that reads r_e (if any), send g_e
back along every message of e (receiver -> sender), receive h_e, and
``(A.T G)_p = D^T G_p + sum_e S_e[:, B_p]^T h_e``. Each message of the adjoint is a message of the
forward plan reversed, with the same rows, so the bytes are equal: B rows fetched become partial
rows pushed and partial rows pushed become G rows fetched (PetscSF's broadcast/reduce duality).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire.errors import PlanMismatchError
from sparsewire.plan.plan import (
    AGGREGATE_C,
    DIRECT_B,
    DIRECT_C,
    FETCH_B,
    FORWARD_B,
    PARTIAL_C,
    CommPlan,
    Exchange,
    RankPlan,
)

__all__ = ["transpose_rank_plan", "transpose_comm_plan", "send_keys_from_receivers", "send_keys_collective"]

# The kind a row has in the adjoint: a B row j sent becomes the partial row j of A.T G sent back,
# a partial C row i becomes the G row i, a hop-1 record becomes the hop-2 record of the other way.
_DUAL_KIND = np.empty(6, np.int64)
for _forward, _adjoint in ((DIRECT_B, DIRECT_C), (FETCH_B, AGGREGATE_C), (FORWARD_B, PARTIAL_C)):
    _DUAL_KIND[_forward], _DUAL_KIND[_adjoint] = _adjoint, _forward


def send_keys_from_receivers(plans: tuple[RankPlan, ...] | list[RankPlan], rank: int) -> list[np.ndarray]:
    """Not collective. The global key of every row ``plans[rank]`` sends, per exchange, read off the
    receivers' plans (exchange e of the sender is exchange e of the receiver; a message's rows are in
    the receiver's order)."""
    keys = []
    for index, exchange in enumerate(plans[rank].exchanges):
        parts = []
        for destination in exchange.send_ranks:
            theirs = plans[int(destination)].exchanges[index]
            at = int(np.flatnonzero(theirs.recv_ranks == rank)[0])
            start = int(theirs.recv_counts[:at].sum())
            parts.append(theirs.receive_keys[start : start + int(theirs.recv_counts[at])])
        keys.append(np.concatenate(parts + [np.zeros(0, np.int64)]).astype(np.int64))
    return keys


def send_keys_collective(comm, plan: RankPlan) -> list[np.ndarray]:
    """Collective over ``comm`` (an MPI communicator; this module does not import MPI). What
    :func:`send_keys_from_receivers` reads off every plan, for this rank only: each receiver hands
    every sender the keys of the rows it receives from it (one all-to-all per exchange)."""
    keys = []
    size = comm.Get_size()
    for exchange in plan.exchanges:
        outgoing = [np.zeros(0, np.int64) for _ in range(size)]
        bounds = np.concatenate(([0], np.cumsum(exchange.recv_counts)))
        for position, source in enumerate(exchange.recv_ranks):
            outgoing[int(source)] = exchange.receive_keys[bounds[position] : bounds[position + 1]]
        incoming = comm.alltoall(outgoing)
        keys.append(np.concatenate([incoming[int(d)] for d in exchange.send_ranks] + [np.zeros(0, np.int64)]))
    return keys


def transpose_rank_plan(plan: RankPlan, send_keys: list[np.ndarray]) -> RankPlan:
    """Not collective. The rank plan of ``A.T @ G`` (see the module docstring): rows of A.T (columns
    of A) under ``plan.col_partition``, G rows under ``plan.row_partition``.

    Args:
        plan: this rank's plan of ``A @ B``.
        send_keys: the global key of every row ``plan`` sends, per exchange (from
            :func:`send_keys_from_receivers`, or over MPI); they become the adjoint's receive keys.

    Returns:
        A :class:`RankPlan` with the same layout and strategy whose message (p -> q, exchange
        n - 1 - e) carries exactly the rows of the forward message (q -> p, exchange e) of the n.
    """
    exchanges = plan.exchanges
    n_b = plan.local_shape[1]
    readers = {}
    for index, exchange in enumerate(exchanges):
        if exchange.input is not None:
            if exchange.input in readers:
                raise PlanMismatchError(
                    f"exchange {exchange.input} is read by exchanges {readers[exchange.input]} and {index}; "
                    "a plan whose receive buffer feeds two exchanges has no single-input adjoint"
                )
            readers[exchange.input] = index
    last_step = max((e.step for e in exchanges), default=0)
    adjoint = []
    for index, exchange in enumerate(exchanges):
        gathered = sp.csr_array(exchange.receive_matrix.T)
        reader = readers.get(index)
        if reader is not None:
            relayed = sp.csr_array(exchanges[reader].send_matrix[:, n_b:].T)
            gathered = sp.csr_array(sp.hstack([gathered, relayed], format="csr"))
        adjoint.append(
            Exchange(
                step=last_step - exchange.step,
                input=None if reader is None else len(exchanges) - 1 - reader,
                receive_slot=None,
                send_ranks=exchange.recv_ranks,
                send_counts=exchange.recv_counts,
                send_matrix=gathered,
                recv_ranks=exchange.send_ranks,
                recv_counts=exchange.send_counts,
                receive_matrix=sp.csr_array(exchange.send_matrix[:, :n_b].T),
                send_kinds=_DUAL_KIND[exchange.receive_kinds],
                receive_kinds=_DUAL_KIND[exchange.send_kinds],
                receive_keys=np.asarray(send_keys[index], np.int64),
            )
        )
    return RankPlan(
        rank=plan.rank,
        strategy=plan.strategy,
        layout=plan.layout,
        row_partition=plan.col_partition,
        col_partition=plan.row_partition,
        groups=plan.groups,
        diagonal=sp.csr_array(plan.diagonal.T),
        exchanges=tuple(reversed(adjoint)),  # in step order again, so inputs come first
        setup_entries=plan.setup_entries,
    )


def transpose_comm_plan(plan: CommPlan) -> CommPlan:
    """Not collective. :func:`transpose_rank_plan` for every rank of a plan built without MPI."""
    ranks = tuple(transpose_rank_plan(p, send_keys_from_receivers(plan.ranks, p.rank)) for p in plan.ranks)
    return CommPlan(plan.strategy, plan.col_partition, plan.row_partition, ranks)
