"""Distributed graph attention: each destination's softmax-aggregate over its in-neighbours, exact, on the plan of
:mod:`sparsewire.plan.attention` (which gives the algorithm and the byte formula), differentiable in PyTorch.

:class:`AttentionPlan` holds, for one graph, head count H, channels C and dtype, which sources this rank fetches
(served by their column), which of its rows peers aggregate for it (served by their row), and which rows it
aggregates for peers. :func:`attend` is one layer's aggregation: forward two rounds of point-to-point messages (the
fetched ``z_j`` and the sent ``t_i``; then the partials ``(L, V)`` back), the exact log-sum-exp merge, and a backward
of two rounds (the gradients of the partials and of the fetched ``z_j`` out; those of ``t_i`` back). The local work
is :mod:`sparsewire.kernels.attention`'s, which never forms an ``nnz x H x C`` tensor. Bytes received are counted
from MPI's receive statuses. Runs on MPI and the CPU.
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

from sparsewire.comm.runtime import (
    agree_on_error,
    agree_on_values,
    collective_errors,
    message_statuses,
    ranks_on_node,
    wait_messages,
)
from sparsewire.kernels.compiled import run_threaded, set_threads
from sparsewire.plan.attention import (
    ATTENTION_STRATEGIES,
    HIERARCHICAL_ATTENTION,
    attention_blocks,
    attention_pattern,
    relayed_columns,
)
from sparsewire.plan.hierarchy import local_proxies

__all__ = ["AttentionPlan", "attend", "attention_pattern", "make_attention_plan"]


def _kernels():
    """The attention kernels, imported at first use: training without attention never loads Numba (55 MiB a rank)."""
    from sparsewire.kernels import attention

    return attention


_Z, _T, _PARTIAL, _PARTIAL_GRAD, _Z_GRAD, _T_GRAD, _Z_RELAY, _Z_GRAD_RELAY = range(1, 9)  # message tags, one per kind


class _Part:
    """A set of entries aggregated by one call of the kernels: rows (destinations) in CSR order over sources."""

    def __init__(self, rows: np.ndarray, source: np.ndarray, n_rows: int, n_sources: int, dst_ids, src_ids) -> None:
        self.n_rows, self.n_sources = n_rows, n_sources
        self.indptr = np.zeros(n_rows + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=n_rows), out=self.indptr[1:])
        index = np.int32 if max(n_rows, n_sources, rows.size) < 2**31 else np.int64  # half the memory where it fits
        self.source = np.ascontiguousarray(source, index)
        by_source = _kernels().source_order(self.source, np.asarray(rows, index), n_sources)
        self.by_source, self.source_ptr, self.row_by_source = by_source
        self.dst_ids = np.ascontiguousarray(dst_ids, np.int64)
        self.src_ids = np.ascontiguousarray(src_ids, np.int64)

    def forward(self, z, s, t, slope, dropout, salt):
        heads, channels = z.shape[1], z.shape[2]
        softmax = np.empty((self.source.size, heads), z.dtype)
        L = np.empty((self.n_rows, heads), z.dtype)
        V = np.empty((self.n_rows, heads, channels), z.dtype)
        run_threaded(
            _kernels().attend_forward, self.indptr, self.source, z, s, t, slope, dropout, self.dst_ids, self.src_ids, salt,
            softmax, L, V,
        )  # fmt: skip
        return softmax, L, V

    def backward(self, z, s, t, slope, dropout, salt, softmax, V, gV, gL, gz, gs):
        gt = np.empty((self.n_rows, z.shape[1]), z.dtype)
        run_threaded(
            _kernels().attend_backward, self.indptr, self.source, self.by_source, self.source_ptr, self.row_by_source,
            z, s, t, slope, dropout, self.dst_ids, self.src_ids, salt, softmax, V, gV, gL, gz, gs, gt,
        )  # fmt: skip
        return gt


class AttentionPlan:
    """The exchange of one attention layer shape: graph, ``heads``, ``channels`` and ``dtype`` (module docstring).

    Attributes:
        strategy: ``column``, ``row``, ``joint`` or ``column-hier``
            (:data:`~sparsewire.plan.attention.ATTENTION_STRATEGIES`).
        blocks: this rank's off-diagonal blocks and how each is served (:class:`~sparsewire.plan.attention.AttentionBlock`).
        groups: each rank's group (all 0 without a topology).
        planned_forward, planned_backward: bytes every rank together receives per forward and per backward, from the
            formula of each block's cover (and, for ``column-hier``, the rows relayed inside groups);
            ``planned_between_groups``: the part of both sent between groups.
        bytes_forward, bytes_backward: bytes this rank received in the aggregations so far, from MPI's receive
            statuses (reset them to measure a step); ``bytes_between_groups``: those from ranks of other groups.
    """

    def __init__(
        self, matrix, heads: int, channels: int, dtype, strategy: str, self_loops: bool, node_ids: np.ndarray, threads: int = 1,
        groups: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        """Collective. Prefer :meth:`sparsewire.gnn.GraphOperator.attention`. ``node_ids``: every position's node id;
        ``threads``: the kernels' threads per rank; ``groups``: each rank's group (node), for ``column-hier``."""
        comm = matrix.comm
        set_threads(threads, ranks_on_node(comm))
        rank, size = comm.Get_rank(), comm.Get_size()
        self.matrix, self.heads, self.channels, self.dtype = matrix, int(heads), int(channels), np.dtype(dtype)
        self.strategy, self.self_loops = strategy, bool(self_loops)
        self.groups = np.zeros(size, np.int64) if groups is None else np.asarray(groups, np.int64)
        offsets = matrix.col_partition.offsets
        start = int(offsets[rank])
        n = matrix.local_rows.shape[0]
        self.n = n
        pattern = attention_pattern(matrix.local_rows, start, self.self_loops)
        self.nnz = pattern.nnz
        diagonal, self.blocks = attention_blocks(pattern, matrix.col_partition, rank, self.channels, strategy)
        entry_row = np.repeat(np.arange(n, dtype=np.int64), np.diff(pattern.indptr))
        entry_col = pattern.indices.astype(np.int64)
        own_ids = node_ids[start : start + n]
        # Two levels: what this rank needs from a rank of another group comes through that group's proxy, which learns
        # here which of the source's rows each member needs.
        proxy = np.full(size, -1, np.int64)
        relay_told: list = [None] * size
        if strategy in HIERARCHICAL_ATTENTION:
            proxy = local_proxies(self.groups, int(self.groups[rank]))
            asks: list = [None] * size
            for block in self.blocks:
                if block.cols.size and proxy[block.peer] not in (-1, rank):
                    asks[proxy[block.peer]] = [*(asks[proxy[block.peer]] or []), (block.peer, block.cols)]
            relay_told = comm.alltoall(asks)
        members_of: dict[int, list] = {}  # source -> [(member, columns)] this rank fetches for its group
        for member, asked in enumerate(relay_told):
            for source, cols in asked or []:
                members_of.setdefault(int(source), []).append((member, cols))
        by_peer = {block.peer: block for block in self.blocks}
        # The local part's source table: own rows, then per source in rank order the rows fetched from it.
        source_of = np.full(pattern.nnz, -1, np.int64)
        source_of[diagonal] = entry_col[diagonal] - start
        fetched_ids, next_source = [own_ids], n
        self._fetch = []  # (sender, rows of the table it fills, tag): the owner (_Z) or the group's proxy (_Z_RELAY)
        self._relay = []  # (member, rows of the table): forwarded to a member of the group, gradients summed back
        self._row_blocks = []  # (peer, local rows p aggregates for this rank)
        requests: list[object] = [None] * size
        for peer in sorted(set(by_peer) | set(members_of)):
            block = by_peer.get(peer)
            own_cols = block.cols if block is not None else np.zeros(0, np.int64)
            fetched, positions = own_cols, []
            if peer in members_of:  # this rank is the proxy of (peer, its group): it fetches the union
                fetched, positions = relayed_columns([own_cols, *(cols for _, cols in members_of[peer])])
                positions = positions[1:]
            asked = [None, None]
            if fetched.size:
                if own_cols.size:
                    source_of[block.column_entries] = next_source + np.searchsorted(fetched, entry_col[block.column_entries])
                relayed = proxy[peer] not in (-1, rank)
                rows = slice(next_source, next_source + fetched.size)
                self._fetch.append((int(proxy[peer]), rows, _Z_RELAY) if relayed else (peer, rows, _Z))
                self._relay += [(member, next_source + where) for (member, _), where in zip(members_of.get(peer, []), positions)]
                next_source += fetched.size
                fetched_ids.append(node_ids[fetched])
                if not relayed:
                    asked[0] = fetched - int(offsets[peer])
            if block is not None and block.rows.size:
                self._row_blocks.append((peer, block.rows))
                asked[1] = (own_ids[block.rows], block.row_of_entry, entry_col[block.row_entries] - int(offsets[peer]))
            requests[peer] = asked
        local = np.flatnonzero(source_of >= 0)
        self._local = _Part(entry_row[local], source_of[local], n, next_source, own_ids, np.concatenate(fetched_ids))
        told = comm.alltoall(requests)
        self._serve_columns = [(peer, asked[0]) for peer, asked in enumerate(told) if asked is not None and asked[0] is not None]
        self._served = []  # (peer, part) of the rows this rank aggregates for peers
        for peer, asked in enumerate(told):
            if asked is not None and asked[1] is not None:
                dst_ids, rows, sources = asked[1]
                self._served.append((peer, _Part(rows, sources, dst_ids.size, n, dst_ids, own_ids)))
        # The formula on this rank's receives: b H C per row of z (or its gradient), b H (C + 1) per partial (or its
        # gradient), b H per t_i (or its gradient); summed over the ranks, 2 b H [C |cols| + (C + 2) |rows|] per block.
        unit = self.dtype.itemsize * self.heads
        z_row, partial_row = unit * self.channels, unit * (self.channels + 1)
        received = {
            "forward": [(sender, z_row * (rows.stop - rows.start)) for sender, rows, _ in self._fetch]
            + [(peer, partial_row * rows.size) for peer, rows in self._row_blocks]
            + [(peer, unit * part.n_rows) for peer, part in self._served],
            "backward": [(peer, z_row * rows.size) for peer, rows in (*self._serve_columns, *self._relay)]
            + [(peer, partial_row * part.n_rows) for peer, part in self._served]
            + [(peer, unit * rows.size) for peer, rows in self._row_blocks],
        }
        mine = [sum(b for _, b in received[d]) for d in ("forward", "backward")]
        mine.append(sum(b for d in received.values() for peer, b in d if self.groups[peer] != self.groups[rank]))
        totals = comm.allreduce(np.array(mine, np.int64), op=MPI.SUM)
        self.planned_forward, self.planned_backward, self.planned_between_groups = (int(v) for v in totals)
        self.bytes_forward = self.bytes_backward = self.bytes_between_groups = 0
        self.counters: list = []  # objects whose bytes_forward, bytes_backward and wire_bytes the runs add to
        self._comm = comm.Dup()
        self._closed = False

    def __repr__(self) -> str:
        cols = sum(block.cols.size for block in self.blocks)
        rows = sum(block.rows.size for block in self.blocks)
        return (
            f"AttentionPlan(heads={self.heads}, channels={self.channels}, dtype={self.dtype}, strategy={self.strategy!r}, "
            f"fetched columns {cols}, rows served by peers {rows}, "
            f"planned bytes {self.planned_forward} + {self.planned_backward}, {self.planned_between_groups} between groups)"
        )

    def explain(self) -> str:
        """Not collective. This rank's blocks: the columns and rows each serves and their bytes per direction
        (:func:`~sparsewire.plan.attention.attention_bytes`), and the plan's total per training step."""
        itemsize = self.dtype.itemsize
        lines = [
            f"attention plan on rank {self.matrix.comm.Get_rank()}: strategy {self.strategy}, H = {self.heads}, "
            f"C = {self.channels}, {self.dtype}; per block 2 b H [C |cols| + (C + 2) |rows|] bytes per step"
        ]
        for block in self.blocks:
            forward, backward = block.bytes(self.heads, self.channels, itemsize)
            lines.append(
                f"  rank {block.peer}: {block.cols.size} columns fetched, {block.rows.size} rows aggregated there; "
                f"{forward} B forward, {backward} B backward"
            )
        through = [(sender, rows.stop - rows.start) for sender, rows, tag in self._fetch if tag == _Z_RELAY]
        if through or self._relay:
            lines.append(
                f"  two levels: {sum(n for _, n in through)} of those rows come through proxies "
                f"{sorted({s for s, _ in through})}; {sum(rows.size for _, rows in self._relay)} rows fetched here are "
                f"forwarded to ranks {sorted({m for m, _ in self._relay})} of this group, their gradients summed back"
            )
        lines.append(
            f"  every rank together: {self.planned_forward} B forward + {self.planned_backward} B backward = "
            f"{self.planned_forward + self.planned_backward} B per step, {self.planned_between_groups} B of it between groups"
        )
        return "\n".join(lines)

    def summary(self) -> dict:
        """Not collective. The plan's figures as a JSON-ready dict (strategy, shape, planned bytes per direction)."""
        return {
            "strategy": self.strategy,
            "heads": self.heads,
            "channels": self.channels,
            "dtype": self.dtype.name,
            "planned_bytes_forward": self.planned_forward,
            "planned_bytes_backward": self.planned_backward,
            "planned_bytes_between_groups": self.planned_between_groups,
            "fetched_columns": int(sum(block.cols.size for block in self.blocks)),
            "rows_served_by_peers": int(sum(block.rows.size for block in self.blocks)),
        }

    def close(self) -> None:
        """Collective. Free the plan's communicator (a second call does nothing)."""
        if not self._closed:
            self._closed = True
            self._comm.Free()

    def __enter__(self) -> AttentionPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # The two passes, on NumPy arrays (the autograd function below wraps them).

    def _count(self, peers: list, statuses: list, direction: str) -> None:
        """Add the bytes MPI delivered (``statuses`` of receives from ``peers``) to this plan's and its counters'."""
        counts = np.array([status.Get_count(MPI.BYTE) for status in statuses], np.int64)
        total = int(counts.sum())
        apart = np.asarray(peers, np.int64)
        between = int(counts[self.groups[apart] != self.groups[self.matrix.comm.Get_rank()]].sum()) if counts.size else 0
        self.bytes_between_groups += between
        for counter in (self, *self.counters):
            setattr(counter, f"bytes_{direction}", getattr(counter, f"bytes_{direction}") + total)
            if counter is not self:
                counter.wire_bytes += total

    def _exchange(self, receives: list, sends: list) -> None:
        """Post ``receives`` (peer, buffer, tag) and ``sends`` (peer, array, tag), wait for all; count the forward's
        bytes received."""
        comm = self._comm
        requests = [comm.Irecv(buffer, peer, tag) for peer, buffer, tag in receives]
        statuses = message_statuses(requests)
        sent = [comm.Isend(np.ascontiguousarray(array), peer, tag) for peer, array, tag in sends]
        wait_messages(requests, statuses)
        wait_messages(sent)
        self._count([peer for peer, _, _ in receives], statuses, "forward")

    def forward(self, z: np.ndarray, att_src: np.ndarray, t: np.ndarray, slope: float, dropout: float, salt: int):
        """Collective. This rank's rows of the aggregation and what the backward needs (module docstring)."""
        heads, channels, dtype = self.heads, self.channels, self.dtype
        # z and the fetched rows as one table (z itself when nothing is fetched)
        table = z
        if self._local.n_sources > self.n:
            table = np.empty((self._local.n_sources, heads, channels), dtype)
            table[: self.n] = z
        t_in = {peer: np.empty((part.n_rows, heads), dtype) for peer, part in self._served}
        # table[rows] of a slice is a view: the fetched rows land in the table itself.
        receives = [(sender, table[rows], _Z) for sender, rows, tag in self._fetch if tag == _Z]
        receives += [(peer, t_in[peer], _T) for peer, _ in self._served]
        sends = [(peer, z[rows], _Z) for peer, rows in self._serve_columns]
        sends += [(peer, t[rows], _T) for peer, rows in self._row_blocks]
        self._exchange(receives, sends)
        relayed = [(sender, table[rows], _Z_RELAY) for sender, rows, tag in self._fetch if tag == _Z_RELAY]
        if relayed or self._relay:  # two levels: the proxies forward what they fetched for their group
            self._exchange(relayed, [(member, table[rows], _Z_RELAY) for member, rows in self._relay])
        s_table = np.einsum("mhc,hc->mh", table, att_src)
        s_own = s_table[: self.n]
        local = self._local.forward(table, s_table, t, slope, dropout, salt)
        served = {}
        for peer, part in self._served:
            served[peer] = part.forward(z, s_own, t_in[peer], slope, dropout, salt)
        partial_in = {peer: np.empty((rows.size, heads * (channels + 1)), dtype) for peer, rows in self._row_blocks}
        sends = [(peer, np.concatenate([L, V.reshape(L.shape[0], -1)], axis=1), _PARTIAL) for peer, (_, L, V) in served.items()]
        self._exchange([(peer, partial_in[peer], _PARTIAL) for peer in partial_in], sends)
        remote = {
            peer: (buffer[:, :heads], buffer[:, heads:].reshape(-1, heads, channels)) for peer, buffer in partial_in.items()
        }
        out, _, merged = _kernels().merge_partials(local[1], local[2], [(rows, *remote[peer]) for peer, rows in self._row_blocks])
        weights = {None: merged[0], **{peer: w for (peer, _), w in zip(self._row_blocks, merged[1:])}}
        return out, {"table": table, "s": s_table, "t": t, "t_in": t_in, "local": local, "served": served,
                     "remote": remote, "out": out, "weights": weights}  # fmt: skip

    def backward(self, G: np.ndarray, att_src: np.ndarray, z: np.ndarray, slope: float, dropout: float, salt: int, saved):
        """Collective. The gradients of z, att_src and t from that of the output ``G`` (module docstring)."""
        heads, channels, dtype, n = self.heads, self.channels, self.dtype, self.n
        out, weights, table, s_table, t = saved["out"], saved["weights"], saved["table"], saved["s"], saved["t"]

        def partial_gradients(w, V, rows):
            return _kernels().merge_gradients(G, out, w, V, rows)

        # Round one: the gradients of the peers' partials out; the fetched rows' gradients once the local part is done
        # (a proxy's once its members' have been added).
        grads_in = {peer: np.empty((part.n_rows, heads * (channels + 1)), dtype) for peer, part in self._served}
        z_grads_in = {peer: np.empty((rows.size, heads, channels), dtype) for peer, rows in self._serve_columns}
        t_grads_in = {peer: np.empty((rows.size, heads), dtype) for peer, rows in self._row_blocks}
        relay_grads_in = [np.empty((rows.size, heads, channels), dtype) for _, rows in self._relay]
        comm = self._comm
        receives = [(peer, buffer, _PARTIAL_GRAD) for peer, buffer in grads_in.items()]
        receives += [(member, buffer, _Z_GRAD_RELAY) for (member, _), buffer in zip(self._relay, relay_grads_in)]
        receives += [(peer, buffer, _Z_GRAD) for peer, buffer in z_grads_in.items()]
        receives += [(peer, buffer, _T_GRAD) for peer, buffer in t_grads_in.items()]
        requests = [comm.Irecv(buffer, peer, tag) for peer, buffer, tag in receives]
        statuses = message_statuses(requests)
        sent = []
        for peer, rows in self._row_blocks:
            gV, gL = partial_gradients(weights[peer], saved["remote"][peer][1], rows)
            sent.append(
                comm.Isend(np.ascontiguousarray(np.concatenate([gL, gV.reshape(rows.size, -1)], axis=1)), peer, _PARTIAL_GRAD)
            )
        gz = np.zeros_like(table)
        gs = np.zeros(s_table.shape, dtype)
        softmax, _, V_local = saved["local"]
        gV, gL = partial_gradients(weights[None], V_local, None)
        gt = self._local.backward(table, s_table, t, slope, dropout, salt, softmax, V_local, gV, gL, gz, gs)
        d_att = np.einsum("mh,mhc->hc", gs[n:], table[n:])  # the fetched rows' share (their s was made here)
        # The fetched rows' gradients, their s path included: to the proxies at once, to the owners once the members'
        # gradients of the rows this rank fetched for them are in (they are summed in member order).
        g_table = gz + gs[:, :, None] * att_src
        sent += [comm.Isend(g_table[rows], sender, _Z_GRAD_RELAY) for sender, rows, tag in self._fetch if tag == _Z_RELAY]
        relays = slice(len(grads_in), len(grads_in) + len(relay_grads_in))
        wait_messages(requests[relays], statuses[relays])
        for (_, rows), buffer in zip(self._relay, relay_grads_in):
            g_table[rows] += buffer
        sent += [comm.Isend(g_table[rows], sender, _Z_GRAD) for sender, rows, tag in self._fetch if tag == _Z]
        # Round two: aggregate the gradients of the partials made here; send those of t back.
        wait_messages(requests[: len(grads_in)], statuses[: len(grads_in)])
        s_own, gz_own, gs_own = s_table[:n], gz[:n], gs[:n]
        for peer, part in self._served:
            buffer = grads_in[peer]
            gL_in, gV_in = buffer[:, :heads], buffer[:, heads:].reshape(-1, heads, channels)
            softmax, _, V_p = saved["served"][peer]
            gt_p = part.backward(z, s_own, saved["t_in"][peer], slope, dropout, salt, softmax, V_p,
                                 np.ascontiguousarray(gV_in), np.ascontiguousarray(gL_in), gz_own, gs_own)  # fmt: skip
            sent.append(comm.Isend(gt_p, peer, _T_GRAD))
        wait_messages(requests[relays.stop :], statuses[relays.stop :])
        wait_messages(sent)
        self._count([peer for peer, _, _ in receives], statuses, "backward")
        d_att += np.einsum("mh,mhc->hc", gs_own, z)
        dz = gz_own + gs_own[:, :, None] * att_src
        for peer, rows in self._serve_columns:
            dz[rows] += z_grads_in[peer]
        for peer, rows in self._row_blocks:
            gt[rows] += t_grads_in[peer]
        return dz, d_att, gt


class _Attend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, att_src, t, plan, slope, dropout, salt):
        zn = z.detach().contiguous().numpy()
        an = att_src.detach().contiguous().numpy()
        out, saved = plan.forward(zn, an, t.detach().contiguous().numpy(), slope, dropout, salt)
        ctx.plan, ctx.arguments, ctx.saved, ctx.z, ctx.att = plan, (slope, dropout, salt), saved, zn, an
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, grad):
        slope, dropout, salt = ctx.arguments
        G = np.ascontiguousarray(grad.detach().numpy())
        dz, d_att, dt = ctx.plan.backward(G, ctx.att, ctx.z, slope, dropout, salt, ctx.saved)
        return torch.from_numpy(dz), torch.from_numpy(d_att), torch.from_numpy(dt), None, None, None, None


@collective_errors
def attend(
    plan: AttentionPlan, z: torch.Tensor, att_src: torch.Tensor, t: torch.Tensor, slope: float = 0.2, dropout: float = 0.0,
    salt: int = 0,
) -> torch.Tensor:  # fmt: skip
    """Collective. This rank's rows of ``out_i = sum_j alpha_ij z_j`` with ``alpha_ij = softmax_j(LeakyReLU(s_j + t_i))``
    over row i's entries (Veličković et al., ICLR 2018), ``s_j = <att_src, z_j>``; ``z`` is this rank's (rows, H, C),
    ``att_src`` (H, C), ``t`` (rows, H). Attention dropout at rate ``dropout`` draws its masks from (destination,
    source, head, ``salt``). Differentiable in z, att_src and t; every rank must call it in the same order."""
    problem = None
    rank = plan.matrix.comm.Get_rank()
    expected = (plan.n, plan.heads, plan.channels)
    if plan._closed:
        problem = "this AttentionPlan was closed; make a new one"
    elif tuple(z.shape) != expected or tuple(t.shape) != expected[:2] or tuple(att_src.shape) != expected[1:]:
        problem = (
            f"rank {rank}: z, att_src and t have shapes {tuple(z.shape)}, {tuple(att_src.shape)}, {tuple(t.shape)}; "
            f"the plan expects {expected}, {expected[1:]}, {expected[:2]} (this rank's rows, heads, channels)"
        )
    elif z.device.type != "cpu":
        problem = f"rank {rank}: attention runs on the CPU here; its features are on {z.device}"
    elif z.dtype != torch.from_numpy(np.empty(0, plan.dtype)).dtype:
        problem = f"rank {rank}: features are {z.dtype}, the plan is {plan.dtype}"
    agree_on_error(plan.matrix.comm, problem)
    return _Attend.apply(z, att_src, t, plan, float(slope), float(dropout), int(salt) & 0xFFFFFFFF)


def make_attention_plan(
    matrix, heads: int, channels: int, dtype, strategy: str, self_loops: bool, node_ids, threads: int = 1,
    groups: np.ndarray | None = None,
) -> AttentionPlan:  # fmt: skip
    """Collective. Check the arguments on every rank, then plan (:class:`AttentionPlan`); ``groups``: each rank's group,
    which ``column-hier`` needs."""
    problem = None
    size = matrix.comm.Get_size()
    if strategy not in ATTENTION_STRATEGIES:
        problem = f"unknown attention strategy {strategy!r}; choose one of {', '.join(ATTENTION_STRATEGIES)}"
    elif matrix.shape[0] != matrix.shape[1] or not np.array_equal(matrix.row_partition.offsets, matrix.col_partition.offsets):
        problem = f"attention needs a square graph whose rows and columns are split alike (got {matrix.shape})"
    elif np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        problem = f"dtype {np.dtype(dtype)} is not supported; use float32 or float64"
    elif strategy in HIERARCHICAL_ATTENTION and (groups is None or np.shape(groups) != (size,)):
        problem = f"attention strategy {strategy!r} routes through groups; give each of the {size} ranks its group"
    agree_on_error(matrix.comm, problem)
    agree_on_values(
        matrix.comm,
        {"heads": int(heads), "channels": int(channels), "strategy": strategy, "self_loops": bool(self_loops)},
        "build every rank's layers alike",
    )
    return AttentionPlan(matrix, heads, channels, dtype, strategy, self_loops, node_ids, threads, groups)
