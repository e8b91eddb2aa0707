"""sparsewire.pyg on one process: every refusal is one line naming the layer, option or tensor and the fix (and a
refused convert changes nothing); the global loss, accuracy and batch norm equal PyTorch's on one rank; graphs from
sparsewire's own loaders. The collective cases (training at P = 1..4 against PyG, state_dict round trips, exact
integer propagation) are in tests/mpi/test_pyg.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
pyg = pytest.importorskip("torch_geometric.nn")

from torch_geometric.data import Data  # noqa: E402

import sparsewire.pyg as sw  # noqa: E402
from sparsewire.errors import InputError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "io"))
from ogb_files import random_dataset, write_ogb  # noqa: E402


def small_data(n=6, weighted=False) -> Data:
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 4, 5, 0, 3]])
    data = Data(x=torch.arange(3.0 * n).view(n, 3), edge_index=edge_index, y=torch.arange(n) % 2,
                train_mask=torch.ones(n, dtype=torch.bool), num_nodes=n)  # fmt: skip
    if weighted:
        data.edge_weight = torch.arange(1.0, 8.0)
    return data


@pytest.mark.parametrize(
    "layer, named",
    [
        (lambda: pyg.GraphConv(3, 3), "GraphConv reads edge_weight per edge, which is not distributed"),
        (lambda: pyg.MFConv(3, 3), "MFConv's forward uses edge_index outside propagate (line 14"),
        (lambda: pyg.SAGEConv(3, 4, aggr="lstm"), "SAGEConv's aggregation LSTMAggregation depends on the order"),
        (lambda: pyg.GCNConv(3, 4, aggr="mean"), "GCNConv(aggr='mean') is not supported"),
        (lambda: pyg.GATConv(3, 4, edge_dim=2), "GATConv(edge_dim=2) is not supported"),
        (lambda: pyg.GATConv((3, 5), 4), "bipartite in_channels (3, 5)"),
        (lambda: pyg.GCNConv(3, 4, flow="target_to_source"), "flow='target_to_source'"),
        (lambda: pyg.GraphNorm(4), "GraphNorm computes statistics over the graph"),
        (lambda: type("LocalNorm", (torch.nn.BatchNorm1d,), {})(4), "LocalNorm, a subclass of BatchNorm1d, is not converted"),
    ],
)
def test_convert_refuses_what_it_cannot_distribute_in_one_line_and_changes_nothing(layer, named):
    model = torch.nn.Sequential(pyg.GCNConv(3, 4), layer())
    before = [type(m) for m in model.modules()]
    with pytest.raises(InputError) as caught:
        sw.convert(model)
    message = str(caught.value)
    assert named in message and "\n" not in message, message
    if "bipartite" not in message and "flow" not in message and "aggr=" not in message and "edge_dim" not in message:
        assert sw.SUPPORTED in message
    assert [type(m) for m in model.modules()] == before  # the GCNConv before it was not swapped either


def test_convert_swaps_every_supported_layer_keeping_its_parameters():
    assert isinstance(sw.convert(sw.convert(pyg.GCNConv(3, 4))), sw.GCNConv)  # converting twice is converting once
    model = torch.nn.ModuleList([pyg.GCNConv(3, 4), pyg.SAGEConv(4, 4), pyg.GATConv(4, 2, heads=2), pyg.BatchNorm(4),
                                 torch.nn.Linear(4, 2), pyg.GINConv(torch.nn.Linear(4, 4))])  # fmt: skip
    parameters = [id(p) for p in model.parameters()]
    sw.convert(model)
    kinds = [type(m) for m in model.modules()]
    for swapped in (sw.GCNConv, sw.SAGEConv, sw.GATConv, sw.BatchNorm1d, torch.nn.Linear):
        assert swapped in kinds
    assert [id(p) for p in model.parameters()] == parameters
    assert isinstance(model[0], pyg.GCNConv)  # still PyG's class for isinstance checks
    assert type(model[5]) is pyg.GINConv and model[5]._propagate_forward_pre_hooks  # through the halo


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda d: setattr(d, "edge_index", torch.tensor([[0, 0], [1, 1]])), "edge_index holds 1 duplicate edges; coalesce"),
        (lambda d: setattr(d, "edge_index", torch.tensor([[0, 9], [1, 2]])), "node ids outside [0, 6)"),
        (lambda d: setattr(d, "edge_index", torch.zeros(3, 2, dtype=torch.long)), "shape (2, E)"),
        (lambda d: setattr(d, "edge_index", torch.zeros(2, 2)), "integer tensor"),
        (lambda d: setattr(d, "edge_weight", torch.ones(3)), "one value per edge, shape (7,)"),
        (lambda d: setattr(d, "edge_weight", torch.tensor([1, 2, 3, 4, 5, float("nan"), 7.0])), "edge_weight holds 1 NaN"),
        (lambda d: d.x.__setitem__((2, 1), float("inf")), "the features x hold 1 NaN or infinite"),
    ],
)
def test_from_pyg_refuses_damaged_graphs_naming_the_tensor(change, named):
    data = small_data()
    change(data)
    with pytest.raises(InputError) as caught:
        sw.from_pyg(data)
    assert named in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_from_pyg_builds_the_target_rows_and_takes_keywords():
    graph = sw.from_pyg(small_data(weighted=True))
    assert graph.weighted and graph.num_nodes == 6 and sorted(graph.node_attributes) == ["train_mask", "x", "y"]
    dense = graph.adjacency.toarray()
    assert dense[1, 0] == 1 and dense[3, 1] == 7 and dense[0, 5] == 6 and graph.adjacency.nnz == 7  # A[target, source]
    same = sw.from_pyg(x=torch.ones(4, 2), edge_index=torch.tensor([[0, 1], [2, 3]]), y=torch.zeros(4))
    assert same.num_nodes == 4 and not same.weighted and sorted(same.node_attributes) == ["x", "y"]
    with pytest.raises(InputError, match="not both"):
        sw.from_pyg(small_data(), x=torch.ones(6, 1))
    with pytest.raises(InputError, match="takes a torch_geometric.data.Data"):
        sw.from_pyg({"x": 1})


def test_the_layers_refuse_per_edge_tensors_and_options_they_do_not_take_on_a_distributed_graph():
    local = sw.distribute(small_data())
    gcn, gat, sage = sw.convert(pyg.GCNConv(3, 2)), sw.convert(pyg.GATConv(3, 2)), sw.convert(pyg.SAGEConv(3, 2))
    with pytest.raises(InputError, match="per-edge tensors are not split by rows"):
        gcn(local.x, local.edge_index, torch.ones(7))
    with pytest.raises(InputError, match="distributed without edge weights; give data.edge_weight"):
        gcn(local.x, local.edge_index, sw.EdgeWeights(local.edge_index))
    with pytest.raises(InputError, match="does not take return_attention_weights"):
        gat(local.x, local.edge_index, return_attention_weights=True)
    with pytest.raises(InputError, match="bipartite inputs are not supported"):
        sage((local.x, local.x), local.edge_index)
    with pytest.raises(InputError, match=r"a layer used edge_index\[...\] outside propagate"):
        local.edge_index[1]  # noqa: B018
    with pytest.raises(InputError, match=r"torch.cat\(edge_index\) outside propagate"):
        torch.cat([local.edge_index])
    assert local.edge_attr is None  # as PyG's Data, an attribute the graph lacks
    with pytest.raises(InputError, match="rank 0 must pass the graph"):
        sw.distribute(None)
    data = small_data()
    data.edge_attr = torch.ones(7, 2)
    with pytest.raises(AttributeError, match="edge attribute 'edge_attr' is not distributed"):
        sw.distribute(data).edge_attr  # noqa: B018
    local.edge_index.close()


def test_loss_accuracy_and_batch_norm_on_one_rank_equal_pytorch():
    generator = torch.Generator().manual_seed(5)
    scores = torch.randn(9, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 4, (9,), generator=generator)
    loss = sw.cross_entropy(scores, target)
    expected = torch.nn.functional.cross_entropy(scores, target)
    assert torch.allclose(loss, expected, rtol=0, atol=1e-15)
    (gradient,) = torch.autograd.grad(loss, scores)
    assert torch.allclose(gradient, torch.autograd.grad(expected, scores)[0], rtol=0, atol=1e-15)
    assert sw.accuracy(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 1, 2])) == 0.75  # hand-made: 3 of 4
    with pytest.raises(InputError, match="over no node"):
        sw.cross_entropy(scores[:0], target[:0])
    torch.manual_seed(0)
    plain = torch.nn.BatchNorm1d(4, momentum=0.3).double()
    ours = sw.convert(torch.nn.BatchNorm1d(4, momentum=0.3).double())
    ours.load_state_dict(plain.state_dict())
    for _ in range(3):
        x = torch.randn(9, 4, generator=generator, dtype=torch.float64)
        assert torch.allclose(ours(x), plain(x), rtol=0, atol=1e-12)
    for key, value in plain.state_dict().items():
        assert torch.allclose(ours.state_dict()[key].double(), value.double(), rtol=0, atol=1e-12), key
    ours.eval(), plain.eval()
    assert torch.allclose(ours(x), plain(x), rtol=0, atol=1e-12)


def test_sparsewires_own_graphs_distribute_with_pyg_attribute_names():
    from sparsewire.gnn import GraphData

    adjacency = sp.csr_array(np.array([[0, 1, 0], [0, 0, 1], [1, 0, 0]], float))
    data = GraphData("tiny", adjacency, np.eye(3, dtype=np.float32), np.array([0, 1, -1]), np.array([0]),
                     np.array([1]), np.array([], np.int64), 2)  # fmt: skip
    local = sw.distribute(data)
    assert local.keys() == ["test_mask", "train_mask", "val_mask", "x", "y"]
    assert local.train_mask.tolist() == [True, False, False] and local.val_mask.tolist() == [False, True, False]
    assert local.edge_weight is None and local.num_nodes == 3 and local.num_features == 3
    local.edge_index.close()
    plain = sw.to_pyg(data)  # for the same script on one process
    assert plain.edge_index.tolist() == [[1, 2, 0], [0, 1, 2]] and plain.x.dtype == torch.float32
    assert plain.test_mask.sum() == 0 and plain.y.tolist() == [0, 1, -1]


def undirected(rng, n: int, edges: int, values) -> torch.Tensor:
    """A random undirected graph's ``edge_index`` (each pair both ways) and ``values(pairs)`` as symmetric weights."""
    pairs = np.unique(np.sort(rng.integers(0, n, (edges, 2)), axis=1), axis=0)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    weights = values(len(pairs))
    edge_index = torch.from_numpy(np.concatenate([pairs, pairs[:, ::-1]]).T.copy())
    return edge_index, torch.from_numpy(np.concatenate([weights, weights]))


@pytest.mark.parametrize("graph", ["undirected", "directed", "symmetric pattern, asymmetric weights"])
def test_an_undirected_graph_runs_each_backward_on_the_forward_plan_with_pyg_gradients(rng, graph):
    """The handle finds whether A (and its pattern) is symmetric; where the operator is, its backward runs on the forward
    plan (no transposed plan is made) and the gradients are PyG's: exactly on integers, to rounding for the normalised
    operators (GCN's and the mean, whose backward scales by the degrees)."""
    n = 30
    edge_index, weight = undirected(rng, n, 70, lambda m: rng.integers(1, 5, m).astype(float))
    if graph == "directed":
        keep = torch.from_numpy(rng.random(edge_index.shape[1]) < 0.7)
        keep[0], keep[edge_index.shape[1] // 2] = True, False  # (the first pair one way only)
        edge_index, weight = edge_index[:, keep], weight[keep]
    elif graph != "undirected":
        weight = weight.clone()
        weight[0] += 1
    data = Data(x=torch.from_numpy(rng.integers(-3, 4, (n, 4)).astype(float)), edge_index=edge_index, edge_weight=weight,
                num_nodes=n)  # fmt: skip
    local = sw.distribute(data)
    handle = local.edge_index
    assert (handle.symmetric_pattern, handle.symmetric) == {"undirected": (True, True), "directed": (False, False)}.get(
        graph, (True, False)
    )
    cases = [
        (lambda: pyg.GCNConv(4, 3, normalize=False, bias=False), True, True),  # A itself: integers throughout
        (lambda: pyg.GCNConv(4, 3), True, False),
        (lambda: pyg.SAGEConv(4, 3), False, False),
    ]
    for make, weighted, exact in cases:
        torch.manual_seed(0)
        plain = make().double()
        if exact:
            plain.lin.weight.data = torch.from_numpy(rng.integers(-2, 3, (3, 4)).astype(float))
        ours = sw.convert(make().double())
        ours.load_state_dict(plain.state_dict())
        x, y = data.x.clone().requires_grad_(True), local.x.clone().requires_grad_(True)
        target = torch.from_numpy(rng.integers(-2, 3, (n, 3)).astype(float))
        (plain(x, edge_index, weight) if weighted else plain(x, edge_index)).mul(target).sum().backward()
        (ours(y, handle, local.edge_weight) if weighted else ours(y, handle)).mul(target).sum().backward()
        compare = torch.equal if exact else lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-12)
        assert compare(y.grad, x.grad), (graph, make)
        for name, parameter in ours.named_parameters():
            assert compare(parameter.grad, dict(plain.named_parameters())[name].grad), (graph, make, name)
    symmetric = {"undirected": 3, "directed": 0}.get(graph, 1)  # (there only the mean's, which reads the pattern)
    plans = [plan for operator in handle.operators.values() for plan in operator.plans.values()]
    assert sum(plan._transpose is None for plan in plans) == symmetric and len(plans) == 3
    handle.close()


def test_an_ogb_cache_keeps_its_multi_edge_counts_and_says_whether_it_is_symmetric(rng, tmp_path):
    """Read from an OGB cache, a directed graph's stored multi-edges keep their counts (GCN weighs them as PyG weighs
    repeated edges) and the handle is not symmetric; read undirected, its values are ones and it is."""
    from mpi4py import MPI

    from sparsewire.gnn import open_ogb_cache

    pairs, features, labels, split = random_dataset(rng, n=40, edges=160)
    root = write_ogb(tmp_path / "ogbn_arxiv", pairs, features, labels, split)
    counts = sp.csr_array((np.ones(pairs.shape[1]), (pairs[1], pairs[0])), shape=(40, 40))  # row: target
    assert counts.max() > 1  # (the fixture stores some edges twice)
    for undirected in (False, True):
        local = sw.distribute(open_ogb_cache(MPI.COMM_WORLD, str(root), undirected=undirected))
        handle = local.edge_index
        held = handle.matrix.local_rows.toarray()
        if undirected:
            assert (handle.symmetric_pattern, handle.symmetric) == (True, True)
            assert np.array_equal(held, ((counts + counts.T) > 0).toarray().astype(float))
        else:
            assert (handle.symmetric_pattern, handle.symmetric) == (False, False)
            assert np.array_equal(held, counts.toarray())
        handle.close()
