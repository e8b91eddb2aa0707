"""Any PyG message-passing layer on a distributed graph, through the halo: PyG's own ``propagate`` runs on this rank's
edges after every source row it reads (``*_j``) is extended by the rows of the foreign sources, fetched from their
owners.

For rank q with nodes V_q, the halo is ``H_q = {j not in V_q : A[i, j] != 0 for some i in V_q}`` (the column strategy's
fetch set). The local edge list has targets in ``[0, |V_q|)`` and sources in ``[0, |V_q| + |H_q|)`` (own rows first,
then the halo in global order), and ``size = (|V_q| + |H_q|, |V_q|)``: each target sees every in-edge and every
source row, so any aggregation (sum, mean, max, softmax, LSTM over CSR order) gives PyG's result for this rank's
rows. Forward: one all-to-all of the requested rows; backward: the gradients of the fetched rows back to their owners,
added into theirs (``d x_j += sum over the ranks that fetched j``). Bytes per call: ``b F sum_q |H_q|`` each way.

A layer qualifies when ``message``, ``aggregate``, ``update`` and ``edge_update`` read nothing but node rows
(``*_i``, ``*_j``) and PyG's special arguments (``index``, ``ptr``, ``dim_size``, ...); one that reads edge
tensors, or touches ``edge_index`` outside ``propagate``, is refused with one line.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np
import torch

from sparsewire.comm.runtime import mpi_datatype
from sparsewire.errors import InputError

__all__ = ["Halo", "halo_problem", "through_halo"]


class Halo:
    """Collective to make. Which rows this rank fetches from each owner and serves to each reader, and its edges in
    the extended numbering. Made from the graph's pattern (the positions of :class:`DistributedMatrix`'s rows)."""

    def __init__(self, matrix):
        comm = matrix.comm
        self.comm, rank, size = comm, comm.Get_rank(), comm.Get_size()
        offsets = np.asarray(matrix.row_partition.offsets, np.int64)
        local = matrix.local_rows
        self.local_nodes = n_local = local.shape[0]
        columns = np.asarray(local.indices, np.int64)
        owner = np.searchsorted(offsets, columns, side="right") - 1
        foreign = owner != rank
        self.positions = np.unique(columns[foreign])  # sorted, so grouped by owner
        self.fetch_counts = np.bincount(np.searchsorted(offsets, self.positions, side="right") - 1, minlength=size)
        requested = comm.alltoall(np.split(self.positions, np.cumsum(self.fetch_counts)[:-1]))
        self.serve_rows = np.concatenate([np.asarray(r, np.int64) - offsets[rank] for r in requested]).astype(np.int64)
        self.serve_counts = np.array([len(r) for r in requested], np.int64)
        source = np.where(foreign, n_local + np.searchsorted(self.positions, columns), columns - offsets[rank])
        target = np.repeat(np.arange(n_local, dtype=np.int64), np.diff(local.indptr))
        self.edge_index = torch.from_numpy(np.vstack([source, target]).astype(np.int64))
        self.bytes_received = 0

    @property
    def size(self) -> tuple[int, int]:
        """(sources, targets) of the local edge list: own rows plus the halo, own rows."""
        return self.local_nodes + self.positions.size, self.local_nodes

    def exchange(self, rows: torch.Tensor, send_counts: np.ndarray, recv_counts: np.ndarray) -> torch.Tensor:
        """Collective. ``rows`` (grouped by peer, ``send_counts`` each) sent; ``recv_counts`` rows per peer received."""
        width = int(np.prod(rows.shape[1:], dtype=np.int64))
        send = np.ascontiguousarray(rows.detach().cpu().numpy().reshape(-1))
        received = np.empty(int(recv_counts.sum()) * width, send.dtype)
        kind = mpi_datatype(send.dtype)
        self.comm.Alltoallv(
            [send, (send_counts * width, _displacements(send_counts) * width), kind],
            [received, (recv_counts * width, _displacements(recv_counts) * width), kind],
        )
        self.bytes_received += int(received.nbytes - recv_counts[self.comm.Get_rank()] * width * received.itemsize)
        return torch.from_numpy(received.reshape((int(recv_counts.sum()), *rows.shape[1:]))).to(rows.device)

    def extend(self, x: torch.Tensor) -> torch.Tensor:
        """Collective. ``x`` (this rank's rows first) followed by the halo's rows; differentiable."""
        return torch.cat([x, _Fetch.apply(x, self)])


def _displacements(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


class _Fetch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, halo: Halo) -> torch.Tensor:
        ctx.halo, ctx.shape = halo, x.shape
        index = torch.from_numpy(halo.serve_rows).to(x.device)
        return halo.exchange(x.detach().index_select(0, index), halo.serve_counts, halo.fetch_counts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        halo = ctx.halo
        returned = halo.exchange(grad.contiguous(), halo.fetch_counts, halo.serve_counts)
        out = torch.zeros(ctx.shape, dtype=grad.dtype, device=grad.device)
        out.index_add_(0, torch.from_numpy(halo.serve_rows).to(grad.device), returned)
        return out, None


#: Aggregations that do not depend on the order of a target's edges (the halo numbers sources otherwise than PyG).
ORDER_FREE = ("SumAggregation", "MeanAggregation", "MaxAggregation", "MinAggregation", "MulAggregation", "VarAggregation",
              "StdAggregation", "SoftmaxAggregation", "PowerMeanAggregation")  # fmt: skip


def halo_problem(module) -> str | None:
    """Not collective. Why a message-passing layer cannot run through the halo (it reads an edge tensor, or aggregates
    in edge order), or None."""
    aggregation = getattr(module, "aggr_module", None)
    parts = getattr(aggregation, "aggrs", [aggregation])
    ordered = [type(a).__name__ for a in parts if a is not None and type(a).__name__ not in ORDER_FREE]
    if ordered:
        return (
            f"{type(module).__name__}'s aggregation {', '.join(ordered)} depends on the order of the edges, which differs "
            "on a distributed graph; use an order-free one (sum, mean, max, min, var, std, softmax, powermean)"
        )
    arguments = list(module._user_args) + list(module._edge_user_args)
    other = [name for name in arguments if not name.endswith(("_i", "_j"))]
    if other:
        return (
            f"{type(module).__name__} reads {', '.join(sorted(set(other)))} per edge, which is not distributed; layers "
            "run through the halo only where message, aggregate and edge_update read node rows (*_i, *_j)"
        )
    return _forward_problem(type(module))


def _forward_problem(kind: type) -> str | None:
    """Why ``kind.forward`` may use ``edge_index`` otherwise than handing it to ``self.propagate`` or
    ``self.edge_updater`` (a degree computed from it, a type test that picks a branch), or None: read from its
    source, since such a use would give a wrong result without an error."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(kind.forward)))
    except (OSError, TypeError, SyntaxError):
        return f"{kind.__name__}'s forward has no readable source, so its use of edge_index cannot be checked"
    handed = set()
    for node in ast.walk(tree):
        function = getattr(node, "func", None)
        if (isinstance(node, ast.Call) and isinstance(function, ast.Attribute) and function.attr in ("propagate", "edge_updater")
                and isinstance(function.value, ast.Name) and function.value.id == "self"):  # fmt: skip
            handed.update(id(a) for a in [*node.args[:1], *(k.value for k in node.keywords if k.arg == "edge_index")])
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "edge_index" and isinstance(node.ctx, ast.Load) and id(node) not in handed:
            return (
                f"{kind.__name__}'s forward uses edge_index outside propagate (line {node.lineno} of its forward), which "
                "would be wrong on a distributed graph"
            )
    return None


def through_halo(module, halo: Halo, size, kwargs: dict):
    """Collective (the fetches). What PyG's propagate (or edge_updater) runs on instead of a distributed graph: the
    local edge list, the extended size, and every node tensor a ``*_j`` argument reads extended by the halo's rows
    (as ``(extended, own)`` where ``*_i`` reads it too)."""
    if size is not None:
        raise InputError(f"{type(module).__name__} on a distributed graph takes no size (the graph is square)")
    arguments = list(module._user_args) + list(module._edge_user_args)
    sources = {name[:-2] for name in arguments if name.endswith("_j")}
    targets = {name[:-2] for name in arguments if name.endswith("_i")}
    kwargs = dict(kwargs)
    for name in sorted(sources):  # the same order on every rank: each extension is a collective
        value = kwargs.get(name)
        if isinstance(value, (tuple, list)):
            kwargs[name] = (_extended(module, halo, value[0]), value[1])
        elif isinstance(value, torch.Tensor):
            extended = _extended(module, halo, value)
            kwargs[name] = (extended, value) if name in targets else extended
    return halo.edge_index.to(_device(kwargs)), halo.size, kwargs


def _extended(module, halo: Halo, value):
    if value is None:
        return None
    if value.shape[0] != halo.local_nodes or module.node_dim % value.dim() != 0:
        raise InputError(
            f"{type(module).__name__} passes propagate a tensor of shape {tuple(value.shape)}; on a distributed graph "
            f"node tensors hold this rank's {halo.local_nodes} rows in their first dimension"
        )
    return halo.extend(value)


def _device(kwargs) -> torch.device:
    for value in kwargs.values():
        value = value[0] if isinstance(value, (tuple, list)) and value else value
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")
