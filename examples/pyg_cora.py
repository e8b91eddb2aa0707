"""A PyTorch Geometric script, GCN or GAT on Cora, trained full batch on P ranks by sparsewire.pyg.

    mpiexec -n 3 .venv/bin/python examples/pyg_cora.py [--model gcn|gat] [--epochs N] [--seed S] [--json]

It is a single-process PyG script with the lines marked ``# sparsewire`` added or changed (docs/pyg.md). Cora
ships with the package (``load_graph("cora")``; PyG's ``Planetoid(root, "Cora")`` gives the same graph). Prints
each tenth epoch and the test accuracy at the best validation accuracy, as PyG's examples report it.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv

import sparsewire.pyg as sw  # sparsewire
from sparsewire.gnn import load_graph


class GCN(torch.nn.Module):
    """Kipf and Welling's two-layer GCN, dropout 0.5."""

    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, hidden), GCNConv(hidden, classes)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


class GAT(torch.nn.Module):
    """Veličković et al.'s two-layer GAT: 8 heads of 8, one averaged output head, dropout 0.6 (also on attention)."""

    def __init__(self, features: int, hidden: int, classes: int, heads: int = 8):
        super().__init__()
        self.conv1 = GATConv(features, hidden, heads=heads, dropout=0.6)
        self.conv2 = GATConv(hidden * heads, classes, heads=1, concat=False, dropout=0.6)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.6, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.6, training=self.training)
        return self.conv2(x, edge_index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=["gcn", "gat"], default="gcn", help="the network (default: gcn)")
    parser.add_argument("--epochs", type=int, default=200, help="training epochs (default: 200)")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the weights are drawn (default: 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end instead of the progress")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    data = sw.to_pyg(load_graph("cora"))
    classes = int(data.y.max()) + 1
    data = sw.distribute(data)  # sparsewire: this rank's nodes, and the graph handle as data.edge_index
    if args.model == "gcn":
        model, lr = GCN(data.x.shape[1], 16, classes), 0.01
        optimizer = torch.optim.Adam(
            [dict(params=model.conv1.parameters(), weight_decay=5e-4), dict(params=model.conv2.parameters(), weight_decay=0)],
            lr=lr,
        )
    else:
        model = GAT(data.x.shape[1], 8, classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    model = sw.convert(model)  # sparsewire: rank 0's initial weights on every rank
    torch.manual_seed(args.seed + 1000 * sw.rank())  # sparsewire: each rank its own dropout masks

    def train() -> float:
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        loss = sw.cross_entropy(out[data.train_mask], data.y[data.train_mask])  # sparsewire: was F.cross_entropy
        loss.backward()
        sw.allreduce_gradients(model)  # sparsewire
        optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def test() -> list[float]:
        model.eval()
        predicted = model(data.x, data.edge_index).argmax(dim=-1)
        masks = (data.train_mask, data.val_mask, data.test_mask)
        return [sw.accuracy(predicted[mask], data.y[mask]) for mask in masks]  # sparsewire: was a local mean

    best_val = test_accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        loss = train()
        train_accuracy, val_accuracy, accuracy = test()
        if val_accuracy > best_val:
            best_val, test_accuracy = val_accuracy, accuracy
        if sw.rank() == 0 and not args.json and (epoch % 10 == 0 or epoch == 1):  # sparsewire: print on one rank
            print(
                f"epoch {epoch:3d}  loss {loss:.4f}  train {train_accuracy:.4f}  val {val_accuracy:.4f}  test {test_accuracy:.4f}"
            )
    if sw.rank() == 0:
        result = {"model": args.model, "seed": args.seed, "ranks": sw.world_size(), "test_accuracy": test_accuracy}
        print(json.dumps(result) if args.json else f"test accuracy at the best validation accuracy: {test_accuracy:.4f}")


if __name__ == "__main__":
    main()
