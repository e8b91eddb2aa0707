"""PyG's layers, distributed: subclasses of ``GCNConv``, ``SAGEConv``, ``GATConv`` and ``torch.nn.BatchNorm1d`` with
the same constructor, parameter names and ``state_dict``, and :func:`convert`, which swaps them into a model (as
``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` does for batch norm).

Given a :class:`~sparsewire.pyg.graph.DistributedGraph` where PyG's layers take ``edge_index``, a layer computes this
rank's rows of its output from this rank's rows of its input; given a plain ``edge_index`` it is PyG's layer. The
propagations run on the minimal-byte SpMM plans (:func:`sparsewire.gnn.propagate`: forward ``A X``, backward
``A^T G``), attention on the attention plans (:func:`sparsewire.gnn.attend`: the softmax over a row whose entries live
on several ranks merged exactly from partials), batch statistics summed over the ranks.
"""

from __future__ import annotations

import itertools
import math
import weakref

import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg
from mpi4py import MPI
from torch_geometric.nn.conv import MessagePassing

from sparsewire.comm.runtime import world
from sparsewire.errors import InputError
from sparsewire.gnn import attend, propagate
from sparsewire.pyg.graph import DistributedGraph, halo_hook
from sparsewire.pyg.halo import halo_problem
from sparsewire.pyg.training import all_reduce_sum, broadcast_parameters

__all__ = ["BatchNorm1d", "GATConv", "GCNConv", "SAGEConv", "convert", "SUPPORTED"]

#: What :func:`convert` swaps, and the options each takes (the others are PyG's defaults and are refused).
SUPPORTED = (
    "GCNConv, SAGEConv, GATConv, BatchNorm1d, and message-passing layers whose messages read only node rows "
    "(*_i, *_j) through the halo; docs/pyg.md lists their options"
)
_LAYER_IDS = itertools.count()  # salts of the attention dropout masks, one per GAT layer


def _plain_input(layer: torch.nn.Module, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise InputError(
            f"{type(layer).__name__} on a distributed graph takes this rank's node features as one tensor (got "
            f"{type(x).__name__}; bipartite inputs are not supported)"
        )


class GCNConv(pyg.GCNConv):
    """PyG's ``GCNConv``; on a :class:`DistributedGraph`: ``lin(x)``, then ``D^-1/2 (A + s I) D^-1/2`` times it
    (s = 2 with ``improved``, none without ``add_self_loops``; A itself with ``normalize=False``), then the bias.
    Inputs that take no gradient in training (a first layer's features), where ``in <= 2 out``, are propagated once
    and reused while they stay the same, then projected (``(A x) W``, as SAGEConv keeps its mean). As PyG's
    ``gcn_norm`` on an ``edge_index``: ``improved`` acts only with edge weights (without them every self-loop weighs
    1), and a stored self-loop keeps its weight. Collective there."""

    def forward(self, x, edge_index, edge_weight=None):
        """Collective on a :class:`DistributedGraph` (this rank's rows of the output); on an ``edge_index``, PyG's
        forward, not collective."""
        if not isinstance(edge_index, DistributedGraph):
            return super().forward(x, edge_index, edge_weight)
        _plain_input(self, x)
        weighted = edge_index.weights(edge_weight)
        if self.normalize:
            loops = (2.0 if self.improved and weighted else 1.0) if self.add_self_loops else 0.0
            operator = edge_index.operator("gcn", x.dtype, weighted=weighted, self_loops=loops)
        else:
            operator = edge_index.operator("adjacency", x.dtype, weighted=weighted)
        if _keeps_product(x, self.in_channels, self.out_channels):  # ((A x) W = A (x W))
            kept = _propagated_constant(self, operator, x, self.out_channels)
            return F.linear(kept, self.lin.weight, self.bias)  # (the bias added inside the GEMM)
        out = propagate(operator, self.lin(x))
        return out.add_(self.bias) if self.bias is not None else out  # (in place: the propagation's output is ours)


class SAGEConv(pyg.SAGEConv):
    """PyG's ``SAGEConv``; on a :class:`DistributedGraph` with the mean aggregator:
    ``lin_l(mean_j x_j) + lin_r(x_i)`` (x_j through ``relu(lin(x_j))`` with ``project``; L2-normalised with
    ``normalize``). Where ``lin_l`` narrows, it is applied before the mean (``W mean = mean W``), so each propagation
    moves the narrower width; the mean of inputs that take no gradient in training (a first layer's features), where
    ``in <= 2 out``, is computed once and reused while they stay the same. Another aggregator (``max``, ``min``,
    ``lstm``, a list, ...) runs PyG's forward through the halo (:mod:`sparsewire.pyg.halo`). Collective there."""

    def forward(self, x, edge_index, size=None):
        """Collective on a :class:`DistributedGraph` (this rank's rows of the output); on an ``edge_index``, PyG's
        forward, not collective."""
        if not isinstance(edge_index, DistributedGraph) or self.aggr != "mean":
            return super().forward(x, edge_index, size)
        _plain_input(self, x)
        if size is not None:
            raise InputError("SAGEConv on a distributed graph takes no size (the graph is square)")
        source = self.lin(x).relu() if self.project else x
        operator = edge_index.operator("mean", x.dtype)
        if _keeps_product(source, self.lin_l.in_channels, self.lin_l.out_channels):
            out = self.lin_l(_propagated_constant(self, operator, source, self.lin_l.out_channels))
        elif self.lin_l.out_channels < self.lin_l.in_channels:
            out = propagate(operator, F.linear(source, self.lin_l.weight))
            if self.lin_l.bias is not None:
                out = out.add_(self.lin_l.bias)  # (in place, as GCNConv's bias: the propagation's output is ours)
        else:
            out = self.lin_l(propagate(operator, source))
        if self.root_weight and self.lin_r.bias is None:
            out = out.addmm_(x, self.lin_r.weight.t())  # (in place, inside the GEMM: no pass over the rows, no copy)
        elif self.root_weight:
            out = out + self.lin_r(x)
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out


#: Each layer's propagated constant inputs: (the inputs, their version, the operator, the product). Outside the module,
#: so that a copy of the model (copy.deepcopy) copies no operator.
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _keeps_product(x: torch.Tensor, in_channels: int, out_channels: int) -> bool:
    """Not collective. Whether a layer propagates its inputs once and keeps the product (:func:`_propagated_constant`):
    inputs that take no gradient, in training, where projecting first would not halve the columns (``in <= 2 out``:
    projecting moves ``out`` columns forward and again backward every step)."""
    return not x.requires_grad and torch.is_grad_enabled() and in_channels <= 2 * out_channels


def _propagated_constant(layer: torch.nn.Module, operator, x: torch.Tensor, out: int) -> torch.Tensor:
    """Collective. ``operator @ x`` for features that take no gradient (a first layer's inputs in training: SAGE's mean,
    GCN's normalised sum), computed once and reused while every rank passes the same tensor unchanged (its
    ``_version``), as PyG's ``cached`` keeps GCN's normalisation. Projecting first would propagate ``out`` columns
    forward and again backward (the weight's gradient needs it); propagating the inputs moves ``in`` columns forward
    only, at most as many where ``in <= 2 out``, and none while the features stay the same. They go in blocks of at
    most ``out`` columns: the operator's plans share dense buffers as wide as the widest width propagated, and this
    one-off product would otherwise keep them ``in`` columns wide."""
    held = _KEPT.get(layer)
    same = np.array([held is not None and held[0]() is x and held[1] == x._version and held[2] is operator], np.int32)
    operator.comm.Allreduce(MPI.IN_PLACE, same, op=MPI.MIN)  # (a rank that propagates alone would wait for ever)
    if not same[0]:
        del held  # (with the entry, the stale product is freed before its successor is made)
        _KEPT.pop(layer, None)
        pieces = torch.tensor_split(x, max(math.ceil(x.shape[1] / max(out, 1)), 1), dim=1)
        if len(pieces) == 1:
            product = propagate(operator, x)
        else:  # each block written into the product as it comes, not all held for one concatenation
            product, start = x.new_empty((operator.local_nodes, x.shape[1])), 0
            for piece in pieces:
                product[:, start : start + piece.shape[1]] = propagate(operator, piece)
                start += piece.shape[1]
        held = _KEPT[layer] = (weakref.ref(x), x._version, operator, product)
    else:  # (a step's first layer: the last step's backward freed its temporaries)
        operator.release_free_memory(x.device)
    return held[3]


class GATConv(pyg.GATConv):
    """PyG's ``GATConv``; on a :class:`DistributedGraph` the attention runs on the attention plans
    (:func:`sparsewire.gnn.attend`), its dropout with masks drawn from (destination, source, head, step) instead of
    PyTorch's generator (the same rate; equal to PyG's at rate 0). Collective there."""

    def forward(self, x, edge_index, edge_attr=None, size=None, return_attention_weights=None):
        """Collective on a :class:`DistributedGraph` (this rank's rows of the output); on an ``edge_index``, PyG's
        forward, not collective."""
        if not isinstance(edge_index, DistributedGraph):
            return super().forward(x, edge_index, edge_attr, size, return_attention_weights)
        _plain_input(self, x)
        for name, value in (("edge_attr", edge_attr), ("size", size), ("return_attention_weights", return_attention_weights)):
            if value is not None and value is not False:
                raise InputError(f"GATConv on a distributed graph does not take {name}; supported: {SUPPORTED}")
        heads, channels = self.heads, self.out_channels
        z = self.lin(x).view(-1, heads, channels)
        t = (z * self.att_dst).sum(dim=-1)
        operator = edge_index.operator("adjacency", x.dtype)
        plan = operator.attention(heads, channels, z.dtype, self.add_self_loops)
        if self.training:
            self._sparsewire_steps = getattr(self, "_sparsewire_steps", 0) + 1
        if not hasattr(self, "_sparsewire_id"):
            self._sparsewire_id = next(_LAYER_IDS)
        salt = getattr(self, "_sparsewire_steps", 0) * 1024 + self._sparsewire_id % 1024
        out = attend(plan, z, self.att_src.view(heads, channels), t, self.negative_slope,
                     self.dropout if self.training else 0.0, salt)  # fmt: skip
        out = out.reshape(-1, heads * channels) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x)
        return out + self.bias if self.bias is not None else out


class BatchNorm1d(torch.nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` whose batch statistics are those of every rank's rows: the mean and the (biased)
    variance from sums over the ranks (two all-reduces, differentiable), the running statistics updated with them as
    one process updates them (unbiased variance, ``momentum``, or the cumulative mean when ``momentum`` is None).
    Collective in training (and without running statistics); in evaluation it uses the running statistics."""

    comm: MPI.Comm | None = None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Collective in training: the rows normalised with the statistics of every rank's rows."""
        if not self.training and self.track_running_stats:
            return super().forward(input)
        if input.dim() != 2:
            raise InputError(f"BatchNorm1d on several ranks takes (nodes, features) (got {input.dim()} dimensions)")
        comm = self.comm or world()
        # the column sums and the rows in one all-reduce, in float64 (float32 counts rows exactly only to 2**24)
        rows = torch.tensor([input.shape[0]], dtype=torch.float64, device=input.device)
        sums = all_reduce_sum(torch.cat([input.sum(dim=0).double(), rows]), comm)
        count = int(sums[-1])
        if count < 2 and self.training:
            raise InputError(f"batch norm needs more than one node over all ranks in training (got {count})")
        mean = (sums[:-1] / count).to(input.dtype)
        centred = input - mean
        variance = all_reduce_sum((centred * centred).sum(dim=0), comm) / count
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                self.running_var.mul_(1 - factor).add_(variance.detach() * count / (count - 1), alpha=factor)
        out = centred / torch.sqrt(variance + self.eps)
        return out * self.weight + self.bias if self.affine else out


_SWAPS = {pyg.GCNConv: GCNConv, pyg.SAGEConv: SAGEConv, pyg.GATConv: GATConv, torch.nn.BatchNorm1d: BatchNorm1d}


def _refusal(module: torch.nn.Module) -> str | None:
    """Why ``module`` cannot run distributed, or None."""
    name = type(module).__name__
    kind = next((base for base in _SWAPS if isinstance(module, base)), None)
    if kind is None or (kind is pyg.SAGEConv and module.aggr != "mean"):
        if isinstance(module, MessagePassing):
            problem = _options_problem(module) or halo_problem(module)
            return f"{problem}; supported: {SUPPORTED}" if problem else None
        if type(module).__module__.startswith("torch_geometric.nn.norm") and not isinstance(module, pyg.BatchNorm):
            return f"{name} computes statistics over the graph and is not supported; supported: {SUPPORTED}"
        return None
    if type(module) not in (kind, _SWAPS[kind]):  # its own forward would run on local rows (batch norm) or fail
        return f"{name}, a subclass of {kind.__name__}, is not converted; supported: {SUPPORTED}"
    if isinstance(module, MessagePassing) and _options_problem(module):
        return _options_problem(module)
    if kind is pyg.GCNConv and module.aggr != "add":
        return f"GCNConv(aggr={module.aggr!r}) is not supported: only aggr='add'"
    if kind is pyg.GATConv:
        if module.edge_dim is not None:
            return f"GATConv(edge_dim={module.edge_dim}) is not supported: edge features are not distributed"
        if module.aggr != "add":
            return f"GATConv(aggr={module.aggr!r}) is not supported: only aggr='add'"
    return None


def _options_problem(module: MessagePassing) -> str | None:
    name = type(module).__name__
    if module.flow != "source_to_target":
        return f"{name}(flow={module.flow!r}) is not supported: only flow='source_to_target'"
    if getattr(module, "decomposed_layers", 1) != 1:
        return f"{name}(decomposed_layers={module.decomposed_layers}) is not supported: only 1"
    channels = getattr(module, "in_channels", 1)
    if channels is not None and not isinstance(channels, int):
        return f"{name} with bipartite in_channels {channels} is not supported: give one int"
    return None


def convert(model: torch.nn.Module, comm: MPI.Comm | None = None, *, broadcast: bool = True) -> torch.nn.Module:
    """Collective (with ``broadcast``). Swap every ``GCNConv``, ``SAGEConv``, ``GATConv`` and ``torch.nn.BatchNorm1d``
    of ``model`` (the model itself too) for its distributed subclass in place, keeping every parameter and buffer, so
    the model's forward is unchanged and a ``state_dict`` saved on one process loads into it and back. Any other
    message-passing layer runs PyG's own forward through the halo (:mod:`sparsewire.pyg.halo`) where its messages read
    only node rows; one that reads edge tensors, a graph-wide norm, a subclass of a swapped layer, or an option the
    layers do not take is refused with one :class:`~sparsewire.errors.InputError` naming it and the supported set,
    before anything changes. With
    ``broadcast`` every rank then takes rank 0's weights (:func:`~sparsewire.pyg.training.broadcast_parameters`).
    Returns the model."""
    comm = world() if comm is None else comm
    modules = list(model.modules())
    for module in modules:
        problem = _refusal(module)
        if problem:
            raise InputError(problem)
    for module in modules:
        for base, swap in _SWAPS.items():
            if type(module) is base:
                module.__class__ = swap
                if swap is BatchNorm1d:
                    module.comm = comm
        if isinstance(module, MessagePassing) and not getattr(module, "_sparsewire_halo", False):
            # Inert on a plain edge_index; on a distributed graph, the layers that do not propagate themselves.
            module.register_propagate_forward_pre_hook(halo_hook)
            module.register_edge_update_forward_pre_hook(halo_hook)
            module._sparsewire_halo = True
    if broadcast:
        broadcast_parameters(model, comm)
    return model
