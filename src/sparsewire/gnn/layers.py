"""Graph convolution layers over a :class:`~sparsewire.gnn.propagate.GraphOperator`, with the
signatures of PyTorch Geometric's, and a model builder.

Every rank holds its nodes' rows of the features and the full (replicated) weights; the layers
compute this rank's rows of the output. Dropout masks are drawn from global node indices
(:func:`hash_dropout`), so a run on P ranks applies the same masks as on one.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from sparsewire.gnn.attention import attend
from sparsewire.gnn.propagate import GraphOperator, propagate
from sparsewire.gnn.sparse_input import sparse_linear
from sparsewire.profile.tracing import region

__all__ = ["GCNConv", "SAGEConv", "GATConv", "GNN", "hash_dropout", "glorot_"]


def glorot_(weight: torch.Tensor) -> torch.Tensor:
    """Not collective. Glorot (Xavier) uniform initialisation in place, as PyG's ``glorot``:
    ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``."""
    bound = math.sqrt(6.0 / (weight.size(-2) + weight.size(-1)))
    with torch.no_grad():
        return weight.uniform_(-bound, bound)


class GCNConv(nn.Module):
    r"""The graph convolution of Kipf and Welling (ICLR 2017), distributed.

    .. math::
        \mathbf{X}' = \hat{\mathbf{D}}^{-1/2} \hat{\mathbf{A}} \hat{\mathbf{D}}^{-1/2} \mathbf{X} \mathbf{\Theta} + \mathbf{b}

    with :math:`\hat{\mathbf{A}} = \mathbf{A} + \mathbf{I}` and :math:`\hat{D}_{ii} = \sum_j \hat{A}_{ij}`.
    The normalised matrix is the operator's matrix, computed once
    (:func:`~sparsewire.gnn.propagate.gcn_normalize`); the layer multiplies by
    :math:`\mathbf{\Theta}` first, then propagates, as PyG's ``GCNConv`` does, so each propagation
    moves ``out_channels`` columns.

    Args:
        in_channels (int): size of each input sample.
        out_channels (int): size of each output sample.
        bias (bool, optional): learn an additive bias. (default: :obj:`True`)

    Shapes:
        - **input:** node features of this rank's nodes :math:`(|\mathcal{V}_p|, F_{in})`, operator
        - **output:** :math:`(|\mathcal{V}_p|, F_{out})`
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True, dtype: torch.dtype = torch.float64):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(out_channels, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Not collective. Glorot weights, zero bias (PyG's defaults)."""
        glorot_(self.weight)
        if self.bias is not None:
            with torch.no_grad():
                self.bias.zero_()

    def forward(self, x: torch.Tensor, operator: GraphOperator) -> torch.Tensor:
        """Collective. This rank's rows of the layer's output (``x`` dense, or sparse COO input features)."""
        out = propagate(
            operator, sparse_linear(x, self.weight, operator.threads or 1, operator.kernels) if x.is_sparse else x @ self.weight.T
        )
        return out + self.bias if self.bias is not None else out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels})"


class SAGEConv(nn.Module):
    r"""The GraphSAGE operator of Hamilton et al. (NeurIPS 2017) with the mean aggregator, distributed.

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i + \mathbf{W}_2 \cdot
        \mathrm{mean}_{j \in \mathcal{N}(i)} \mathbf{x}_j

    The operator's matrix is the row-normalised pattern (:func:`~sparsewire.gnn.propagate.mean_normalize`).
    As in PyG, the bias belongs to the neighbour term (``lin_l``) and the root term is ``lin_r``.
    When ``out_channels < in_channels`` the layer projects before it aggregates
    (``W_1 mean(x_j) = mean(W_1 x_j)``), so each propagation moves ``out_channels`` columns.

    Args:
        in_channels (int): size of each input sample.
        out_channels (int): size of each output sample.
        root_weight (bool, optional): add the transformed root node features. (default: :obj:`True`)
        bias (bool, optional): learn an additive bias. (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_p|, F_{in})`, operator
        - **output:** :math:`(|\mathcal{V}_p|, F_{out})`
    """

    def __init__(
        self, in_channels: int, out_channels: int, root_weight: bool = True, bias: bool = True, dtype: torch.dtype = torch.float64
    ):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.lin_l = nn.Linear(in_channels, out_channels, bias=bias, dtype=dtype)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False, dtype=dtype) if root_weight else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Not collective. PyTorch's Linear initialisation (as PyG's ``Linear`` with kaiming_uniform)."""
        self.lin_l.reset_parameters()
        if self.lin_r is not None:
            self.lin_r.reset_parameters()

    def forward(self, x: torch.Tensor, operator: GraphOperator) -> torch.Tensor:
        """Collective. This rank's rows of the layer's output (``x`` dense, or sparse COO input features)."""
        threads = operator.threads or 1
        if self.out_channels < self.in_channels:
            # Mean aggregation is linear, so W_1 mean(x_j) = mean(W_1 x_j): project first and
            # propagate out_channels columns instead of in_channels (on Cora 16 instead of 1433;
            # PyG's SAGEConv aggregates first). The same function, rounded in another order.
            weight = self.lin_l.weight
            out = propagate(operator, sparse_linear(x, weight, threads, operator.kernels) if x.is_sparse else x @ weight.T)
            if self.lin_l.bias is not None:
                out = out + self.lin_l.bias
        else:
            out = self.lin_l(propagate(operator, x.to_dense() if x.is_sparse else x))
        if self.lin_r is None:
            return out
        return out + (sparse_linear(x, self.lin_r.weight, threads, operator.kernels) if x.is_sparse else self.lin_r(x))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, aggr=mean)"


class GATConv(nn.Module):
    r"""The graph attention operator of Veličković et al. (ICLR 2018), distributed, with PyG's arguments, defaults
    and parameter names (``lin.weight``, ``att_src``, ``att_dst``, ``res.weight``, ``bias``), so PyG's
    ``state_dict`` loads.

    .. math::
        \mathbf{z}_j = \mathbf{\Theta} \mathbf{x}_j, \quad
        \alpha_{ij} = \mathrm{softmax}_j\big(\mathrm{LeakyReLU}(\mathbf{a}_{src}^\top \mathbf{z}_j
        + \mathbf{a}_{dst}^\top \mathbf{z}_i)\big), \quad
        \mathbf{x}'_i = \sum_{j \in \mathcal{N}(i) \cup \{i\}} \alpha_{ij} \mathbf{z}_j

    per head; heads concatenated or averaged, then the residual and the bias. Self-loops follow PyG's GAT rule
    (stored ones removed, one added per node). The softmax over a row whose entries live on several ranks is merged
    exactly from partials (:mod:`sparsewire.plan.attention`), and attention dropout draws its masks from (destination,
    source, head, step), so P ranks apply the masks of one.

    Args:
        in_channels (int): size of each input sample.
        out_channels (int): size of each head's output.
        heads (int, optional): attention heads. (default: :obj:`1`)
        concat (bool, optional): concatenate the heads (else average them). (default: :obj:`True`)
        negative_slope (float, optional): LeakyReLU's slope. (default: :obj:`0.2`)
        dropout (float, optional): dropout of the attention coefficients in training. (default: :obj:`0`)
        add_self_loops (bool, optional): attend to each node itself too. (default: :obj:`True`)
        bias (bool, optional): learn an additive bias. (default: :obj:`True`)
        residual (bool, optional): add a linear projection of the input. (default: :obj:`False`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_p|, F_{in})`, operator
        - **output:** :math:`(|\mathcal{V}_p|, H F_{out})` or :math:`(|\mathcal{V}_p|, F_{out})` without ``concat``
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
        residual: bool = False,
        dtype: torch.dtype = torch.float64,
    ):
        super().__init__()
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = float(negative_slope), float(dropout), add_self_loops
        total = out_channels * (heads if concat else 1)
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False, dtype=dtype)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels, dtype=dtype))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels, dtype=dtype))
        self.res = nn.Linear(in_channels, total, bias=False, dtype=dtype) if residual else None
        self.bias = nn.Parameter(torch.empty(total, dtype=dtype)) if bias else None
        self.steps = 0
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Not collective. Glorot weights and attention vectors, zero bias (PyG's order and defaults)."""
        glorot_(self.lin.weight)
        if self.res is not None:
            glorot_(self.res.weight)
        glorot_(self.att_src)
        glorot_(self.att_dst)
        if self.bias is not None:
            with torch.no_grad():
                self.bias.zero_()

    def forward(self, x: torch.Tensor, operator: GraphOperator, salt: int | None = None) -> torch.Tensor:
        """Collective. This rank's rows of the layer's output. ``salt`` seeds the attention dropout's masks (by
        default the count of training calls); every rank must pass the same."""
        threads = operator.threads or 1
        linear = sparse_linear(x, self.lin.weight, threads, operator.kernels) if x.is_sparse else self.lin(x)
        z = linear.view(-1, self.heads, self.out_channels)
        t = (z * self.att_dst).sum(dim=-1)
        plan = operator.attention(self.heads, self.out_channels, z.dtype, self.add_self_loops)
        if self.training:
            self.steps += 1
        dropout = self.dropout if self.training else 0.0
        out = attend(plan, z, self.att_src.view(self.heads, self.out_channels), t, self.negative_slope, dropout,
                     self.steps if salt is None else salt)  # fmt: skip
        out = out.reshape(-1, self.heads * self.out_channels) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + (sparse_linear(x, self.res.weight, threads, operator.kernels) if x.is_sparse else self.res(x))
        return out + self.bias if self.bias is not None else out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


def _keep_fraction(rows: np.ndarray, cols: np.ndarray, salt: int) -> np.ndarray:
    """u(i, j) in [0, 1): the mixing of :func:`~sparsewire.io.generators.deterministic_dense`, salted."""
    mask32 = np.uint64(0xFFFFFFFF)
    h = (
        rows.astype(np.uint64) * np.uint64(2654435761)
        + cols.astype(np.uint64) * np.uint64(40503)
        + np.uint64(salt & 0xFFFFFFFF) * np.uint64(97)
        + np.uint64(1)
    ) & mask32
    for _ in range(2):
        h = (((h >> np.uint64(16)) ^ h) * np.uint64(0x45D9F3B)) & mask32
    h = (h >> np.uint64(16)) ^ h
    return h / 2.0**32


_MASK_ELEMENTS = 1 << 18  # elements of one slice of a dense dropout mask


def hash_dropout(x: torch.Tensor, p: float, row_ids: np.ndarray, salt: int) -> torch.Tensor:
    """Not collective. Dropout whose mask depends only on (node id, column, salt): element (i, j)
    is kept when ``u(i, j) >= p`` (``u`` a 32-bit integer hash in [0, 1)) and scaled by
    ``1 / (1 - p)``; ``row_ids`` are the original ids of x's rows. The same salt on every rank gives
    every node the same mask at any P and under any partitioner. A sparse COO ``x`` (input
    features) keeps its pattern: only its stored values are drawn."""
    if p <= 0:
        return x
    if x.is_sparse:
        indices = x.indices()
        host = indices.cpu()
        u = _keep_fraction(np.asarray(row_ids)[host[0].numpy()], host[1].numpy(), salt)
        keep = torch.from_numpy(u >= p).to(device=x.device, dtype=x.dtype) / (1.0 - p)
        return torch.sparse_coo_tensor(indices, x.values() * keep, x.shape, is_coalesced=True, check_invariants=False)
    rows = np.asarray(row_ids)[:, None]
    cols = np.arange(x.shape[1])[None, :]
    keep = torch.empty(x.shape, dtype=x.dtype)
    # In slices of rows: the hash's 64-bit temporaries of a whole wide layer would outweigh the layer itself.
    step = max(1, _MASK_ELEMENTS // max(1, x.shape[1]))
    for start in range(0, x.shape[0], step):
        keep[start : start + step] = torch.from_numpy(_keep_fraction(rows[start : start + step], cols, salt) >= p)
    return x * keep.to(x.device) / (1.0 - p)


class GNN(nn.Module):
    """A stack of graph convolutions: ``dropout -> conv -> activation`` per hidden layer, then
    ``dropout -> conv -> log_softmax`` (the model of Kipf and Welling for ``layers = 2``, and of PyG's
    ``examples/gat.py`` for ``gat``).

    Args:
        model: ``gcn`` (:class:`GCNConv`, ReLU), ``sage`` (:class:`SAGEConv`, ReLU) or ``gat`` (:class:`GATConv`,
            ELU: ``heads`` concatenated heads per hidden layer, one head at the output, attention dropout
            ``dropout``).
        channels: sizes ``[in, hidden..., out]`` (``layers = len(channels) - 1``; for ``gat`` the hidden sizes are
            per head).
        dropout: the dropout probability before every convolution (0 disables it).
        seed: salts the dropout masks (with the step count).
        heads: attention heads of ``gat``'s hidden layers.
    """

    def __init__(
        self,
        model: str,
        channels: list[int],
        dropout: float = 0.5,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
        heads: int = 8,
    ):
        super().__init__()
        if model not in ("gcn", "sage", "gat"):
            raise ValueError(f"unknown model {model!r}; choose gcn, sage or gat")
        if len(channels) < 2:
            raise ValueError(f"channels {channels} needs at least [in, out]")
        self.model, self.dropout, self.seed = model, float(dropout), int(seed)
        pairs = list(zip(channels[:-1], channels[1:]))
        if model == "gat":
            last = len(pairs) - 1
            self.convs = nn.ModuleList(
                GATConv(
                    a * (heads if i else 1), b, heads=1 if i == last else heads, concat=i != last, dropout=dropout, dtype=dtype
                )
                for i, (a, b) in enumerate(pairs)
            )
        else:
            layer = GCNConv if model == "gcn" else SAGEConv
            self.convs = nn.ModuleList(layer(a, b, dtype=dtype) for a, b in pairs)
        self.activation = torch.nn.functional.elu if model == "gat" else torch.relu
        self.steps = 0

    def forward(self, x: torch.Tensor, operator: GraphOperator) -> torch.Tensor:
        """Collective. Log-probabilities of this rank's nodes, shape (local nodes, classes)."""
        if self.training:
            self.steps += 1
        tracer = operator.tracer
        for index, conv in enumerate(self.convs):
            salt = (self.seed * 1_000_003 + self.steps) * 64 + index
            if self.training:
                x = hash_dropout(x, self.dropout, operator.node_ids, salt)
            with region(tracer, f"layer {index} forward", layer=index):
                x = conv(x, operator, salt=salt + 32) if isinstance(conv, GATConv) else conv(x, operator)
            if tracer is not None and tracer.recording and x.requires_grad:
                _trace_backward(tracer, operator.hooks, conv, x, index)
            if index < len(self.convs) - 1:
                x = self.activation(x)
        return torch.log_softmax(x, dim=-1)


def _trace_backward(tracer, hooks: list, conv: nn.Module, out: torch.Tensor, index: int) -> None:
    """The span ``layer i backward`` of the coming backward pass, from autograd hooks: it starts when the
    gradient of the layer's output arrives and ends when the last of its parameters' gradients is
    accumulated (its propagation's backward and its matrix products lie between). The parameters'
    hooks remove themselves then (``hooks`` keeps them for :meth:`GraphOperator.stop_tracing`)."""
    started: list[int] = []
    parameters = [p for p in conv.parameters() if p.requires_grad]
    waiting = [len(parameters)]
    handles: list = []

    def begin(grad: torch.Tensor) -> None:
        started.append(tracer.clock())

    def accumulated(parameter: torch.Tensor) -> None:
        waiting[0] -= 1
        if waiting[0] == 0:
            for handle in handles:
                handle.remove()
            if started and tracer.recording:
                tracer.span(f"layer {index} backward", started[0], tracer.clock(), layer=index)

    out.register_hook(begin)
    handles += [p.register_post_accumulate_grad_hook(accumulated) for p in parameters]
    hooks.extend(handles)
