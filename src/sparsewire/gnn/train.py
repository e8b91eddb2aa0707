"""Full-batch distributed training of a node classifier (GCN or GraphSAGE) on the SpMM plans.

Each rank holds its nodes' rows of the features, labels and split masks, and the whole (replicated)
weights. Per epoch: forward on this rank's rows, loss = sum of the negative log-likelihoods of this
rank's training nodes / the number of training nodes of the whole graph (so the ranks' losses add
up to the mean loss), backward (the propagations' gradients run on the transposed plans), the
weight gradients summed over the ranks (one allreduce per dtype), one Adam step with the same
result on every rank. Then an evaluation forward (no dropout) counts correct predictions per split,
summed over the ranks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch
from mpi4py import MPI

from sparsewire._lib.sizes import check_derived_fits
from sparsewire.comm.runtime import agree_on_error
from sparsewire.errors import InputError
from sparsewire.gnn.distribute import LocalGraph
from sparsewire.gnn.layers import GNN
from sparsewire.profile.timed import timed_run
from sparsewire.profile.tracing import region

__all__ = ["TrainResult", "sum_gradients", "train", "training_bytes"]


@dataclass
class TrainResult:
    """What :func:`train` returns on every rank."""

    history: list[dict] = field(default_factory=list)
    test_accuracy: float = 0.0
    seconds_per_epoch: float = 0.0
    bytes_per_epoch: int = 0
    wire_bytes_per_epoch: int = 0
    model: GNN | None = None


def sum_gradients(comm: MPI.Comm, model: torch.nn.Module) -> None:
    """Collective. Each trainable parameter's gradient summed over the ranks, in place: the gradients of one dtype
    packed into one host buffer and summed by one all-reduce (as DDP's buckets; an all-reduce per parameter costs a
    synchronisation each, a time slice apiece where ranks outnumber cores). A parameter this rank's rows did not
    reach gets a zero gradient and takes part all the same: every rank packs the same parameters in the same order."""
    if comm.Get_size() == 1:
        return
    kinds: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for parameter in model.parameters():
        if parameter.requires_grad:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
            kinds.setdefault(parameter.grad.dtype, []).append(parameter)
    for parameters in kinds.values():
        packed = torch.cat([parameter.grad.detach().reshape(-1).cpu() for parameter in parameters])
        comm.Allreduce(MPI.IN_PLACE, packed.numpy(), op=MPI.SUM)
        start = 0
        for parameter in parameters:
            parameter.grad.copy_(packed[start : start + parameter.numel()].view_as(parameter.grad))
            start += parameter.numel()


def training_bytes(graph: LocalGraph, channels: list[int], heads: int = 1) -> int:
    """Not collective. About the bytes training with layer widths ``channels`` holds on this rank: each weight
    four times (value, gradient, Adam's two moments) and each layer's output on the rank's rows and the
    propagation's input rows six times (forward, dropout mask, backward, the propagation's buffers). With
    ``heads`` > 1 (GAT) the hidden widths are per head, and each layer keeps two scores per stored entry and head."""
    itemsize = graph.features.element_size()
    rows = 2 * int(graph.features.shape[0])
    widths = [int(channels[0])] + [int(c) * heads for c in channels[1:-1]] + [int(channels[-1])]
    weights = sum(a * b for a, b in zip(widths, widths[1:]))
    scores = 0 if heads == 1 else 2 * heads * (len(channels) - 1) * int(graph.operator.matrix.local_rows.nnz + rows)
    return itemsize * (4 * weights + 6 * rows * sum(widths) + scores)


def _check_hyper_parameters(lr, weight_decay, dropout, layers=2, hidden=16, epochs=200, heads=8, channels=None) -> None:
    """NaN or infinite hyper-parameters would train on nonsense and still report an accuracy; the counts are checked
    as the command line checks them, each error naming its argument."""

    def finite(value) -> bool:
        return isinstance(value, (int, float)) and bool(np.isfinite(value))

    def whole(value, least: int) -> bool:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= least

    for name, value, least, default in (("layers", layers, 1, 2), ("hidden", hidden, 1, 16), ("epochs", epochs, 1, 200),
                                        ("heads", heads, 1, 8)):  # fmt: skip
        if not whole(value, least):
            raise InputError(f"{name} must be a whole number of at least {least} (got {value!r}); {default} is the default")
    if channels is not None and (len(channels) < 2 or not all(whole(c, 1) for c in channels)):
        raise InputError(f"channels must list at least two widths of at least 1, [in, ..., out] (got {channels!r})")

    if not (finite(lr) and lr > 0):
        raise InputError(f"lr must be a finite number greater than 0 (got {lr!r}); 0.01 is the default")
    if not (finite(weight_decay) and weight_decay >= 0):
        raise InputError(f"weight_decay must be a finite number of at least 0 (got {weight_decay!r}); 5e-4 is the default")
    if not (finite(dropout) and 0 <= dropout < 1):
        raise InputError(f"dropout must be a finite number from 0 up to but not 1 (got {dropout!r}); 0.5 is the default")


def train(
    comm: MPI.Comm,
    graph: LocalGraph,
    *,
    model: str = "gcn",
    heads: int = 8,
    layers: int = 2,
    hidden: int = 16,
    epochs: int = 200,
    lr: float = 0.01,
    weight_decay: float = 5e-4,
    dropout: float = 0.5,
    seed: int = 0,
    channels: list[int] | None = None,
    initial_state: dict | None = None,
    dtype: torch.dtype | None = None,
    progress=None,
    progress_every: int = 10,
) -> TrainResult:
    """Collective. Train a :class:`~sparsewire.gnn.layers.GNN` full-batch for ``epochs`` epochs.

    Args:
        graph: from :func:`distribute_graph` (the operator normalised for ``model``).
        layers, hidden: ``layers`` convolutions, hidden width ``hidden`` (or ``channels`` given
            whole: ``[in, hidden..., out]``).
        heads: attention heads of ``gat``'s hidden layers (its output layer has one).
        lr, weight_decay: Adam; the L2 weight decay applies to the first layer only for ``gcn`` and ``sage``, as in
            Kipf and Welling's GCN (and PyG's example), and to every layer for ``gat``, as in PyG's ``examples/gat.py``.
        dropout: before every convolution, masks from global node ids (the same at any P).
        seed: ``torch.manual_seed(seed)`` before the weights are drawn (the same on every rank).
        dtype: the dtype of the weights and every propagation (None: the features' dtype, from
            :func:`distribute_graph`; another dtype casts the features once).
        initial_state: a ``state_dict`` to start from instead (e.g. another library's weights).
        progress: called with a line every ``progress_every`` epochs on rank 0.

    Returns:
        :class:`TrainResult` (every rank): per epoch ``epoch, loss, train_accuracy, val_accuracy,
        seconds`` (training step, slowest rank) and ``bytes`` (what MPI delivered in the forward and
        backward propagations, all ranks); the final test accuracy; means per epoch.
    """
    _check_hyper_parameters(lr, weight_decay, dropout, layers, hidden, epochs, heads, channels)  # before anything collective
    rank = comm.Get_rank()
    if dtype not in (None, graph.features.dtype):
        graph = dataclasses.replace(graph, features=graph.features.to(dtype))
    features = graph.features
    channels = channels or [features.shape[1]] + [hidden] * (layers - 1) + [graph.classes]
    try:
        check_derived_fits(
            training_bytes(graph, channels, heads if model == "gat" else 1),
            f"a network of {len(channels) - 1} layers, widest {max(channels)} (layers, hidden, channels, classes)",
            "use a smaller hidden, fewer layers or fewer classes",
        )
        problem = None
    except InputError as error:
        problem = error
    agree_on_error(comm, problem)
    torch.manual_seed(seed)
    network = GNN(model, channels, dropout=dropout, seed=seed, dtype=features.dtype, heads=heads).to(
        features.device
    )  # drawn on the CPU: the same weights on any device
    if initial_state is not None:
        network.load_state_dict(initial_state)
    decayed = network.convs if model == "gat" else network.convs[:1]
    first = [p for conv in decayed for p in conv.parameters()]
    rest = [p for conv in network.convs[len(decayed) :] for p in conv.parameters()]
    optimizer = torch.optim.Adam([{"params": first, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}], lr=lr)
    operator = graph.operator
    train_mask = graph.masks["train"]
    result = TrainResult(model=network)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        out = network(features, operator)
        loss = torch.nn.functional.nll_loss(out[train_mask], graph.labels[train_mask], reduction="sum") / max(
            graph.totals["train"], 1
        )
        loss.backward()
        sum_gradients(comm, network)
        optimizer.step()
        return loss

    # The step's kernels are asynchronous on a GPU: time them done.
    finish = (lambda: torch.cuda.synchronize(features.device)) if features.device.type == "cuda" else None
    for epoch in range(1, epochs + 1):
        network.train()
        operator.bytes_forward = operator.bytes_backward = operator.wire_bytes = 0
        tracer = operator.tracer  # sparsewire.trace(operator): its window counts these epochs
        if tracer is not None:
            tracer.begin_epoch()
        with region(tracer, "epoch", epoch=epoch):
            with region(tracer, "training step"):
                timing = timed_run(comm, step, 1, warmup=0, finish=finish)  # one training step, the slowest rank's time
            seconds, loss = timing.seconds[0], timing.result
            moved = comm.allreduce(operator.bytes_forward + operator.bytes_backward, op=MPI.SUM)
            wire = comm.allreduce(operator.wire_bytes, op=MPI.SUM)
            total_loss = comm.allreduce(float(loss.detach()), op=MPI.SUM)
            with region(tracer, "evaluate"):
                accuracy = evaluate(comm, network, graph)
        entry = {
            "epoch": epoch,
            "loss": total_loss,
            "train_accuracy": accuracy["train"],
            "val_accuracy": accuracy["val"],
            "seconds": seconds,
            "bytes": int(moved),
            "wire_bytes": int(wire),
        }
        result.history.append(entry)
        if progress and rank == 0 and (epoch % progress_every == 0 or epoch == 1 or epoch == epochs):
            progress(
                f"epoch {epoch:4d}  loss {total_loss:.4f}  train {accuracy['train']:.3f}  val {accuracy['val']:.3f}  "
                f"{seconds * 1e3:.1f} ms/epoch  {moved} bytes/epoch (forward + backward)"
            )
    if operator.tracer is not None:
        operator.tracer.recording = False  # the final test evaluation is in no epoch: not traced
    result.test_accuracy = evaluate(comm, network, graph)["test"]
    if result.history:
        result.seconds_per_epoch = float(np.mean([h["seconds"] for h in result.history]))
        result.bytes_per_epoch = int(np.mean([h["bytes"] for h in result.history]))
        result.wire_bytes_per_epoch = int(np.mean([h["wire_bytes"] for h in result.history]))
    return result


def evaluate(comm: MPI.Comm, network: GNN, graph: LocalGraph) -> dict[str, float]:
    """Collective. Accuracy per split (train, val, test) of the model without dropout, over all ranks."""
    network.eval()
    with torch.no_grad():
        predicted = network(graph.features, graph.operator).argmax(dim=-1)
    correct = predicted == graph.labels
    counts = np.array([int(correct[graph.masks[name]].sum()) for name in ("train", "val", "test")], np.int64)
    counts = comm.allreduce(counts, op=MPI.SUM)
    return {name: counts[i] / max(graph.totals[name], 1) for i, name in enumerate(("train", "val", "test"))}
