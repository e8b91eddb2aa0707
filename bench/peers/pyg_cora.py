"""PyG's own examples/gcn.py and examples/gat.py on Cora: as PyG ships them on one process, and with the lines
docs/pyg.md adds on P ranks under torchrun. The test accuracy at the best validation accuracy, per seed and the
mean over the seeds, in one run.

    .venv/bin/python bench/peers/pyg_cora.py [--models gcn,gat] [--seeds 5] [--ranks 3] [--launcher torchrun|mpiexec]

The scripts are in bench/peers/pyg_examples/: ``gcn.py`` and ``gat.py`` as PyG 2.8.0.post1 ships them (MIT licence,
its ``LICENSE`` beside them), and ``gcn_sparsewire.py`` and ``gat_sparsewire.py``, the same files with the lines
marked ``# sparsewire`` added or changed. The bench checks that every line the two differ in is so marked before it
runs anything. Both read Cora through PyG's ``Planetoid(root, "Cora", transform=NormalizeFeatures())``: the bench
writes Planetoid's raw files from the Cora that ships with sparsewire into a temporary ``data/Planetoid`` beside the
copied scripts (no download) and checks that PyG reads them as the graph ``sw.to_pyg(load_graph("cora"))`` gives.
Each run is seeded by ``torch.manual_seed(S)`` before the script starts (the scripts draw their weights and dropout
masks from it); the sparsewire scripts seed each rank's generator with S + rank after the weights are drawn.
Dropout differs between 1 and P ranks, so single seeds differ; the means are what is compared. Writes
bench/results/pyg_cora.json.
"""

from __future__ import annotations

import argparse
import difflib
import json
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent / "pyg_examples"
MARK = "# sparsewire"
LAST_TEST = re.compile(r"Test: ([0-9.]+)\s*$")


def unmarked_changes(script: str) -> list[str]:
    """The lines in which ``<script>_sparsewire.py`` differs from PyG's ``<script>.py`` without the marker."""
    theirs = (EXAMPLES / f"{script}.py").read_text().splitlines()
    ours = (EXAMPLES / f"{script}_sparsewire.py").read_text().splitlines()
    changed = [line[1:] for line in difflib.ndiff(theirs, ours) if line.startswith("+ ")]
    return [line for line in changed if not line.rstrip().endswith(MARK) and MARK + ":" not in line]


def write_planetoid_raw(folder: Path) -> None:
    """Planetoid's raw files (``ind.cora.{x,tx,allx,y,ty,ally,graph,test.index}``, pickles as Yang et al. ship them)
    for the Cora that ships with sparsewire. Its nodes are in the order PyG's reader puts them in (train, validation,
    then the sorted test nodes last), so ``test.index`` is written sorted and the reader's reordering is the identity."""
    from sparsewire.gnn import load_graph

    graph = load_graph("cora")
    n, tests = graph.n, np.asarray(graph.test_idx)
    if not np.array_equal(tests, np.arange(n - tests.size, n)):
        raise SystemExit("pyg_cora: the shipped Cora's test nodes are not its last ones; cannot write Planetoid's layout")
    raw = sp.csr_matrix(graph.features, dtype=np.float32)
    raw.data[:] = 1.0  # the shipped features are the 0/1 bag of words, row-normalised on reading
    onehot = np.eye(graph.classes, dtype=np.int64)[graph.labels]
    train = np.asarray(graph.train_idx)
    if not np.array_equal(train, np.arange(train.size)):
        raise SystemExit("pyg_cora: the shipped Cora's training nodes are not its first ones")
    adjacency = sp.csr_matrix(graph.adjacency)
    items = {
        "x": raw[: train.size], "tx": raw[n - tests.size:], "allx": raw[: n - tests.size],
        "y": onehot[: train.size], "ty": onehot[n - tests.size:], "ally": onehot[: n - tests.size],
        "graph": {i: adjacency.indices[adjacency.indptr[i]:adjacency.indptr[i + 1]].tolist() for i in range(n)},
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in items.items():
        with open(folder / f"ind.cora.{name}", "wb") as file:
            pickle.dump(value, file, protocol=2)
    (folder / "ind.cora.test.index").write_text("".join(f"{i}\n" for i in tests))


def check_planetoid(root: Path) -> None:
    """PyG's Planetoid reader on the written files gives the graph sparsewire ships (features after PyG's
    ``NormalizeFeatures``, edges, labels, masks), and leaves its processed files for the runs."""
    import torch
    import torch_geometric.transforms as T
    from torch_geometric.datasets import Planetoid

    from sparsewire.gnn import load_graph
    from sparsewire.pyg import to_pyg

    theirs = Planetoid(str(root), "Cora", transform=T.NormalizeFeatures())[0]
    ours = to_pyg(load_graph("cora"))
    same_edges = {tuple(e) for e in theirs.edge_index.t().tolist()} == {tuple(e) for e in ours.edge_index.t().tolist()}
    checks = {
        "features": torch.allclose(theirs.x, ours.x, atol=1e-6),
        "edges": same_edges,
        **{key: torch.equal(theirs[key], ours[key]) for key in ("y", "train_mask", "val_mask", "test_mask")},
    }
    if not all(checks.values()):
        raise SystemExit(f"pyg_cora: PyG read the written Planetoid files differently: {checks}")


def seeded(script: Path, seed: int) -> list[str]:
    """``python -c`` that seeds torch's generator with ``seed`` and runs ``script`` as ``__main__``."""
    code = (
        "import runpy, sys, torch; "
        f"torch.manual_seed({seed}); sys.argv = [{str(script)!r}]; runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    return [sys.executable, "-c", code]


def last_test_accuracy(command: list[str], cwd: Path) -> float:
    """Runs ``command`` and reads the test accuracy from its last ``log(...)`` line."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=3600)
    found = [LAST_TEST.search(line) for line in done.stdout.splitlines()]
    found = [match for match in found if match]
    if done.returncode != 0 or not found:
        raise SystemExit(f"pyg_cora: {' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    return float(found[-1].group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gcn,gat", help="comma-separated: gcn, gat (default: both)")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default: 5)")
    parser.add_argument("--ranks", type=int, default=3, help="ranks of the sparsewire runs (default: 3)")
    parser.add_argument("--launcher", choices=["torchrun", "mpiexec"], default="torchrun", help="ours (default: torchrun)")
    args = parser.parse_args()
    models = args.models.split(",")
    for model in models:
        if model not in ("gcn", "gat"):
            raise SystemExit(f"pyg_cora: --models {model!r}: give gcn, gat or both")
        if unmarked := unmarked_changes(model):
            raise SystemExit(f"pyg_cora: {model}_sparsewire.py changes lines without {MARK!r}: {unmarked}")

    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory(prefix="pyg_cora_") as work:
        work = Path(work)
        (work / "examples").mkdir()
        for model in models:
            for suffix in ("", "_sparsewire"):
                shutil.copy(EXAMPLES / f"{model}{suffix}.py", work / "examples")
        write_planetoid_raw(work / "data" / "Planetoid" / "Cora" / "raw")
        check_planetoid(work / "data" / "Planetoid")
        rows = []
        print(f"{'model':6} {'seed':>4} {'PyG, 1 process':>15} {f'ours, P = {args.ranks}':>13}  ({args.launcher})")
        for model in models:
            for seed in range(args.seeds):
                theirs = last_test_accuracy(seeded(work / "examples" / f"{model}.py", seed), work)
                ours = seeded(work / "examples" / f"{model}_sparsewire.py", seed)
                if args.launcher == "torchrun":
                    launcher = [str(bin_dir / "torchrun"), "--standalone", "--nproc-per-node", str(args.ranks), "--no-python"]
                else:
                    launcher = [str(bin_dir / "mpiexec"), "-n", str(args.ranks)]
                mine = last_test_accuracy(launcher + ours, work)
                rows.append({"model": model, "seed": seed, "pyg": theirs, "ours": mine})
                print(f"{model:6} {seed:4d} {theirs:15.4f} {mine:13.4f}", flush=True)
    print()
    for model in models:
        mine = statistics.mean(r["ours"] for r in rows if r["model"] == model)
        theirs = statistics.mean(r["pyg"] for r in rows if r["model"] == model)
        print(f"{model}: mean test accuracy PyG {theirs:.4f}, ours {mine:.4f} at P = {args.ranks}: "
              f"{100 * (mine - theirs):+.2f} points")  # fmt: skip
    out = ROOT / "bench" / "results" / "pyg_cora.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"ranks": args.ranks, "launcher": args.launcher, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
