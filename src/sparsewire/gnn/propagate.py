"""Distributed graph propagation for PyTorch: ``Y = A X`` with autograd through the transposed plan.

:class:`GraphOperator` holds a distributed (normalised) adjacency and one :class:`SpmmPlan` per
feature width; :func:`propagate` is differentiable: forward ``Y_p = (A X)_p`` on the forward plan,
backward ``dL/dX = A^T (dL/dY)`` on ``plan.transpose()``, the adjoint plan with the same bytes. So
the gradient is right on directed graphs (A != A^T), where CAGNET-style codes that reuse A for the
backward are not. Rows of A index targets: ``Y[i] = sum_j A[i, j] X[j]`` aggregates the in-neighbours
j of i (the edge j -> i; PyTorch Geometric's ``edge_index = (j, i)``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

from sparsewire._lib.heap import keep_freed_heap, release_free_heap
from sparsewire.comm.runtime import agree_on_error, collective_errors, native_transport, node_ids, ranks_on_node
from sparsewire.distributed.matrix import DistributedMatrix
from sparsewire.distributed.spmm import SpmmPlan, plan_spmm
from sparsewire.errors import InputError
from sparsewire.exec import ExecOptions
from sparsewire.gnn.attention import AttentionPlan, make_attention_plan
from sparsewire.kernels import make_backend
from sparsewire.plan.attention import ATTENTION_STRATEGIES, HIERARCHICAL_ATTENTION
from sparsewire.plan.strategies import Strategy
from sparsewire.profile.tracing import region

__all__ = ["GraphOperator", "propagate", "scatter_rows", "gather_rows", "gcn_normalize", "mean_normalize"]

_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


class GraphOperator:
    """A distributed sparse operator for message passing, with one SpMM plan per feature width.

    Plans are made on first use of a width (Collective: every rank must propagate the same widths
    in the same order, as full-batch training does) and kept, each after a dtype's first derived from
    it (:meth:`~sparsewire.distributed.spmm.SpmmPlan.with_width`); :meth:`close` frees them.

    Args:
        matrix: the (normalised) adjacency, rows = targets, from :func:`sparsewire.distribute`.
        options: how every plan is made and run (:class:`~sparsewire.exec.options.ExecOptions`; by
            default the torch backend on the CPU, one thread).

    Attributes:
        bytes_forward, bytes_backward: bytes MPI delivered to this rank by the propagations so far
            (receive statuses), forward and backward (reset them to measure an epoch); ``wire_bytes``: the
            bytes on the wire for both (fewer where ``compress`` codes the payloads).
        tracer: the :class:`~sparsewire.profile.tracing.Tracer` while :func:`sparsewire.trace` records the
            training (its window counts epochs), else None.
    """

    trace_unit = "epoch"  # sparsewire.trace's window counts training epochs (gnn.train begins each)
    #: Whether each propagation on the CPU first gives the C heap's free pages back to the operating system
    #: (:func:`~sparsewire._lib.heap.release_free_heap`; the same on every rank): training frees and allocates tensors
    #: of the features' size every step, and glibc keeps the freed ones resident. None (the default): where this rank
    #: shares its node with other ranks, whose memory it would hold idle; a rank alone on its node keeps them, as the
    #: pages it gives back are faulted in again, and has the process's allocator keep the large ones too (which glibc
    #: would otherwise unmap when freed and fault in page by page at the next step: ``keep_freed_heap``).
    release_heap: bool | None = None

    def __init__(
        self, matrix: DistributedMatrix, options: ExecOptions | None = None, *, symmetric_scale: np.ndarray | None = None
    ):
        """Not collective (plans are made later, collectively, per width). ``symmetric_scale``: where
        ``A = diag(s)^+ M`` with M symmetric, this rank's rows of s (all ones where A itself is symmetric, as GCN's
        normalisation of an undirected graph; the degrees for the mean over its neighbours); the backward then runs
        ``A^T G = M diag(s)^+ G = diag(s) A diag(s)^+ G`` on A's own plan, and no transposed plan is made (its sparse
        operands are about as large as the forward's). None: the backward runs on the transposed plan."""
        self.matrix, self.comm = matrix, matrix.comm
        self._scale = None if symmetric_scale is None else np.asarray(symmetric_scale, np.float64)
        if self._scale is not None and self._scale.shape != (matrix.local_rows.shape[0],):
            raise ValueError(f"symmetric_scale holds {self._scale.shape} values; give one per row of this rank")
        self._scales: dict = {}  # (dtype, device) -> (s, s^+) as column tensors, None where s is all ones
        self._shares_node: bool | None = None  # whether other ranks share this rank's node (at the first propagation)
        self.options = options or ExecOptions(backend="torch", threads=1, transport=native_transport(self.comm))
        self.threads = self.options.threads
        self.kernels = make_backend(
            self.options.backend, self.options.device
        )  # also for the first layer's sparse input (gnn/sparse_input.py)
        self.plans: dict[tuple[int, str], SpmmPlan] = {}
        self.attention_plans: dict[tuple, AttentionPlan] = {}
        self.bytes_forward = self.bytes_backward = self.wire_bytes = 0
        self._all_node_ids = None
        self.tracer = None
        self._traced: list[SpmmPlan] = []  # plans whose executors record into the tracer
        self.hooks: list = []  # autograd hooks of the traced layers (gnn.layers), removed when tracing stops

    @property
    def row_offset(self) -> int:
        """Position of this rank's first row in the distributed (partitioner's) order."""
        return self.matrix.row_offset

    @property
    def node_ids(self) -> np.ndarray:
        """Original ids of this rank's nodes (rows)."""
        return self.matrix.row_ids()

    def all_node_ids(self) -> np.ndarray:
        """Collective on first use. Every rank's node ids in rank order (cached)."""
        if self._all_node_ids is None:
            self._all_node_ids = np.concatenate(self.comm.allgather(self.node_ids))
        return self._all_node_ids

    @property
    def local_nodes(self) -> int:
        """Nodes (rows) this rank holds."""
        return self.matrix.local_rows.shape[0]

    def plan(self, width: int, dtype: torch.dtype) -> SpmmPlan:
        """Collective on first use of (width, dtype). The plan for features of this width: the first width of a dtype
        is planned, the others reuse its rank plan and sparse operands (:meth:`SpmmPlan.with_width`), so a model's
        second width costs its dense buffers, not another copy of the graph."""
        key = (int(width), str(dtype))
        if key not in self.plans:
            if dtype not in _NUMPY:
                raise TypeError(f"features must be float32 or float64 tensors (got {dtype})")
            first = next((plan for (_, kind), plan in self.plans.items() if kind == str(dtype)), None)
            if first is None:
                self.plans[key] = plan_spmm(self.matrix, int(width), _NUMPY[dtype], options=self.options)
            else:
                self.plans[key] = first.with_width(int(width))
        return self.plans[key]

    def attention_strategy(self) -> str:
        """Not collective. How attention plans serve off-diagonal blocks under this operator's ``strategy``: ``auto``
        and ``joint`` take the weighted cover (:mod:`sparsewire.plan.attention`), ``column`` and ``row`` their way,
        ``column-hier`` relays the columns through the topology's groups (local-rank proxies)."""
        strategy = self.options.strategy
        name = strategy if isinstance(strategy, str) and strategy == "auto" else Strategy(strategy).value
        if name == "auto":
            return "joint"
        if name not in ATTENTION_STRATEGIES:
            raise InputError(
                f"attention layers are planned column, row, joint or column-hier (auto picks joint); strategy {name!r} is "
                "for SpMM only"
            )
        if name in HIERARCHICAL_ATTENTION and self.options.proxy != "local":
            raise InputError(
                f"attention's {name} relays through local-rank proxies; use proxy 'local' (got {self.options.proxy})"
            )
        return name

    def attention(self, heads: int, channels: int, dtype: torch.dtype, self_loops: bool = True) -> AttentionPlan:
        """Collective on first use of (heads, channels, dtype, self_loops). The attention plan of a GAT layer of that
        shape (:class:`~sparsewire.gnn.attention.AttentionPlan`), kept; its bytes add to this operator's counters."""
        key = (int(heads), int(channels), str(dtype), bool(self_loops))
        if key not in self.attention_plans:
            if dtype not in _NUMPY:
                raise TypeError(f"features must be float32 or float64 tensors (got {dtype})")
            try:
                strategy, problem = self.attention_strategy(), None
            except InputError as error:
                strategy, problem = None, error
            options = self.options
            native = native_transport(self.comm)  # attention sends its own messages: MPI's, or torch.distributed's
            if problem is None and (options.transport != native or options.compress != "none" or options.device != "cpu"):
                problem = (
                    f"attention layers run on the {native} transport, uncompressed, on the CPU (got transport "
                    f"{options.transport}, compress {options.compress}, device {options.device}); use those for GAT"
                )
            agree_on_error(self.comm, problem)
            topology = options.topology
            groups = None if topology is None else topology.groups(self.comm.Get_size())
            plan = make_attention_plan(
                self.matrix, heads, channels, _NUMPY[dtype], strategy, self_loops, self.all_node_ids(), self.threads or 1, groups
            )
            plan.counters.append(self)
            self.attention_plans[key] = plan
        return self.attention_plans[key]

    def start_tracing(self, tracer) -> None:
        """Collective (learns which ranks share a node). Record the following epochs into ``tracer``
        (:func:`sparsewire.trace`): each propagation, and the multiplies of its plan (plans made later too)."""
        if self.tracer is not None:
            raise InputError("this graph's training is being traced already; end that trace block before starting another")
        self._nodes = node_ids(self.comm)
        self.tracer = tracer

    def stop_tracing(self) -> None:
        """Not collective. Propagations run untraced again."""
        for plan in self._traced:
            plan.executor.stop_tracing()
        for handle in self.hooks:
            handle.remove()
        self._traced, self.hooks, self.tracer = [], [], None

    def link_of(self, peer: int) -> str:
        """Not collective (after :meth:`start_tracing`). Whether ``peer`` shares this rank's node (shared memory) or not."""
        return "same node" if self._nodes[peer] == self._nodes[self.comm.Get_rank()] else "another node"

    def release_free_memory(self, device: torch.device) -> None:
        """Collective on first use. Give the C heap's free pages back where :attr:`release_heap` says so (on the CPU):
        every propagation does, and a layer that reuses a kept product instead. Where it says not to, the process's
        allocator keeps freed blocks, large ones too, for the next step (:func:`~sparsewire._lib.heap.keep_freed_heap`)."""
        if self._shares_node is None:
            self._shares_node = ranks_on_node(self.comm) > 1
        if device.type != "cpu":
            return
        if self._shares_node if self.release_heap is None else self.release_heap:
            release_free_heap()
        else:
            keep_freed_heap()

    def _run(self, x: torch.Tensor, transposed: bool) -> torch.Tensor:
        self.release_free_memory(x.device)  # (autograd's freed temporaries: module docstring of sparsewire._lib.heap)
        plan = self.plan(x.shape[1], x.dtype)
        on_forward_plan = transposed and self._scale is not None
        if transposed and not on_forward_plan:  # (its buffers the forward's: the backward never runs while the forward does)
            plan = plan.transpose(share_buffers=True)
        tracer = self.tracer
        if tracer is not None and plan.executor.tracer is None:
            plan.executor.start_tracing(tracer)
            self._traced.append(plan)
        source = x.detach()
        scale = self._adjoint_scales(x) if on_forward_plan else None
        if scale is not None:
            source = source * scale[1]  # diag(s)^+ G, a new tensor (G may be another function's too)
        if not source.is_contiguous():
            source = source.contiguous()
        out = torch.empty((plan.output_rows, x.shape[1]), dtype=x.dtype, device=source.device)
        # The backend's arrays of the same memory (NumPy views, or the tensors themselves).
        with region(tracer, "propagate backward" if transposed else "propagate forward", width=int(x.shape[1])):
            plan.multiply(self.kernels.from_torch(source), out=self.kernels.from_torch(out))
        if scale is not None:
            out.mul_(scale[0])
        if transposed:
            self.bytes_backward += plan.bytes_received
        else:
            self.bytes_forward += plan.bytes_received
        self.wire_bytes += plan.wire_bytes_received
        return out

    def _adjoint_scales(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(s, s^+)`` as column tensors of ``x``'s dtype and device (0 where s is), or None where s is all ones."""
        key = (x.dtype, x.device)
        if key not in self._scales:
            scale = self._scale
            if np.all(scale == 1):
                self._scales[key] = None
            else:
                inverse = np.divide(1.0, scale, out=np.zeros_like(scale), where=scale != 0)
                self._scales[key] = tuple(torch.from_numpy(v[:, None]).to(x.device, x.dtype) for v in (scale, inverse))
        return self._scales[key]

    def close(self) -> None:
        """Collective. Free every plan."""
        self.stop_tracing()
        for plan in (*self.plans.values(), *self.attention_plans.values()):
            plan.close()
        self.plans, self.attention_plans = {}, {}


class _Propagate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, operator: GraphOperator) -> torch.Tensor:
        ctx.operator = operator
        return operator._run(x, transposed=False)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.operator._run(grad, transposed=True), None


def propagate(operator: GraphOperator, x: torch.Tensor) -> torch.Tensor:
    """Collective. This rank's rows of ``Y = A X`` from its rows of X (shape (local nodes, F)),
    differentiable: the backward computes ``A^T G`` on the transposed plan. Features of another shape are one
    InputError on every rank."""
    problem = None
    if not isinstance(x, torch.Tensor):
        problem = f"rank {operator.comm.Get_rank()}: features must be a torch.Tensor (got {type(x).__name__})"
    elif x.dim() != 2 or x.shape[0] != operator.local_nodes:
        problem = (
            f"rank {operator.comm.Get_rank()}: features have shape {tuple(x.shape)}; propagate takes this rank's rows, "
            f"shape ({operator.local_nodes}, F) (a vector of one feature per node is x[:, None])"
        )
    agree_on_error(operator.comm, problem)
    return _Propagate.apply(x, operator)


class _ScatterRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_global: torch.Tensor, operator: GraphOperator) -> torch.Tensor:
        ctx.operator = operator
        return x_global[torch.from_numpy(operator.node_ids).to(x_global.device)].clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        operator = ctx.operator
        parts = np.concatenate(operator.comm.allgather(grad.detach().cpu().numpy()), axis=0)
        full = np.empty_like(parts)
        full[operator.all_node_ids()] = parts
        return torch.from_numpy(full).to(grad.device), None


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_local: torch.Tensor, operator: GraphOperator) -> torch.Tensor:
        ctx.operator = operator
        parts = np.concatenate(operator.comm.allgather(x_local.detach().cpu().numpy()), axis=0)
        full = np.empty_like(parts)
        full[operator.all_node_ids()] = parts
        return torch.from_numpy(full).to(x_local.device)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[torch.from_numpy(ctx.operator.node_ids).to(grad.device)].clone(), None


def scatter_rows(operator: GraphOperator, x_global: torch.Tensor) -> torch.Tensor:
    """Collective in the backward. This rank's rows of a tensor every rank holds whole, indexed by
    node id (so a reordering partitioner is invisible: row v of ``x_global`` is node v). Its
    gradient is gathered from every rank, so a function of the replicated tensor built from
    :func:`scatter_rows`, :func:`propagate` and :func:`gather_rows` has the true gradient on every
    rank (what ``torch.autograd.gradcheck`` checks)."""
    return _ScatterRows.apply(x_global, operator)


def gather_rows(operator: GraphOperator, x_local: torch.Tensor) -> torch.Tensor:
    """Collective. The whole tensor from every rank's rows, row v = node v (differentiable: the
    backward keeps this rank's rows of the gradient)."""
    return _GatherRows.apply(x_local, operator)


def _all_degrees(matrix: DistributedMatrix, local: np.ndarray) -> np.ndarray:
    return np.concatenate(matrix.comm.allgather(local))


@collective_errors
def gcn_normalize(matrix: DistributedMatrix, dtype: np.dtype = np.float64, self_loops: float = 1.0) -> DistributedMatrix:
    """Collective. Kipf and Welling's ``D^-1/2 (A + I) D^-1/2`` with ``D = diag(rowsum(A + I))``.

    Self-loops of weight ``self_loops`` are added where a node has none (2 is PyG's ``improved``, 0 its
    ``add_self_loops=False``); an existing self-loop keeps its weight (PyTorch Geometric's
    ``add_remaining_self_loops``). ``D`` sums each row, the in-degree of the target, as
    PyG's ``gcn_norm`` does; every rank learns every degree once (one allgather of n values).
    Needs a square A. The weights are computed in float64 and stored in ``dtype`` (the training
    dtype: the plans then share the matrix's arrays instead of holding a converted copy).
    """
    agree_on_error(
        matrix.comm,
        None if matrix.shape[0] == matrix.shape[1] else f"GCN normalisation needs a square adjacency (got {matrix.shape})",
    )
    local = sp.csr_array(matrix.local_rows, dtype=np.float64, copy=True)
    rows = np.arange(local.shape[0])
    columns = rows + matrix.row_offset
    # The diagonal from the stored entries (SciPy's fancy indexing returns a sparse result for a
    # rank without rows, whose comparison has no truth value).
    coo = sp.coo_array(local)
    on_diagonal = coo.col == coo.row + matrix.row_offset
    diagonal = np.zeros(local.shape[0])
    np.add.at(diagonal, coo.row[on_diagonal], coo.data[on_diagonal])
    missing = diagonal == 0 if self_loops else np.zeros(local.shape[0], bool)
    loops = sp.csr_array((np.full(int(missing.sum()), float(self_loops)), (rows[missing], columns[missing])), shape=local.shape)
    local = sp.csr_array(local + loops)
    inverse_sqrt = _inverse_power(_all_degrees(matrix, np.asarray(local.sum(axis=1)).ravel()), 0.5)
    scaled = _stored(sp.csr_array(sp.diags_array(inverse_sqrt[columns]) @ local @ sp.diags_array(inverse_sqrt)), dtype)
    return DistributedMatrix(
        matrix.comm,
        scaled,
        matrix.row_partition,
        matrix.col_partition,
        matrix.comm.allreduce(scaled.nnz, op=MPI.SUM),
        matrix.row_order,
        matrix.col_order,
    )


@collective_errors
def mean_normalize(matrix: DistributedMatrix, dtype: np.dtype = np.float64) -> DistributedMatrix:
    """Collective. ``D^-1 P`` with P the pattern of A (ones) and D its row sums: the mean over
    in-neighbours, GraphSAGE's mean aggregator (edge values are ignored, as in PyG's ``SAGEConv``);
    rows without neighbours stay zero. Computed in float64, stored in ``dtype``; the result shares A's column
    indices and row pointers where they are sorted (the operator's pattern is A's)."""
    local = matrix.local_rows
    counts = np.diff(local.indptr)
    values = np.repeat(_inverse_power(counts.astype(np.float64), 1.0), counts).astype(dtype)
    indices = local.indices if local.has_sorted_indices else local.indices.copy()  # (sorting must not reorder A's)
    scaled = _stored(sp.csr_array((values, indices, local.indptr), shape=local.shape), dtype)
    return DistributedMatrix(
        matrix.comm, scaled, matrix.row_partition, matrix.col_partition, matrix.nnz, matrix.row_order, matrix.col_order
    )


def _stored(matrix: sp.csr_array, dtype: np.dtype) -> sp.csr_array:
    """``matrix`` sorted, with values of ``dtype`` and 4-byte indices where they fit: the types the
    kernels take, so the plans share these arrays instead of holding a converted copy."""
    matrix.sort_indices()
    index = np.int32 if max(matrix.shape[1], matrix.nnz) <= np.iinfo(np.int32).max else np.int64
    return sp.csr_array(
        (
            matrix.data.astype(dtype, copy=False),
            matrix.indices.astype(index, copy=False),
            matrix.indptr.astype(index, copy=False),
        ),
        shape=matrix.shape,
    )


def _inverse_power(values: np.ndarray, power: float) -> np.ndarray:
    result = np.zeros_like(values, dtype=np.float64)
    positive = values > 0
    result[positive] = values[positive] ** -power
    return result
