"""Training from an OGB dataset's cache, each rank reading only its rows: the same losses as the whole graph on one
process, each rank holding its equal share, and the misuses refused on every rank."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

torch = pytest.importorskip("torch")

from ogb_files import random_dataset, write_ogb  # noqa: E402

from conftest import on_rank_zero  # noqa: E402
from sparsewire.errors import InputError  # noqa: E402
from sparsewire.gnn import distribute_graph, load_ogb, open_ogb_cache, train  # noqa: E402
from sparsewire.partition import even_rows  # noqa: E402

torch.set_num_threads(1)
SETTINGS = {"epochs": 6, "dropout": 0.0, "hidden": 8, "heads": 2, "seed": 3}


@pytest.mark.ranks(1, 2, 3)
def test_training_from_rows_of_the_cache_equals_the_whole_graph_on_one_process(comm, shared_tmp, seed):
    rng = np.random.default_rng(seed)
    pairs, features, labels, split = random_dataset(rng, n=70, edges=300, width=5, classes=3)
    root = on_rank_zero(comm, write_ogb, shared_tmp / "ogbn_arxiv", pairs, features, labels, split)
    cache = open_ogb_cache(comm, str(root), undirected=True)
    start, stop = even_rows(70, comm.Get_size()).range(comm.Get_rank())
    for model in ("gcn", "sage", "gat"):
        graph = distribute_graph(comm, cache, model, dtype=torch.float64)
        assert graph.n == 70 and tuple(graph.features.shape) == (stop - start, 5)  # this rank's share only
        assert torch.equal(graph.labels, torch.from_numpy(labels[start:stop]))
        assert graph.totals == {"train": 35, "val": 17, "test": 18} and graph.classes == int(labels.max()) + 1
        losses = [entry["loss"] for entry in train(comm, graph, model=model, **SETTINGS).history]
        reference = None
        if comm.Get_rank() == 0:  # the whole graph read at once, trained by one process
            whole = distribute_graph(MPI.COMM_SELF, load_ogb(str(root), undirected=True), model, dtype=torch.float64)
            reference = [entry["loss"] for entry in train(MPI.COMM_SELF, whole, model=model, **SETTINGS).history]
        np.testing.assert_allclose(losses, comm.bcast(reference), rtol=0, atol=1e-9, err_msg=model)


@pytest.mark.ranks(2)
def test_a_cache_on_some_ranks_only_another_partitioner_and_nan_features_are_refused_on_every_rank(comm, shared_tmp, seed):
    rng = np.random.default_rng(seed)
    pairs, features, labels, split = random_dataset(rng, n=40, edges=120)
    root = on_rank_zero(comm, write_ogb, shared_tmp / "ogbn_arxiv", pairs, features, labels, split)
    cache = open_ogb_cache(comm, str(root))
    with pytest.raises(InputError, match="pass it on every rank"):
        distribute_graph(comm, cache if comm.Get_rank() == 1 else None)
    with pytest.raises(InputError, match="not partition='metis'; for another partitioner load the whole graph"):
        distribute_graph(comm, cache, partition="metis")
    features[33, 2] = np.nan  # on the last rank's rows: named by its global row on every rank
    nan_root = on_rank_zero(comm, write_ogb, shared_tmp / "nan", pairs, features, labels, split)
    with pytest.raises(InputError, match=r"the features holds 1 NaN or infinite values \(the first in row 33\)"):
        distribute_graph(comm, open_ogb_cache(comm, str(nan_root)))
    broken = shared_tmp / "broken"
    on_rank_zero(comm, write_ogb, broken, pairs[:, :5] + 1000, features, labels, split)
    with pytest.raises(InputError, match="an edge names a node outside 0..39"):
        open_ogb_cache(comm, str(broken))


@pytest.mark.ranks(1, 3)
def test_a_pyg_model_reads_its_rows_from_the_cache_as_from_the_whole_graph(comm, shared_tmp, seed):
    """sparsewire.pyg.distribute of the cache (each rank its rows) against the whole graph on rank 0: the same
    nodes' attributes, and a converted GCN gives the same output."""
    pytest.importorskip("torch_geometric")
    from torch_geometric.nn import GCNConv

    import sparsewire.pyg as sw

    rng = np.random.default_rng(seed)
    pairs, features, labels, split = random_dataset(rng, n=50, edges=200, width=4, classes=3)
    root = on_rank_zero(comm, write_ogb, shared_tmp / "ogbn_arxiv", pairs, features, labels, split)
    from_rows = sw.distribute(open_ogb_cache(comm, str(root), undirected=True), comm=comm)
    whole = sw.distribute(load_ogb(str(root), undirected=True) if comm.Get_rank() == 0 else None, comm=comm)
    start, stop = even_rows(50, comm.Get_size()).range(comm.Get_rank())
    assert from_rows.n_id.tolist() == whole.n_id.tolist() == list(range(start, stop))
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(from_rows, name), getattr(whole, name).to(getattr(from_rows, name).dtype)), name
    torch.manual_seed(seed)
    layer = sw.convert(GCNConv(4, 2), comm)
    np.testing.assert_allclose(layer(from_rows.x, from_rows.edge_index).detach().numpy(),
                               layer(whole.x, whole.edge_index).detach().numpy(), rtol=0, atol=1e-6)  # fmt: skip
    with pytest.raises(InputError, match="with partition='even'"):
        sw.distribute(open_ogb_cache(comm, str(root)), partition="rcm", comm=comm)
