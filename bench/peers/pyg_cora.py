"""A PyG script on Cora, on one process without sparsewire and on P ranks with the lines docs/pyg.md adds: the test
accuracy at the best validation accuracy, per seed and their mean, in one run.

    .venv/bin/python bench/peers/pyg_cora.py [--models gcn,gat] [--seeds 5] [--ranks 3] [--epochs 200]
        [--launcher torchrun|mpiexec]

Ours: ``torchrun --nproc-per-node RANKS examples/pyg_cora.py --model M --seed S --json`` (or under ``mpiexec -n
RANKS``). PyG: the same models (imported
from that script) trained by a plain PyG loop (``F.cross_entropy``, local accuracy, no sparsewire call) in this
process, ``torch.manual_seed(S)`` before the weights. Dropout draws other masks on P ranks (each rank's own
generator; GAT's attention dropout from hashed masks), so single seeds differ; the means over the seeds are what
is compared. Writes bench/results/pyg_cora.json.
"""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, job, run_json  # noqa: E402

EXAMPLE = ROOT / "examples" / "pyg_cora.py"


def plain(model_name: str, seed: int, epochs: int) -> float:
    """The example's model and optimiser trained by PyG alone, one process: the test accuracy at the best validation."""
    import torch
    import torch.nn.functional as F

    from sparsewire.gnn import load_graph
    from sparsewire.pyg import to_pyg

    example = runpy.run_path(str(EXAMPLE))
    torch.manual_seed(seed)
    data = to_pyg(load_graph("cora"))
    classes = int(data.y.max()) + 1
    if model_name == "gcn":
        model = example["GCN"](data.x.shape[1], 16, classes)
        optimizer = torch.optim.Adam(
            [dict(params=model.conv1.parameters(), weight_decay=5e-4), dict(params=model.conv2.parameters(), weight_decay=0)],
            lr=0.01,
        )
    else:
        model = example["GAT"](data.x.shape[1], 8, classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    best_val = test_accuracy = 0.0
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            predicted = model(data.x, data.edge_index).argmax(dim=-1)
        val, test = (float((predicted[m] == data.y[m]).float().mean()) for m in (data.val_mask, data.test_mask))
        if val > best_val:
            best_val, test_accuracy = val, test
    return test_accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gcn,gat", help="comma-separated: gcn, gat (default: both)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default: 5)")
    parser.add_argument("--ranks", type=int, default=3, help="ranks of our run (default: 3)")
    parser.add_argument("--epochs", type=int, default=200, help="epochs (default: 200)")
    parser.add_argument("--threads", type=int, default=2, help="PyG's torch threads (default: 2)")
    parser.add_argument("--launcher", choices=["torchrun", "mpiexec"], default="torchrun", help="ours (default: torchrun)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    print(f"{'model':6} {'seed':>4} {'PyG, 1 process':>15} {f'ours, P = {args.ranks}':>13}  ({args.launcher})")
    for model in args.models.split(","):
        for seed in range(args.seeds):
            theirs = plain(model, seed, args.epochs)
            arguments = [EXAMPLE, "--model", model, "--seed", seed, "--epochs", args.epochs, "--json"]
            command = job(args.ranks, *arguments) if args.launcher == "mpiexec" else [
                sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks),
                *map(str, arguments)]  # fmt: skip
            mine = run_json(command, timeout=1800)["test_accuracy"]
            rows.append({"model": model, "seed": seed, "pyg": theirs, "ours": mine})
            print(f"{model:6} {seed:4d} {theirs:15.4f} {mine:13.4f}", flush=True)
    print()
    for model in args.models.split(","):
        mine = statistics.mean(r["ours"] for r in rows if r["model"] == model)
        theirs = statistics.mean(r["pyg"] for r in rows if r["model"] == model)
        print(f"{model}: mean test accuracy PyG {theirs:.4f}, ours {mine:.4f} at P = {args.ranks}: "
              f"{100 * (mine - theirs):+.2f} points")  # fmt: skip
    out = ROOT / "bench" / "results" / "pyg_cora.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"ranks": args.ranks, "epochs": args.epochs, "launcher": args.launcher, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
