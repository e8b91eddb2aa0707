"""The partition advisor: every partitioner x strategy measured side by side, and a recommendation.

For the global matrix (no MPI), each partitioner of :mod:`sparsewire.partition` reorders and
splits A for P ranks; each strategy is planned on the result (:func:`~sparsewire.plan.stats.strategy_stats`).
A row reports total and inter-group bytes per multiply, messages, nonzeros and received bytes per
rank as max/mean, the predicted time under the topology's cost model (flat without one;
communication, plus local work where the topology has measured local rates), the setup seconds
(partitioning + planning, timed here) and the break-even point:

    break_even_multiplies = ceil((setup - setup_even) / (predicted_even - predicted))

against the ``even`` partition with the same strategy (0 for ``even`` itself; None when the row is
not faster per multiply, so it never pays off). The recommendation is the one ``--strategy auto`` would take
(:func:`~sparsewire.plan.cost.preferred`): the least predicted time, near ties (within 2%) going to
fewer steps, then fewer bytes.
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.atomic import save_figure
from sparsewire.errors import InputError
from sparsewire.partition import PARTITIONERS, nnz_imbalance, partition
from sparsewire.plan.cost import plan_steps, preferred
from sparsewire.plan.stats import predicted_seconds, strategy_stats
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy
from sparsewire.topology.model import Topology

__all__ = ["advise", "plot_advice"]


def advise(
    matrix: sp.sparray,
    ranks: int,
    *,
    topology: Topology | None = None,
    k: int = 32,
    element_bytes: int = 8,
    strategies: list[Strategy] | None = None,
    partitioners: list[str] | None = None,
    imbalance: float = 0.03,
    progress=None,
) -> dict:
    """Not collective. The advisor's table (module docstring) as a dict: ``ranks, k, rows``
    (one dict per partitioner x strategy with ``partition, strategy, total_bytes,
    inter_group_bytes, messages, steps, nnz_imbalance, bytes_imbalance, predicted_seconds,
    setup_seconds, break_even_multiplies``) and ``recommendation`` (``partition, strategy``)."""
    grouped = topology is not None and len(topology.levels) > 1
    if topology is not None:
        topology.groups(ranks)  # checks an explicit grouping against P
    model = topology or Topology.flat()
    strategies = strategies or [s for s in EXECUTABLE_STRATEGIES if grouped or not s.hierarchical]
    partitioners = partitioners or [p for p in PARTITIONERS if grouped or p != "metis-hier"]
    if "metis-hier" in partitioners and not grouped:
        raise InputError("metis-hier partitions into groups first; give --group-size G or a --topology with groups")
    rows = []
    for method in partitioners:
        if progress:
            progress(f"partitioning with {method} ...")
        chosen = partition(matrix, ranks, method, topology=topology, imbalance=imbalance)
        permuted = chosen.permute(matrix)
        balance = nnz_imbalance(permuted, chosen.rows)
        for strategy in strategies:
            started = time.perf_counter()
            stats = strategy_stats(permuted, chosen.rows, chosen.cols, strategy, k, element_bytes, model)
            plan_seconds = time.perf_counter() - started
            received = stats.recv_bytes_per_rank
            mean = float(received.mean()) if received.size else 0.0
            rows.append(
                {
                    "partition": method,
                    "strategy": strategy.value,
                    "total_bytes": int(stats.total_bytes),
                    "inter_group_bytes": int(stats.class_totals()["inter_group_bytes"]),
                    "messages": int(stats.messages),
                    "steps": plan_steps(stats),
                    "nnz_imbalance": balance,
                    "bytes_imbalance": float(received.max() / mean) if mean > 0 else 1.0,
                    "predicted_seconds": float(predicted_seconds(stats)),
                    "setup_seconds": chosen.seconds + plan_seconds,
                }
            )
    baseline = {r["strategy"]: r for r in rows if r["partition"] == "even"}
    for row in rows:
        even = baseline.get(row["strategy"])
        if even is None or row is even:
            row["break_even_multiplies"] = 0 if row is even else None
            continue
        gain = even["predicted_seconds"] - row["predicted_seconds"]
        extra = row["setup_seconds"] - even["setup_seconds"]
        row["break_even_multiplies"] = (0 if extra <= 0 else math.ceil(extra / gain)) if gain > 0 else None
    best = rows[preferred({i: (r["predicted_seconds"], r["total_bytes"], r["steps"]) for i, r in enumerate(rows)})]
    n_rows, n_cols = matrix.shape
    return {
        "matrix": {"n_rows": int(n_rows), "n_cols": int(n_cols), "nnz": int(sp.csr_array(matrix).nnz)},
        "ranks": ranks,
        "k": k,
        "topology": model.name,
        "rows": rows,
        "recommendation": {"partition": best["partition"], "strategy": best["strategy"]},
    }


def plot_advice(report: dict, path: str, title: str) -> None:
    """Not collective. Two bar charts, one bar per partitioner within each strategy's group: bytes
    per multiply and predicted time, the recommendation marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    partitioners = list(dict.fromkeys(r["partition"] for r in rows))
    width = 0.8 / len(partitioners)
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for axis, field, label in (
        (axes[0], "total_bytes", "bytes per multiply"),
        (axes[1], "predicted_seconds", "predicted seconds per multiply"),
    ):
        for index, method in enumerate(partitioners):
            values = [next(r[field] for r in rows if r["partition"] == method and r["strategy"] == s) for s in strategies]
            axis.bar(np.arange(len(strategies)) + index * width, values, width, label=method)
        axis.set_xticks(np.arange(len(strategies)) + 0.4 - width / 2, strategies)
        axis.set_ylabel(label)
        axis.set_yscale("log")
        axis.grid(axis="y", alpha=0.3)
    best = report["recommendation"]
    axes[0].legend(title="partition", fontsize=8)
    figure.suptitle(
        f"{title}: P = {report['ranks']}, k = {report['k']}, {report['topology']}; "
        f"recommended {best['partition']} + {best['strategy']}"
    )
    figure.tight_layout()
    save_figure(figure, path, dpi=110)
    plt.close(figure)
