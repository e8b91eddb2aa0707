"""Volumes of the flat strategies (``column``, ``row``, ``joint``) counted from the block structure of
the whole matrix in a few passes over its nonzeros, without building any rank's plan.

A flat plan has one exchange; rank q sends rank p one message holding the B rows and partial C rows
that A(p, q) needs (CoLa eq. 7/9, SHIRO eq. 2, 3 and sec. V):

* column-based nonzero (i, j) of A(p, q): B row j, once per (p, j);
* row-based nonzero (i, j): partial C row i, once per (i, q), and the entry itself at setup.

So the rows q sends p are ``|{j : (p, j) column-based}| + |{i : (i, q) row-based}|``, counted by
two sorts over all off-diagonal nonzeros (keys ``p n + j`` and ``i P + q``), where building the
plans of P ranks costs P rounds of per-rank work and an all-to-all of their records.
``joint`` takes the same per-rank minimum vertex cover as the plan
(:func:`~sparsewire.plan.strategies.rank_cover_row_based` on the same edges), so the counts equal
:func:`~sparsewire.plan.stats.plan_stats` of :func:`~sparsewire.plan.plan.build_plan` exactly
(tests/plan/test_counted.py compares them on random and hand-made inputs)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.distinct import distinct, distinct_counts
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition
from sparsewire.plan.blocks import check_partitions
from sparsewire.plan.strategies import Strategy, rank_cover_row_based

__all__ = ["COUNTED_STRATEGIES", "counted_sends"]

#: The strategies :func:`counted_sends` counts.
COUNTED_STRATEGIES = (Strategy.COLUMN, Strategy.ROW, Strategy.JOINT)


def counted_sends(
    matrix: sp.sparray,
    row_partition: RowPartition,
    col_partition: RowPartition,
    strategy: Strategy | str,
    progress=None,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """Not collective. ``(sources, destinations, rows, setup_entries, rank_entries, rank_diagonal_entries,
    rank_inter_group_entries)`` of a flat strategy's messages, one per communicating pair in (source, destination)
    order, without building plans (module docstring); the last three are the
    :class:`~sparsewire.plan.stats.PlanStats` fields of those names, the last under ``groups`` (every rank's group;
    all zero where None): per rank, the B rows it copies for and the row-based nonzeros it computes for another
    group, the column-based nonzeros it applies from one and the partial C rows it adds from one.

    ``progress(stage, done, total)``, if given, hears of each rank whose ``joint`` cover is solved (stage ``cover``).
    """
    strategy = Strategy(strategy)
    if strategy not in COUNTED_STRATEGIES:
        names = ", ".join(s.value for s in COUNTED_STRATEGIES)
        raise InputError(f"strategy {strategy.value!r} is not counted without its plan; count one of {names}")
    csr = sp.csr_array(matrix)
    check_partitions(csr.shape, row_partition, col_partition)
    if not csr.has_canonical_format:  # the plan's order and duplicates rule (split_local_rows); the caller's matrix stays
        csr = csr.copy()
        csr.sum_duplicates()
    n_ranks, n_cols = row_partition.n_parts, csr.shape[1]
    index = np.int32 if max(csr.shape[0], n_cols, n_ranks) < 2**31 else np.int64  # halves the per-nonzero arrays
    rows = np.repeat(np.arange(csr.shape[0], dtype=index), np.diff(csr.indptr))
    cols = csr.indices.astype(index, copy=False)
    receivers = np.repeat(np.arange(n_ranks, dtype=index), np.diff(csr.indptr[row_partition.offsets]))
    senders = np.asarray(col_partition.owner(cols), index)
    diagonal = np.bincount(receivers[senders == receivers], minlength=n_ranks).astype(np.int64)
    off = np.flatnonzero(senders != receivers)
    rows, cols, receivers, senders = rows[off], cols[off], receivers[off], senders[off]
    del off

    if strategy is Strategy.COLUMN:
        row_based = np.zeros(rows.size, bool)
    elif strategy is Strategy.ROW:
        row_based = np.ones(rows.size, bool)
    else:
        row_based = _joint_row_based(rows, cols, receivers, senders, row_partition, progress)

    column_based = ~row_based
    b_rows = distinct(receivers[column_based].astype(np.int64) * n_cols + cols[column_based])  # one per (p, j)
    c_rows = distinct(rows[row_based].astype(np.int64) * n_ranks + senders[row_based])  # one per (i, q)
    setup_entries = int(np.count_nonzero(row_based))
    inter_group = np.zeros(n_ranks, np.int64)
    if groups is not None:
        groups = np.asarray(groups)
        across = groups[senders] != groups[receivers]
        inter_group += np.bincount(senders[row_based & across], minlength=n_ranks)  # partial C rows computed
        inter_group += np.bincount(receivers[column_based & across], minlength=n_ranks)  # B rows applied
        del across
    # Each rank's operators (PlanStats.rank_entries): its rows' nonzeros, less those it hands to column owners and
    # plus those it is handed (the partial C rows it computes), one entry per B row it copies into a send buffer
    # and one per partial C row it adds from a receive buffer.
    entries = np.diff(csr.indptr[row_partition.offsets]).astype(np.int64)
    entries -= np.bincount(receivers[row_based], minlength=n_ranks)
    entries += np.bincount(senders[row_based], minlength=n_ranks)
    del rows, cols, receivers, senders, row_based, column_based
    b_owners = np.asarray(col_partition.owner(b_rows % n_cols), np.int64)
    c_owners = np.asarray(row_partition.owner(c_rows // n_ranks), np.int64)
    entries += np.bincount(b_owners, minlength=n_ranks) + np.bincount(c_owners, minlength=n_ranks)
    if groups is not None:  # B rows copied out to another group, partial C rows added from one
        inter_group += np.bincount(b_owners[groups[b_owners] != groups[b_rows // n_cols]], minlength=n_ranks)
        inter_group += np.bincount(c_owners[groups[c_owners] != groups[c_rows % n_ranks]], minlength=n_ranks)
    pairs = np.concatenate([b_owners * n_ranks + b_rows // n_cols, (c_rows % n_ranks) * n_ranks + c_owners])
    del b_rows, c_rows, b_owners, c_owners
    pair_keys, counts = distinct_counts(pairs)
    sends = pair_keys // n_ranks, pair_keys % n_ranks, counts.astype(np.int64)
    return *sends, setup_entries, entries, diagonal, inter_group


def _joint_row_based(rows, cols, receivers, senders, row_partition: RowPartition, progress) -> np.ndarray:
    """The plan's ``joint`` choice: per receiving rank p, :func:`~sparsewire.plan.strategies.rank_cover_row_based`
    of its off-diagonal nonzeros, as :func:`~sparsewire.plan.strategies.choose_row_based` calls it (the same
    graph, so the same cover)."""
    n_ranks = row_partition.n_parts
    bounds = np.searchsorted(receivers, np.arange(n_ranks + 1))  # nonzeros are in row order, so grouped by p
    row_based = np.zeros(rows.size, bool)
    for p in range(n_ranks):
        start, stop = int(bounds[p]), int(bounds[p + 1])
        if stop > start:
            local_rows = rows[start:stop].astype(np.int64) - int(row_partition.offsets[p])
            row_based[start:stop] = rank_cover_row_based(local_rows, senders[start:stop], cols[start:stop], n_ranks)
        if progress:
            progress("cover", p + 1, n_ranks)
    return row_based
