"""The first layer's product with sparse input features, ``X W^T``, as CSR x dense products of
the propagations' kernel backend (:mod:`sparsewire.kernels`).

Bag-of-words features are mostly zero (Cora: 2708 x 1433 with 49,216 stored values, 1.3%). As a
torch sparse COO tensor, ``torch.sparse.mm(X, W.T)`` and its gradient took milliseconds per epoch; the
same products as CSR x dense (forward ``X W^T``, backward ``dW = (X^T G)^T`` on X's transpose, built once)
take tens of microseconds, on the compiled kernels or on torch's CSR ``addmm``. Dropout changes X's values,
never its pattern (:func:`~sparsewire.gnn.layers.hash_dropout` keeps the indices tensor), so the
CSR structure of X and of X^T is made once per pattern and each call only re-orders the values.
"""

from __future__ import annotations

import numpy as np
import torch

from sparsewire.kernels import make_backend

__all__ = ["sparse_linear"]

_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}
_STRUCTURES: dict[
    tuple, tuple
] = {}  # (indices pointer, shape, dtype, threads, backend) -> the two operands and X^T's value order


def _structure(x: torch.Tensor, threads: int, kernels) -> tuple:
    """CSR operands of X and X^T for X's pattern (values filled per call), and the position in
    X's values of each of X^T's."""
    indices = x.indices()
    key = (indices.data_ptr(), tuple(x.shape), x.dtype, threads, kernels.name)
    if key not in _STRUCTURES:
        import scipy.sparse as sp

        rows, cols = indices[0].cpu().numpy(), indices[1].cpu().numpy()
        position = np.arange(rows.size, dtype=np.float64)  # carried through the transpose as values
        forward = sp.csr_array((position, (rows, cols)), shape=tuple(x.shape))
        backward = sp.csr_array(forward.T)
        dtype = _NUMPY[x.dtype]
        operands = (kernels.csr(forward, dtype, threads, keep_order=True), kernels.csr(backward, dtype, threads, keep_order=True))
        order_t = torch.from_numpy(backward.data.astype(np.int64)).to(x.device)
        if len(_STRUCTURES) > 64:  # patterns of tensors that are gone
            _STRUCTURES.clear()
        _STRUCTURES[key] = (*operands, order_t, indices)  # keep the indices alive: their address is the key
    forward, backward, order_t, _ = _STRUCTURES[key]
    return forward, backward, order_t


class _SparseLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, threads: int, kernels) -> torch.Tensor:
        forward, backward, order_t = _structure(x, threads, kernels)
        values = x.values().detach()
        ctx.kernels = kernels
        ctx.backward_operand = kernels.with_values(backward, kernels.from_torch(values[order_t].contiguous()))
        operand = kernels.with_values(forward, kernels.from_torch(values))
        out = torch.empty((x.shape[0], weight.shape[0]), dtype=weight.dtype, device=weight.device)
        kernels.multiply(operand, kernels.from_torch(weight.detach().T.contiguous()), kernels.from_torch(out))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        operand, kernels = ctx.backward_operand, ctx.kernels
        grad_t = torch.empty((operand.shape[0], grad.shape[1]), dtype=grad.dtype, device=grad.device)
        kernels.multiply(operand, kernels.from_torch(grad.contiguous()), kernels.from_torch(grad_t))
        return None, grad_t.T, None, None


def sparse_linear(x: torch.Tensor, weight: torch.Tensor, threads: int = 1, kernels=None) -> torch.Tensor:
    """Not collective. ``x @ weight.T`` for a coalesced sparse COO ``x`` (this rank's input
    features; no gradient flows to it) and a dense ``weight`` (out, in) of x's dtype,
    differentiable in ``weight``: ``dW = (x^T G)^T``. On ``threads`` threads of ``kernels``, a
    kernel backend (:mod:`sparsewire.kernels`; default: torch on the CPU)."""
    if x.dtype != weight.dtype or x.dtype not in _NUMPY:
        raise TypeError(f"sparse_linear needs x and weight of one dtype, float32 or float64 (got {x.dtype}, {weight.dtype})")
    if not x.is_coalesced():
        x = x.coalesce()
    return _SparseLinear.apply(x, weight, threads, make_backend("torch") if kernels is None else kernels)
