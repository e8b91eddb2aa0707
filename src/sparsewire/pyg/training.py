"""What a training loop adds when its model runs on several ranks: the same initial weights everywhere, the loss as
the mean over every rank's nodes, the gradients summed over the ranks, accuracy over all ranks.

Each rank's loss is its share ``L_p = sum of its nodes' losses / N`` (N the selected nodes of the whole graph), so
``L = sum_p L_p`` is the single-process mean; the propagations' backward already carries every rank's share across
the ranks (``A^T G`` on the transposed plan), and each rank's weight gradient is its rows' part of ``dL/dW``: their
sum over the ranks (:func:`allreduce_gradients`) is the single process's gradient.
"""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI

from sparsewire.comm.runtime import world
from sparsewire.errors import InputError
from sparsewire.gnn.train import sum_gradients

__all__ = [
    "accuracy",
    "all_reduce_sum",
    "allreduce_gradients",
    "broadcast_parameters",
    "cross_entropy",
    "mean_loss",
    "nll_loss",
    "rank",
    "world_size",
]


def _comm(comm: MPI.Comm | None) -> MPI.Comm:
    return world() if comm is None else comm


def rank(comm: MPI.Comm | None = None) -> int:
    """Not collective. This process's rank (0 prints)."""
    return _comm(comm).Get_rank()


def world_size(comm: MPI.Comm | None = None) -> int:
    """Not collective. The number of ranks."""
    return _comm(comm).Get_size()


class _AllReduceSum(torch.autograd.Function):
    """The sum over the ranks; its gradient is the sum of every rank's gradient (each rank back-propagates its own
    share of the loss through the same sum)."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, comm: MPI.Comm) -> torch.Tensor:
        ctx.comm = comm
        return _summed(comm, value)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _summed(ctx.comm, grad), None


def _summed(comm: MPI.Comm, value: torch.Tensor) -> torch.Tensor:
    host = value.detach().cpu().contiguous().clone()
    if comm.Get_size() > 1:
        comm.Allreduce(MPI.IN_PLACE, host.numpy(), op=MPI.SUM)
    return host.to(value.device)


def all_reduce_sum(value: torch.Tensor, comm: MPI.Comm | None = None) -> torch.Tensor:
    """Collective. ``sum_p value_p`` on every rank, differentiable (the backward sums the ranks' gradients)."""
    return _AllReduceSum.apply(value, _comm(comm))


def broadcast_parameters(model: torch.nn.Module, comm: MPI.Comm | None = None, root: int = 0) -> torch.nn.Module:
    """Collective. Every parameter and buffer of ``model`` set to ``root``'s, so every rank starts from the same
    weights (as ``DistributedDataParallel`` does when it wraps a model). Returns the model."""
    comm = _comm(comm)
    state = comm.bcast({k: v.detach().cpu() for k, v in model.state_dict().items()} if comm.Get_rank() == root else None, root)
    with torch.no_grad():
        for key, value in model.state_dict().items():
            value.copy_(state[key])
    return model


def allreduce_gradients(model: torch.nn.Module, comm: MPI.Comm | None = None) -> None:
    """Collective. Each parameter's gradient summed over the ranks (call it between ``loss.backward()`` and
    ``optimizer.step()``). Sum, not mean: each rank's loss from :func:`mean_loss` is its share of the global mean.
    Under ``DistributedDataParallel``, which averages, multiply the loss by the number of ranks instead."""
    sum_gradients(_comm(comm), model)


def mean_loss(function, input: torch.Tensor, target: torch.Tensor, comm: MPI.Comm | None = None, **keywords) -> torch.Tensor:
    """Collective. The mean of ``function(input, target, reduction='sum', **keywords)`` over every rank's rows: its
    value is the global mean on every rank (what one process prints), its gradient this rank's share
    ``sum_local / N`` (N the rows of all ranks), which :func:`allreduce_gradients` sums."""
    comm = _comm(comm)
    local = function(input, target, reduction="sum", **keywords)
    # the sum and the rows in one all-reduce (exact counts: float64 holds integers to 2**53)
    totals = np.array([float(local.detach()), float(input.shape[0])])
    comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
    count = int(totals[1])
    if count == 0:
        raise InputError("the loss is taken over no node on any rank: the mask selects none")
    share = local / count
    return share + (local.new_tensor(totals[0] / count) - share.detach())


def cross_entropy(input: torch.Tensor, target: torch.Tensor, comm: MPI.Comm | None = None, **keywords) -> torch.Tensor:
    """Collective. ``torch.nn.functional.cross_entropy`` averaged over every rank's rows (:func:`mean_loss`)."""
    return mean_loss(torch.nn.functional.cross_entropy, input, target, comm, **keywords)


def nll_loss(input: torch.Tensor, target: torch.Tensor, comm: MPI.Comm | None = None, **keywords) -> torch.Tensor:
    """Collective. ``torch.nn.functional.nll_loss`` averaged over every rank's rows (:func:`mean_loss`)."""
    return mean_loss(torch.nn.functional.nll_loss, input, target, comm, **keywords)


def accuracy(predicted: torch.Tensor, target: torch.Tensor, comm: MPI.Comm | None = None) -> float:
    """Collective. The fraction of rows, over every rank, where ``predicted == target`` (class ids, or scores whose
    argmax over the last dimension is taken)."""
    if predicted.is_floating_point():
        predicted = predicted.argmax(dim=-1)
    counts = np.array([int((predicted == target.view_as(predicted)).sum()), int(predicted.numel())], np.int64)
    counts = _comm(comm).allreduce(counts, op=MPI.SUM)
    return float(counts[0] / counts[1]) if counts[1] else float("nan")
