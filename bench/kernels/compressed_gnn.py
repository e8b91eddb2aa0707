"""GNN training with compressed messages: test accuracy over seeds, each codec beside uncompressed.

    .venv/bin/python bench/kernels/compressed_gnn.py [--data ../shared/data/gnn/cora.npz] [--ranks 3] [--seeds 10]
        [--models gcn,sage] [--codecs none,bf16,fp16,int8] [--epochs 200]

Runs ``mpiexec -n RANKS sparsewire gcn DATA --model M --seed S --compress C --json`` for every model, seed and
codec (seeds 0 .. SEEDS-1: the weights and dropout masks differ per seed; the split is the dataset's;
int8's rounding noise comes from a generator seeded by each rank), and prints per model and codec the
mean and standard deviation of the test accuracy, the difference of the means to ``none`` in points,
and the bytes per epoch (payload, and on the wire) from the runs' JSON (MPI's receive statuses).
Writes bench/results/compressed_gnn.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, job  # noqa: E402


def run(data: str, ranks: int, model: str, seed: int, codec: str, epochs: int) -> dict:
    command = job(ranks, "-m", "sparsewire", "gcn", data)
    command += ["--model", model, "--seed", str(seed), "--compress", codec, "--epochs", str(epochs), "--json"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "gnn" / "cora.npz"))
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--models", default="gcn,sage")
    parser.add_argument("--codecs", default="none,bf16,fp16,int8")
    parser.add_argument("--epochs", type=int, default=200)
    args = parser.parse_args()
    if not Path(args.data).exists():
        raise SystemExit(f"{args.data} is absent; give --data")
    results = []
    for model in args.models.split(","):
        for codec in args.codecs.split(","):
            runs = []
            for seed in range(args.seeds):
                print(f"{model} {codec} seed {seed} ...", file=sys.stderr, flush=True)
                report = run(args.data, args.ranks, model, seed, codec, args.epochs)
                runs.append(
                    {
                        "seed": seed,
                        "test_accuracy": report["test_accuracy"],
                        "bytes_per_epoch": report["bytes_per_epoch"],
                        "wire_bytes_per_epoch": report["wire_bytes_per_epoch"],
                        "seconds_per_epoch": report["seconds_per_epoch"],
                    }
                )
            accuracies = [r["test_accuracy"] for r in runs]
            results.append(
                {
                    "model": model,
                    "codec": codec,
                    "mean": statistics.mean(accuracies),
                    "stdev": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
                    "bytes_per_epoch": runs[0]["bytes_per_epoch"],
                    "wire_bytes_per_epoch": statistics.mean(r["wire_bytes_per_epoch"] for r in runs),
                    "runs": runs,
                }
            )
    header = (
        f"{'model':<6} {'codec':<6} {'test accuracy':>20} {'vs none (points)':>17} {'payload B/epoch':>16} {'wire B/epoch':>13}"
    )
    print(f"{Path(args.data).name}, P = {args.ranks}, {args.seeds} seeds, {args.epochs} epochs")
    print(header)
    for entry in results:
        base = next(e["mean"] for e in results if e["model"] == entry["model"] and e["codec"] == "none")
        entry["difference_points"] = 100 * (entry["mean"] - base)
        print(
            f"{entry['model']:<6} {entry['codec']:<6} {100 * entry['mean']:>12.2f} +- {100 * entry['stdev']:>4.2f} "
            f"{entry['difference_points']:>+17.2f} {entry['bytes_per_epoch']:>16} {entry['wire_bytes_per_epoch']:>13.0f}"
        )
    out = ROOT / "bench" / "results" / "compressed_gnn.json"
    out.write_text(json.dumps({"data": args.data, "ranks": args.ranks, "epochs": args.epochs, "results": results}, indent=1))


if __name__ == "__main__":
    main()
