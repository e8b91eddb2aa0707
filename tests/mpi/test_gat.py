"""Distributed graph attention on every rank of one job: GATConv's forward and backward equal to PyTorch Geometric's
from the same weights for every strategy and partition; gradcheck through the log-sum-exp merge (with attention
dropout); the bytes MPI's receive statuses counted equal to the formula, recomputed here from the whole graph; a
planted fault (one entry read from the wrong source) caught at its row; bad shapes and strategies refused."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import sparsewire

torch = pytest.importorskip("torch")
pyg = pytest.importorskip("torch_geometric.nn")

from sparsewire.errors import SparsewireError  # noqa: E402
from sparsewire.exec import ExecOptions  # noqa: E402
from sparsewire.gnn import GATConv, GraphOperator, attend, gather_rows, scatter_rows  # noqa: E402
from sparsewire.topology import Topology  # noqa: E402

torch.set_num_threads(1)


def random_graph(comm, rng, n=40, density=0.1):
    """A directed random graph with a few stored self-loops, the same on every rank."""
    adjacency = sp.random_array((n, n), density=density, rng=rng, format="csr")
    adjacency = sp.csr_array(adjacency + sp.csr_array((np.ones(3), (np.arange(3), np.arange(3))), shape=(n, n)))
    adjacency.data[:] = 1.0
    return comm.bcast(sp.csr_array(adjacency))


def edge_index(adjacency) -> torch.Tensor:
    coo = sp.coo_array(adjacency)
    return torch.from_numpy(np.vstack([coo.col, coo.row]).astype(np.int64))  # edge j -> i for A[i, j]


#: The two-level strategy's groups: nodes of two ranks (P = 3: ranks 0, 1 and rank 2; P = 4: 0, 1 and 2, 3).
NODES = Topology.nodes(2)


def operator_of(comm, adjacency, partition, strategy):
    matrix = sparsewire.distribute(comm, adjacency if comm.Get_rank() == 0 else None, partition)
    topology = NODES if strategy == "column-hier" else None
    return GraphOperator(matrix, ExecOptions(backend="torch", threads=1, strategy=strategy, topology=topology))


def formula_bytes(adjacency, offsets, heads, channels, strategy, value_bytes=8) -> tuple[int, int]:
    """(all, between groups of NODES) per training step, from the whole graph: column 2 b H C per (rank, distinct
    foreign source), row 2 b H (C + 2) per (peer, distinct row with an entry in the peer's columns); column-hier as
    column inside a group, and between groups 2 b H C per (group, distinct source of another group) plus the same
    per (rank, source) the group's proxy for the source's owner (same local rank) forwards. Self-loops never cross."""
    coo = sp.coo_array(adjacency)
    foreign = coo.row != coo.col
    rows, cols = coo.row[foreign], coo.col[foreign]
    row_owner = np.searchsorted(offsets, rows, side="right") - 1
    col_owner = np.searchsorted(offsets, cols, side="right") - 1
    crossing = row_owner != col_owner
    group = np.arange(offsets.size - 1) // 2
    if strategy == "row":
        pairs = {(int(p), int(q), int(i)) for p, q, i in zip(col_owner[crossing], row_owner[crossing], rows[crossing])}
        apart = sum(group[p] != group[q] for p, q, _ in pairs)
        return (2 * value_bytes * heads * (channels + 2) * n for n in (len(pairs), apart))
    pairs = {(int(q), int(p), int(j)) for q, p, j in zip(row_owner[crossing], col_owner[crossing], cols[crossing])}
    unit = 2 * value_bytes * heads * channels
    if strategy == "column":
        return unit * len(pairs), unit * sum(group[q] != group[p] for q, p, _ in pairs)
    near = sum(group[q] == group[p] for q, p, _ in pairs)
    across = {(group[q], p, j) for q, p, j in pairs if group[q] != group[p]}
    members = {g: np.flatnonzero(group == g) for g in set(group.tolist())}
    proxy = {(g, p): members[g][(p % 2) % members[g].size] for g in members for p in range(group.size)}
    relayed = sum(group[q] != group[p] and proxy[group[q], p] != q for q, p, _ in pairs)
    return unit * (near + len(across) + relayed), unit * len(across)


CONFIGS = {
    "3 heads concatenated": dict(heads=3, concat=True),
    "1 head averaged, residual": dict(heads=1, concat=False, residual=True),
    "2 heads averaged, no self-loops": dict(heads=2, concat=False, add_self_loops=False),
}


@pytest.mark.ranks(1, 2, 3, 4)
@pytest.mark.parametrize("strategy", ["column", "row", "joint", "column-hier"])
@pytest.mark.parametrize("partition", ["even", "rcm"])
def test_gat_layer_equals_pyg_forward_and_backward_and_moves_the_planned_bytes(comm, rng, strategy, partition):
    adjacency = random_graph(comm, rng)
    n, features, channels = adjacency.shape[0], 6, 4
    operator = operator_of(comm, adjacency, partition, strategy)
    x = torch.from_numpy(comm.bcast(rng.standard_normal((n, features))))
    weights = comm.bcast(rng.standard_normal((n, 8 * channels)))
    for name, config in CONFIGS.items():
        torch.manual_seed(int(rng.integers(1 << 30)))
        reference = pyg.GATConv(features, channels, **config).double()
        ours = GATConv(features, channels, **config, dtype=torch.float64)
        ours.load_state_dict(reference.state_dict())  # PyG's parameter names load as they are
        x_ref, x_ours = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        before = operator.bytes_forward + operator.bytes_backward
        expected = reference(x_ref, edge_index(adjacency))
        out = gather_rows(operator, ours(scatter_rows(operator, x_ours), operator))
        np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=0, atol=1e-12, err_msg=name)
        g = torch.from_numpy(weights[:, : out.shape[1]])
        (expected * g).sum().backward()
        (out * g).sum().backward()
        np.testing.assert_allclose(x_ours.grad.numpy(), x_ref.grad.numpy(), rtol=0, atol=1e-12, err_msg=name)
        for (key, mine), (_, theirs) in zip(ours.named_parameters(), reference.named_parameters()):
            summed = comm.allreduce(mine.grad.numpy(), op=MPI.SUM)
            np.testing.assert_allclose(summed, theirs.grad.numpy(), rtol=0, atol=1e-11, err_msg=f"{name}: {key}")
        # The bytes of this layer's forward and backward, counted by MPI, against the plan and the formula.
        plan = operator.attention(config["heads"], channels, torch.float64, config.get("add_self_loops", True))
        between = plan.bytes_between_groups
        counted = comm.allreduce(operator.bytes_forward + operator.bytes_backward - before, op=MPI.SUM)
        assert counted == plan.planned_forward + plan.planned_backward, (name, counted, plan.explain())
        if strategy != "joint":
            offsets = operator.matrix.row_partition.offsets
            order = operator.matrix.row_order
            permuted = adjacency if order is None else sp.csr_array(adjacency[order][:, order])
            total, apart = formula_bytes(permuted, offsets, config["heads"], channels, strategy)
            assert counted == total, name
            if strategy == "column-hier":  # (the other strategies' plans have one group)
                assert comm.allreduce(between, op=MPI.SUM) == apart == plan.planned_between_groups, name
                plan.bytes_between_groups = 0
    operator.close()


@pytest.mark.ranks(3, 4)
def test_joint_moves_no_more_than_column_or_row_and_two_levels_fewer_between_groups(comm, rng):
    adjacency = random_graph(comm, rng, n=80, density=0.05)
    totals = {}
    for strategy in ("column", "row", "joint", "column-hier"):
        operator = operator_of(comm, adjacency, "even", strategy)
        plan = operator.attention(4, 2, torch.float64)
        totals[strategy] = plan.planned_forward + plan.planned_backward
        assert totals[strategy] == comm.bcast(totals[strategy])
        if strategy == "column-hier":
            between, offsets = plan.planned_between_groups, operator.matrix.row_partition.offsets
        operator.close()
    assert totals["joint"] <= min(totals["column"], totals["row"]), totals
    assert formula_bytes(adjacency, offsets, 4, 2, "column", 8)[1] > between > 0, totals  # a source several ranks read


@pytest.mark.ranks(1, 3, 4)
@pytest.mark.parametrize("strategy", ["row", "joint"])
def test_gradcheck_through_the_merge_with_attention_dropout(comm, rng, strategy):
    """float64 gradcheck of attend in z, att_src and t, with masks drawn for a fixed salt (a fixed function)."""
    adjacency = random_graph(comm, rng, n=18, density=0.2)
    operator = operator_of(comm, adjacency, "even", strategy)
    heads, channels = 2, 3
    plan = operator.attention(heads, channels, torch.float64)
    z = torch.from_numpy(comm.bcast(rng.standard_normal((18, heads, channels)))).requires_grad_(True)
    a = torch.from_numpy(comm.bcast(rng.standard_normal((heads, channels)))).requires_grad_(True)
    t = torch.from_numpy(comm.bcast(rng.standard_normal((18, heads)))).requires_grad_(True)

    class Replicated(torch.autograd.Function):
        """The identity, whose gradient is summed over the ranks (each holds its rows' share of att_src's)."""

        @staticmethod
        def forward(ctx, value):
            return value.clone()

        @staticmethod
        def backward(ctx, grad):
            return torch.from_numpy(comm.allreduce(grad.numpy(), op=MPI.SUM))

    def function(z, a, t):
        local = attend(plan, scatter_rows(operator, z), Replicated.apply(a), scatter_rows(operator, t), 0.2, 0.3, 11)
        return gather_rows(operator, local)

    # fast mode: v^T J u for random u and v, against the backward (a wrong entry of J shows with probability 1)
    assert torch.autograd.gradcheck(function, (z, a, t), eps=1e-6, atol=1e-7, fast_mode=True)
    operator.close()


def planted_layer(comm, rng, strategy, adjacency):
    """A 2-head GATConv with PyG's weights on ``adjacency`` under ``strategy``: the operator, our layer, the features
    every rank holds, PyG's output on them and the layer's attention plan (for the planted-fault tests to spoil)."""
    operator = operator_of(comm, adjacency, "even", strategy)
    torch.manual_seed(5)
    reference = pyg.GATConv(6, 4, heads=2).double()
    ours = GATConv(6, 4, heads=2, dtype=torch.float64)
    ours.load_state_dict(reference.state_dict())
    x = torch.from_numpy(comm.bcast(rng.standard_normal((adjacency.shape[0], 6))))
    expected = reference(x, edge_index(adjacency)).detach().numpy()
    return operator, ours, x, expected, operator.attention(2, 4, torch.float64)


@pytest.mark.ranks(4)
def test_a_planted_wrong_relay_is_caught(comm, rng):
    """Two levels at P = 4: a proxy that forwards a member the rows of its group's fetch one place off gives wrong
    rows on that member (and nowhere else), with the same bytes."""
    operator, ours, x, expected, plan = planted_layer(comm, rng, "column-hier", random_graph(comm, rng, n=60, density=0.15))
    relays = comm.allgather([(member, rows.size) for member, rows in plan._relay])
    faulty = next(rank for rank, relay in enumerate(relays) if any(size >= 2 for _, size in relay))
    member = None
    if comm.Get_rank() == faulty:
        index = next(i for i, (_, rows) in enumerate(plan._relay) if rows.size >= 2)
        member, rows = plan._relay[index]
        plan._relay[index] = (member, np.roll(rows, 1))  # forward each row in its neighbour's place
    member = comm.bcast(member, root=faulty)
    out = gather_rows(operator, ours(scatter_rows(operator, x), operator)).detach().numpy()
    wrong = np.flatnonzero(np.abs(out - expected).max(axis=1) > 1e-9)
    offsets = operator.matrix.row_partition.offsets
    assert wrong.size and set(np.searchsorted(offsets, wrong, side="right") - 1) == {member}, (wrong, member)
    operator.close()


@pytest.mark.ranks(1, 3)
def test_a_planted_wrong_source_is_caught_at_its_row(comm, rng):
    operator, ours, x, expected, plan = planted_layer(comm, rng, "joint", random_graph(comm, rng))
    part = plan._local
    faulty_row = comm.bcast(int(np.flatnonzero(np.diff(part.indptr) >= 2)[0]))  # rank 0's first row of two entries
    entry = part.indptr[faulty_row]
    if comm.Get_rank() == 0:
        part.source[entry] = part.source[entry + 1]  # read its first entry from its second entry's source
    out = gather_rows(operator, ours(scatter_rows(operator, x), operator)).detach().numpy()
    wrong = np.flatnonzero(np.abs(out - expected).max(axis=1) > 1e-9)
    assert wrong.tolist() == [faulty_row], wrong  # rank 0's rows come first under the even partition
    operator.close()


@pytest.mark.ranks(2)
def test_attention_refuses_wrong_shapes_and_spmm_only_strategies_on_every_rank(comm, rng):
    adjacency = random_graph(comm, rng, n=12)
    operator = operator_of(comm, adjacency, "even", "joint")
    plan = operator.attention(2, 3, torch.float64)
    rows = operator.local_nodes
    with pytest.raises(SparsewireError, match=r"the plan expects \(\d+, 2, 3\)"):
        attend(plan, torch.zeros(rows, 2, 4, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64),
               torch.zeros(rows, 2, dtype=torch.float64))  # fmt: skip
    operator.close()
    block = operator_of(comm, adjacency, "even", "block")
    with pytest.raises(SparsewireError, match="strategy 'block' is for SpMM only"):
        block.attention(2, 3, torch.float64)
    block.close()
