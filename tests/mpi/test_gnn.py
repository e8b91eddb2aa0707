"""Distributed GNN training on every rank of one job: gradients through the transposed plan, the same weights at
every P as at one process, and agreement with PyTorch Geometric epoch by epoch on Cora."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire

torch = pytest.importorskip("torch")

from sparsewire.gnn import (  # noqa: E402
    GNN,
    GraphData,
    GraphOperator,
    distribute_graph,
    gather_rows,
    gcn_normalize,
    load_planetoid,
    mean_normalize,
    propagate,
    scatter_rows,
    train,
)
from sparsewire.io.shipped import shipped_path  # noqa: E402
from sparsewire.topology import Topology  # noqa: E402

torch.set_num_threads(1)


@pytest.mark.ranks(1, 3)
def test_gradcheck_through_the_distributed_propagation_on_a_directed_graph(comm, seed):
    """torch.autograd.gradcheck (float64) through scatter_rows -> propagate -> gather_rows on a directed random graph
    (A != A.T), for the GCN-normalised and the raw operator, with the even and the rcm partition."""
    rng = np.random.default_rng(seed)
    n = 23
    adjacency = sp.random_array((n, n), density=0.15, rng=rng, format="csr")
    adjacency.data = rng.integers(1, 4, adjacency.nnz).astype(float)
    adjacency = sp.csr_array(adjacency)
    assert (adjacency != adjacency.T).nnz > 0
    checked = 0
    matrices = []
    for partition in ("even", "rcm"):  # rcm relabels the nodes: scatter/gather must follow node ids
        matrix = sparsewire.distribute(comm, adjacency if comm.Get_rank() == 0 else None, partition)
        matrices += [matrix, gcn_normalize(matrix)]
    for operator_matrix in matrices:
        operator = GraphOperator(operator_matrix)  # the torch backend, one thread
        x = torch.from_numpy(rng.standard_normal((n, 3))).requires_grad_(True)

        def function(x_global, operator=operator):
            return gather_rows(operator, propagate(operator, scatter_rows(operator, x_global)))

        assert torch.autograd.gradcheck(function, (x,), eps=1e-6, atol=1e-7)
        # The gradient is A^T G, not A G: compare with the dense transpose.
        whole = operator_matrix.gather(root=0)
        dense = torch.from_numpy(comm.bcast(whole.toarray() if comm.Get_rank() == 0 else None, root=0))
        weights = torch.from_numpy(rng.standard_normal((n, 3)))
        (function(x) * weights).sum().backward()
        assert torch.allclose(x.grad, dense.T @ weights, atol=1e-12)
        operator.close()
        checked += 1
    assert checked == 4


@pytest.mark.ranks(1, 3, 4)
def test_the_backward_of_an_undirected_graphs_operators_runs_on_the_forward_plan(comm, seed):
    """An undirected graph (A = A^T): the gradient through A itself (scale 1, integers: exact) and through the mean
    ``D^-1 A`` (scale: the degrees) is A^T G computed on the forward plan, and no transposed plan is made; a scale
    given for a directed graph would be wrong (the directed test above)."""
    rng = np.random.default_rng(seed)
    n = 23
    upper = sp.random_array((n, n), density=0.1, rng=rng, format="csr")
    upper.data = rng.integers(1, 4, upper.nnz).astype(float)
    adjacency = sp.csr_array(upper + upper.T)
    for partition in ("even", "rcm"):
        matrix = sparsewire.distribute(comm, adjacency if comm.Get_rank() == 0 else None, partition)
        degrees = np.diff(matrix.local_rows.indptr)
        for operator_matrix, scale, exact in ((matrix, np.ones(degrees.size), True), (mean_normalize(matrix), degrees, False)):
            operator = GraphOperator(operator_matrix, symmetric_scale=scale)
            whole = operator_matrix.gather(root=0)
            dense = torch.from_numpy(comm.bcast(whole.toarray() if comm.Get_rank() == 0 else None, root=0))
            x = torch.from_numpy(rng.integers(-3, 4, (n, 3)).astype(float)).requires_grad_(True)
            weights = torch.from_numpy(rng.integers(-3, 4, (n, 3)).astype(float))
            (gather_rows(operator, propagate(operator, scatter_rows(operator, x))) * weights).sum().backward()
            expected = dense.T @ weights
            assert torch.equal(x.grad, expected) if exact else torch.allclose(x.grad, expected, rtol=0, atol=1e-12)
            assert [plan._transpose for plan in operator.plans.values()] == [None]
            operator.close()


def losses(
    comm, seed: int, epochs: int, dropout: float, model: str, data_path: str | None = None, strategy: str = "auto",
    topology=None, **keywords,
) -> dict | None:  # fmt: skip
    """Collective on ``comm``. Train from weights drawn on rank 0 (``keywords`` go to ``train``); rank 0 returns the
    per-epoch losses and the final weights."""
    rank = comm.Get_rank()
    data = None
    if rank == 0:
        if data_path and data_path.endswith(".npz"):
            data = load_planetoid(data_path)
        else:
            rng = np.random.default_rng(seed)
            n = 60
            adjacency = sp.csr_array(sp.random_array((n, n), density=0.08, rng=rng, format="csr"))
            adjacency.data[:] = 1.0
            labels = rng.integers(0, 3, n)
            labels[[5, 17]] = -1  # unlabelled nodes, in no split
            nodes = np.flatnonzero(labels >= 0)
            data = GraphData(
                "random", adjacency, sp.csr_array(rng.random((n, 8))), labels, nodes[:20], nodes[20:35], nodes[35:], 3
            )
    graph = distribute_graph(comm, data, model, dtype=torch.float64, strategy=strategy, topology=topology)  # float64: 1e-5
    result = train(comm, graph, model=model, epochs=int(epochs), dropout=float(dropout), seed=seed, **keywords)
    graph.operator.close()
    weights = {name: value.detach().numpy() for name, value in result.model.state_dict().items()}
    return {"losses": [h["loss"] for h in result.history], "weights": weights} if rank == 0 else None


@pytest.mark.ranks(2, 3, 4)
@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_every_p_trains_to_the_same_weights_with_dropout(comm, seed, model):
    """30 epochs with dropout 0.5 (GAT: on the features and the attention, 2 heads) on P ranks and on one process
    (rank 0 alone, COMM_SELF): the same losses to 1e-9 and the same weights to 1e-6."""
    keywords = {"heads": 2, "hidden": 4} if model == "gat" else {}
    reference = losses(MPI.COMM_SELF, seed, 30, 0.5, model, **keywords) if comm.Get_rank() == 0 else None
    other = losses(comm, seed, 30, 0.5, model, **keywords)
    if comm.Get_rank() == 0:
        np.testing.assert_allclose(other["losses"], reference["losses"], rtol=0, atol=1e-9)
        for name, value in reference["weights"].items():
            np.testing.assert_allclose(other["weights"][name], value, rtol=0, atol=1e-6, err_msg=name)


def pyg_gcn_losses(data, state: dict, epochs: int, lr=0.01, weight_decay=5e-4) -> list[float]:
    """Single-process PyTorch Geometric: the same 2-layer GCN from the same weights, same Adam."""
    from torch_geometric.nn import GCNConv

    torch.manual_seed(0)
    conv1 = GCNConv(data.features.shape[1], state["convs.0.weight"].shape[0], cached=True).double()
    conv2 = GCNConv(state["convs.1.weight"].shape[1], state["convs.1.weight"].shape[0], cached=True).double()
    with torch.no_grad():
        for conv, index in ((conv1, 0), (conv2, 1)):
            conv.lin.weight.copy_(state[f"convs.{index}.weight"])
            conv.bias.copy_(state[f"convs.{index}.bias"])
    coo = sp.coo_array(data.adjacency)
    edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))  # edge j -> i for A[i, j]
    x = torch.from_numpy(data.features.toarray())
    y = torch.from_numpy(data.labels)
    train = torch.from_numpy(data.train_idx)
    optimizer = torch.optim.Adam(
        [{"params": conv1.parameters(), "weight_decay": weight_decay}, {"params": conv2.parameters(), "weight_decay": 0.0}], lr=lr
    )
    losses = []
    for _ in range(epochs):
        optimizer.zero_grad()
        out = torch.log_softmax(conv2(torch.relu(conv1(x, edge_index)), edge_index), dim=-1)
        loss = torch.nn.functional.nll_loss(out[train], y[train])
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.ranks(2, 3)
def test_propagate_refuses_features_of_another_shape_on_every_rank(comm, rng):
    from sparsewire.errors import InputError

    matrix = sparsewire.distribute(comm, "stencil2d:5")
    operator = GraphOperator(matrix)
    rows, first = operator.local_nodes, comm.bcast(operator.local_nodes)  # (every rank raises rank 0's message)
    with pytest.raises(InputError, match=rf"rank 0: features have shape \({first},\); propagate takes"):
        propagate(operator, torch.ones(rows, dtype=torch.float64))  # a 1-D vector
    wrong = rows + 1 if comm.Get_rank() == 1 else rows  # one rank wrong: every rank raises, none waits
    with pytest.raises(InputError, match=r"rank 1: features have shape"):
        propagate(operator, torch.ones((wrong, 2), dtype=torch.float64))
    good = propagate(operator, torch.ones((rows, 2), dtype=torch.float64))  # the operator still works
    assert good.shape == (rows, 2)
    operator.close()


@pytest.mark.ranks(3)  # (every P trains alike to 1e-9: the dropout test above)
def test_gcn_on_cora_matches_pytorch_geometric_epoch_by_epoch(comm):
    """Kipf and Welling's GCN on Cora in float64 without dropout: the per-epoch losses of 3 ranks and of PyG within
    1e-5 for 100 epochs (the loss falls from 1.95 to 0.39 in them)."""
    pytest.importorskip("torch_geometric")
    cora = str(shipped_path("cora"))
    ours = losses(comm, 7, 100, 0.0, "gcn", cora)
    if comm.Get_rank() == 0:
        data = load_planetoid(cora)
        torch.manual_seed(7)
        state = GNN("gcn", [data.features.shape[1], 16, data.classes], dropout=0.0, seed=7).state_dict()
        np.testing.assert_allclose(ours["losses"], pyg_gcn_losses(data, state, 100), rtol=0, atol=1e-5)


def pyg_gat_losses(data, state: dict, epochs: int, heads: int, lr=0.005, weight_decay=5e-4) -> list[float]:
    """Single-process PyTorch Geometric: PyG's examples/gat.py model (without dropout) from the same weights, Adam with
    weight decay on every parameter."""
    from torch_geometric.nn import GATConv

    hidden = state["convs.0.att_src"].shape[-1]
    conv1 = GATConv(data.features.shape[1], hidden, heads=heads).double()
    conv2 = GATConv(hidden * heads, data.classes, heads=1, concat=False).double()
    model = torch.nn.ModuleList([conv1, conv2])
    model.load_state_dict({name.removeprefix("convs."): value for name, value in state.items()})
    coo = sp.coo_array(data.adjacency)
    edge_index = torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))  # edge j -> i for A[i, j]
    x = torch.from_numpy(data.features.toarray())
    y, train = torch.from_numpy(data.labels), torch.from_numpy(data.train_idx)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(epochs):
        optimizer.zero_grad()
        out = conv2(torch.nn.functional.elu(conv1(x, edge_index)), edge_index)
        loss = torch.nn.functional.cross_entropy(out[train], y[train])
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


#: The attention strategy of the Cora comparison at each P (every strategy at some P; P = 1 moves nothing).
GAT_STRATEGY = {1: "joint", 2: "column", 3: "joint", 4: "column-hier"}


@pytest.mark.ranks(1, 2, 3, 4)
def test_gat_on_cora_matches_pytorch_geometric_epoch_by_epoch(comm):
    """examples/gat.py's model (8 heads of 8 concatenated, then 1 head averaged; lr 0.005, weight decay 5e-4) on
    Cora in float64 without dropout: the per-epoch losses of P ranks and of PyG within 1e-5 for 40 epochs (the
    suite's time; ``mpiexec -n P python tests/mpi/test_gnn.py STRATEGY 200`` runs 200)."""
    pytest.importorskip("torch_geometric")
    gat_cora_epochs(comm, 40, GAT_STRATEGY[comm.Get_size()])


def gat_cora_epochs(comm, epochs: int, strategy: str) -> None:
    """Collective. Assert that ``epochs`` epochs of GAT on Cora under ``strategy`` have PyG's losses within 1e-5
    (``column-hier`` on nodes of two ranks)."""
    cora = str(shipped_path("cora"))
    topology = Topology.nodes(2) if strategy == "column-hier" else None
    ours = losses(comm, 7, epochs, 0.0, "gat", cora, strategy, topology, heads=8, hidden=8, lr=0.005)
    if comm.Get_rank() == 0:
        data = load_planetoid(cora)
        torch.manual_seed(7)
        state = GNN("gat", [data.features.shape[1], 8, data.classes], dropout=0.0, seed=7, heads=8).state_dict()
        np.testing.assert_allclose(ours["losses"], pyg_gat_losses(data, state, epochs, heads=8), rtol=0, atol=1e-5)


if __name__ == "__main__":  # mpiexec -n P python tests/mpi/test_gnn.py STRATEGY [EPOCHS]: the GAT check at any length
    import sys
    import time

    started = time.perf_counter()
    strategy, epochs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 200
    gat_cora_epochs(MPI.COMM_WORLD, epochs, strategy)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(f"P = {MPI.COMM_WORLD.Get_size()}, {strategy}: {epochs} epochs of GAT on Cora within 1e-5 of PyG's losses "
              f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
