"""Distributed GNN checks run by tests/gnn/test_gnn.py under ``mpiexec -n P``.

Usage: ``python tests/gnn/gnn_driver.py CASE SEED [ARGS]``; rank 0 prints ``OK ...`` or one JSON line.

- ``gradcheck``: torch.autograd.gradcheck (float64) through scatter_rows -> propagate ->
  gather_rows on a directed random graph (A != A.T), for the GCN-normalised and the raw operator.
- ``losses EPOCHS DROPOUT MODEL [DATA]``: train from weights drawn on rank 0 and print the per-epoch losses
  and the final weights (JSON) so the test can compare P's and PyG.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import scipy.sparse as sp
import torch
from mpi4py import MPI

import sparsewire
from sparsewire.gnn import (
    GraphData,
    GraphOperator,
    distribute_graph,
    gather_rows,
    gcn_normalize,
    load_planetoid,
    propagate,
    scatter_rows,
    train,
)

torch.set_num_threads(1)


def gradcheck(seed: int) -> str:
    comm = MPI.COMM_WORLD
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
    return f"OK gradcheck {checked}"


def losses(seed: int, epochs: str, dropout: str, model: str, data_path: str | None = None) -> str:
    comm = MPI.COMM_WORLD
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
    graph = distribute_graph(comm, data, model, dtype=torch.float64)  # compared with float64 references to 1e-5
    result = train(comm, graph, model=model, epochs=int(epochs), dropout=float(dropout), seed=seed)
    weights = {name: value.detach().numpy().tolist() for name, value in result.model.state_dict().items()}
    report = {"losses": [h["loss"] for h in result.history], "test_accuracy": result.test_accuracy, "weights": weights}
    return json.dumps(report)


if __name__ == "__main__":
    case, seed = sys.argv[1], int(sys.argv[2])
    output = {"gradcheck": gradcheck, "losses": losses}[case](seed, *sys.argv[3:])
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(output, flush=True)
