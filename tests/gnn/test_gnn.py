"""Distributed GNN training: the data reader, the layers and the command's refusals. The collective cases (gradients,
the same weights at every P, agreement with PyTorch Geometric, and the gcn command's training runs, Cora among them)
are in tests/mpi/test_gnn.py and tests/mpi/test_gnn_command.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from planetoid_files import write_planetoid  # noqa: E402

import sparsewire  # noqa: E402
from conftest import run_mpi  # noqa: E402


def test_planetoid_reader_handles_unlabelled_and_isolated_nodes_and_row_normalises(tmp_path):
    from sparsewire.gnn import load_planetoid

    # 5 nodes: 0-1-2 a path, 3 isolated, 4 unlabelled (padded) with an edge to 2; features 0/1.
    edges = [(0, 1), (1, 0), (1, 2), (2, 1), (2, 4), (4, 2)]
    adjacency = sp.csr_array((np.ones(6), tuple(np.array(edges).T)), shape=(5, 5))
    features = np.array([[1, 1, 0], [0, 1, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0]])
    write_planetoid(tmp_path / "tiny.npz", adjacency, features, [0, 1, 0, 1, -1], [0, 1], [2], [3])
    data = load_planetoid(str(tmp_path / "tiny.npz"))
    assert data.n == 5 and data.classes == 2 and data.labels[4] == -1
    np.testing.assert_array_equal(data.features.toarray()[0], [0.5, 0.5, 0])
    np.testing.assert_array_equal(data.features.toarray()[2], [1 / 3, 1 / 3, 1 / 3])
    np.testing.assert_array_equal(data.features.toarray()[3], [0, 0, 0])  # no division by zero


def test_planetoid_reader_rejects_a_split_with_unlabelled_nodes(tmp_path):
    from sparsewire import InputError
    from sparsewire.gnn import load_planetoid

    write_planetoid(tmp_path / "bad.npz", sp.eye_array(3), np.eye(3), [0, -1, 1], [0, 1], [2], [])
    with pytest.raises(InputError, match="without a label"):
        load_planetoid(str(tmp_path / "bad.npz"))


def test_gcn_command_errors_are_one_line():
    completed = run_mpi(2, ["-m", "sparsewire", "gcn", "rmat:8:4:1"], timeout=120)
    assert completed.returncode == 2 and "--features random:F --classes C" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_every_public_gnn_function_says_whether_it_is_collective():
    import inspect

    import sparsewire.gnn as gnn

    missing = []
    for name in gnn.__all__:
        obj = getattr(gnn, name)
        members = (
            [(name, obj)]
            if not inspect.isclass(obj)
            else [(name, None)]
            + [
                (f"{name}.{member}", getattr(value, "__func__", value))
                for member, value in vars(obj).items()
                if not member.startswith("_") and (inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)))
            ]
        )
        assert inspect.getdoc(obj), name
        missing += [
            label for label, function in members if function is not None and "ollective" not in (inspect.getdoc(function) or "")
        ]
    assert not missing, missing


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sparse_linear_matches_dense_products_and_gradients(rng, dtype):
    from sparsewire.gnn.sparse_input import sparse_linear

    # Integer values: every product and gradient is exact in both dtypes.
    for shape, density, threads in (((40, 23), 0.1, 1), ((57, 31), 0.3, 2), ((5, 9), 0.0, 1)):
        dense = (rng.random(shape) < density) * rng.integers(-3, 4, shape)
        x = torch.from_numpy(dense).to(dtype).to_sparse().coalesce()
        weight = torch.from_numpy(rng.integers(-2, 3, (6, shape[1]))).to(dtype).requires_grad_(True)
        grad = torch.from_numpy(rng.integers(-2, 3, (shape[0], 6))).to(dtype)
        out = sparse_linear(x, weight, threads)
        out.backward(grad)
        reference = torch.from_numpy(dense).to(dtype) @ weight.detach().T
        assert torch.equal(out, reference)
        assert torch.equal(weight.grad, (torch.from_numpy(dense).to(dtype).T @ grad).T)
    # A hand-made case: X = [[1, 0, 2], [0, 3, 0]], W = [[1, 1, 1]] -> X W^T = [[3], [3]].
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=dtype).to_sparse()
    assert sparse_linear(x, torch.ones((1, 3), dtype=dtype)).flatten().tolist() == [3.0, 3.0]
    # Dropout's new values on the same pattern reuse the structure and give the new product.
    dropped = torch.sparse_coo_tensor(
        x.coalesce().indices(), torch.tensor([0.0, 4.0, 3.0], dtype=dtype), x.shape, check_invariants=True
    ).coalesce()
    assert sparse_linear(dropped, torch.ones((1, 3), dtype=dtype)).flatten().tolist() == [4.0, 3.0]


def test_planetoid_files_are_validated_before_use(tmp_path):
    """A damaged file, an index out of range in the graph or the features (SciPy would read
    outside its arrays) and a label that would make a 10^6-class output layer are one InputError."""
    from sparsewire import InputError
    from sparsewire.gnn import load_planetoid

    good = tmp_path / "good.npz"
    write_planetoid(good, sp.eye_array(3), np.eye(3), [0, 1, 1], [0, 1], [2], [])
    assert load_planetoid(str(good)).classes == 2
    whole = good.read_bytes()
    for cut in (0, 10, len(whole) // 2, len(whole) - 1):
        (tmp_path / "cut.npz").write_bytes(whole[:cut])
        with pytest.raises(InputError, match="cannot read"):
            load_planetoid(str(tmp_path / "cut.npz"))
    arrays = dict(np.load(good))
    for key, value in (("adj_indices", [0, 7, 2]), ("feat_indices", [0, 1, 1_000_000])):
        np.savez(tmp_path / "corrupt.npz", **{**arrays, key: np.asarray(value, np.int64)})
        with pytest.raises(InputError, match="corrupt graph or feature arrays"):
            load_planetoid(str(tmp_path / "corrupt.npz"))
    np.savez(tmp_path / "label.npz", **{**arrays, "labels": np.asarray([0, 1, 10**12], np.int64)})
    with pytest.raises(InputError, match="classes: largest label"):
        load_planetoid(str(tmp_path / "label.npz"))


def test_an_edge_list_with_a_vertex_id_beyond_the_machine_is_refused(tmp_path):
    from sparsewire import InputError
    from sparsewire.io.readers import load_matrix

    (tmp_path / "far.txt").write_text("0 1\n1 4000000000000\n")  # 4e12 rows: beyond any machine
    with pytest.raises(InputError, match=r"largest vertex id \+ 1.*needs about"):
        load_matrix(str(tmp_path / "far.txt"))


@pytest.mark.parametrize(
    "keywords, expected",
    [
        ({"lr": float("nan")}, "lr must be a finite number greater than 0 (got nan)"),
        ({"lr": float("inf")}, "lr must be a finite number greater than 0 (got inf)"),
        ({"weight_decay": float("nan")}, "weight_decay must be a finite number of at least 0 (got nan)"),
        ({"weight_decay": -1.0}, "weight_decay must be a finite number of at least 0 (got -1.0)"),
        ({"dropout": 1.0}, "dropout must be a finite number from 0 up to but not 1 (got 1.0)"),
        ({"hidden": 0}, "hidden must be a whole number of at least 1 (got 0)"),
        ({"layers": 0}, "layers must be a whole number of at least 1 (got 0)"),
        ({"epochs": -3}, "epochs must be a whole number of at least 1 (got -3)"),
        ({"epochs": 2.5}, "epochs must be a whole number of at least 1 (got 2.5)"),
        ({"heads": True}, "heads must be a whole number of at least 1 (got True)"),
        ({"channels": [5]}, "channels must list at least two widths"),
        ({"channels": [5, 0, 3]}, "channels must list at least two widths of at least 1"),
    ],
)
def test_training_refuses_hyper_parameters_outside_their_domain(keywords, expected):
    """``--lr inf`` and ``--weight-decay nan`` trained and reported an accuracy; the library refuses
    them before anything collective (so no communicator or graph is touched here)."""
    from sparsewire.errors import InputError
    from sparsewire.gnn.train import train

    with pytest.raises(InputError, match=re.escape(expected)):
        train(None, None, **keywords)


def test_gcn_refuses_nan_in_the_graph_unless_allowed(tmp_path):
    """It trained on an adjacency with NaN values and reported an accuracy (with ``--allow-nonfinite`` it still does:
    tests/mpi/test_refusals.py)."""
    n = 40
    entries = [f"{i + 1} {(i + 1) % n + 1} {'nan' if i == 2 else '1'}" for i in range(n)]
    path = tmp_path / "ring.mtx"
    path.write_text(f"%%MatrixMarket matrix coordinate real general\n{n} {n} {n}\n" + "\n".join(entries) + "\n")
    command = ["-m", "sparsewire", "gcn", str(path), "--features", "random:4", "--classes", "2", "--epochs", "2"]
    refused = run_mpi(2, command, timeout=120)
    assert refused.returncode == 2 and refused.stderr.count("sparsewire: error:") == 1, refused.stderr
    assert "the adjacency holds 1 NaN or infinite values (the first in row 2)" in refused.stderr, refused.stderr


@pytest.mark.parametrize(
    "ranks_on_node, setting, expected",
    [(1, None, "keep"), (2, None, "release"), (2, False, "keep"), (1, True, "release"), (3, True, "release")],
)
def test_a_rank_alone_on_its_node_keeps_freed_heap_and_one_sharing_it_gives_pages_back(
    monkeypatch, ranks_on_node, setting, expected
):
    """What a propagation on the CPU does with the C heap's freed pages, by the ranks on this rank's node and
    ``GraphOperator.release_heap``: give them back (memory other ranks of the node can use) or keep them, large blocks
    too (the next step's temporaries reuse them); exact, and the same over the propagation's products."""
    import importlib

    from mpi4py import MPI

    module = importlib.import_module("sparsewire.gnn.propagate")  # (the module: the package exports its function)

    calls = []
    monkeypatch.setattr(module, "keep_freed_heap", lambda: calls.append("keep"))
    monkeypatch.setattr(module, "release_free_heap", lambda: calls.append("release"))
    monkeypatch.setattr(module, "ranks_on_node", lambda comm: ranks_on_node)
    adjacency = sp.csr_array(np.array([[0, 1, 2], [1, 0, 0], [2, 0, 1]], dtype=float))
    operator = module.GraphOperator(sparsewire.distribute(MPI.COMM_WORLD, adjacency, "even"))
    operator.release_heap = setting
    x = torch.tensor([[1.0], [2.0], [3.0]], requires_grad=True)
    y = module.propagate(operator, x)
    y.backward(torch.ones_like(y))
    assert y.detach().flatten().tolist() == [8.0, 1.0, 5.0] and x.grad.flatten().tolist() == [3.0, 1.0, 3.0]
    assert calls == [expected, expected]
    operator.release_free_memory(torch.device("meta"))  # not the CPU's heap: neither
    assert calls == [expected, expected]
