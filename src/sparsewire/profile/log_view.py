"""A -log_view-style summary of traced multiplies: per phase, over the ranks, and the POP efficiencies.

Per phase (PETSc's ``-log_view`` columns, ``../shared/research/observability.md``): Count (the most
calls on a rank), Time max (seconds, the slowest rank's total), Max/Min ratio (slowest / fastest
rank's time; None when some rank never ran it), Avg (mean over the ranks), %T (Time max / the
slowest rank's multiply time; in a traced training, its epoch time), the messages posted in it,
their average length and bytes (all ranks). The whole (POP metrics, Caliper's min/max/avg per rank):

* useful time of a rank = its pack, unpack, early multiply, local product and combine time;
* load-balance efficiency = mean useful / max useful;
* communication efficiency = max useful / runtime (runtime: the slowest rank's multiply time);
* parallel efficiency = their product.

The communication time per multiply (the slowest rank's posts and waits) stands beside the plan's
predicted communication time. The footer measures, in this run, what the numbers cost: one clock
read and one record (CPU time): a span of the traced parts, or a lap where a summary alone was
recorded in the schedule (:mod:`~sparsewire.profile.laps`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["summarize", "format_log_view", "COMPUTE_PHASES"]

#: Phases that compute (POP's useful time); the rest post or wait.
COMPUTE_PHASES = ("pack", "unpack", "early multiply", "local product", "combine")
_ORDER = (
    "epoch",
    "training step",
    "evaluate",
    "multiply",
    "local product",
    "pack",
    "post receives",
    "post sends",
    "post send",
    "encode",  # (inside post sends / post send: a payload codec's coding)
    "wait",
    "decode",  # (inside wait)
    "unpack",
)
_ORDER += ("early multiply", "wait sends", "combine")


def summarize(comm, tracer, costs: tuple[float, float], predicted_seconds: float | None = None) -> dict | None:
    """Collective. The summary of ``tracer``'s window (module docstring) on rank 0 (None elsewhere); ``costs``:
    this rank's seconds of a clock read and of a recorded span (:func:`~sparsewire.profile.tracing.measure_costs`)."""
    timer, record = costs
    mine = {
        "phases": tracer.phases,
        "sent": tracer.sent,
        "multiplies": tracer.multiplies,
        "epochs": tracer.epochs,
        "timer_seconds": timer,
        "record_seconds": record,
        "record": "lap" if tracer.records_laps else "span",
    }
    ranks = comm.gather(mine, root=0)
    if comm.Get_rank() != 0:
        return None
    ran = {n for r in ranks for n, (count, _) in r["phases"].items() if count}  # (the traced parts list every phase)
    names = [n for n in _ORDER if n in ran]
    names += sorted(ran - set(names))
    seconds = {n: np.array([r["phases"].get(n, [0, 0])[1] / 1e9 for r in ranks]) for n in names}
    runtime = float(seconds["multiply"].max()) if "multiply" in seconds else 0.0
    base = "epoch" if "epoch" in seconds else "multiply"  # what %T divides by
    whole = float(seconds[base].max()) if base in seconds else 0.0
    rows = []
    for name in names:
        times = seconds[name]
        messages = sum(r["sent"].get(name, [0, 0])[0] for r in ranks)
        size = sum(r["sent"].get(name, [0, 0])[1] for r in ranks)
        rows.append(
            {
                "phase": name,
                "count": int(max(r["phases"].get(name, [0, 0])[0] for r in ranks)),
                "time_max": float(times.max()),
                "max_min_ratio": float(times.max() / times.min()) if times.min() > 0 else None,
                "avg": float(times.mean()),
                "percent_time": 100 * float(times.max()) / whole if whole else None,
                "messages": int(messages),
                "average_length": size / messages if messages else None,
                "bytes": int(size),
            }
        )
    useful = sum((seconds[n] for n in COMPUTE_PHASES if n in seconds), np.zeros(len(ranks)))
    communication = sum((seconds[n] for n in names if n.startswith(("post", "wait"))), np.zeros(len(ranks)))
    multiplies = max(r["multiplies"] for r in ranks)
    load_balance = float(useful.mean() / useful.max()) if useful.max() > 0 else None
    communication_efficiency = float(useful.max() / runtime) if runtime else None
    return {
        "multiplies": int(multiplies),
        "epochs": int(max(r["epochs"] for r in ranks)),
        "percent_of": base,
        "ranks": len(ranks),
        "phases": rows,
        "runtime_seconds": runtime,
        "load_balance_efficiency": load_balance,
        "communication_efficiency": communication_efficiency,
        "parallel_efficiency": None
        if None in (load_balance, communication_efficiency)
        else load_balance * communication_efficiency,
        "communication_seconds_per_multiply": float(communication.max()) / multiplies if multiplies else None,
        "predicted_communication_seconds_per_multiply": predicted_seconds,
        "per_rank": [{name: float(seconds[name][r]) for name in names} for r in range(len(ranks))],
        "timer_seconds": max(r["timer_seconds"] for r in ranks),
        "record_seconds": max(r["record_seconds"] for r in ranks),
        "record": ranks[0]["record"],
    }


def _number(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def format_log_view(summary: dict, title: str) -> str:
    """Not collective. The summary as PETSc's ``-log_view`` prints it: a table and the efficiencies and costs."""
    from sparsewire._lib.text import format_table

    headers = ["phase", "count", "time max (s)", "max/min", "avg (s)", "%T", "messages", "avg length", "bytes"]
    table = [
        [
            row["phase"],
            row["count"],
            f"{row['time_max']:.3e}",
            _number(row["max_min_ratio"], ".2f"),
            f"{row['avg']:.3e}",
            _number(row["percent_time"], ".1f"),
            row["messages"],
            _number(row["average_length"], ".0f"),
            row["bytes"],
        ]
        for row in summary["phases"]
    ]
    predicted = summary["predicted_communication_seconds_per_multiply"]
    epochs = f" in {summary['epochs']} epochs" if summary["epochs"] else ""
    lines = [
        f"{title}: {summary['multiplies']} multiplies{epochs} on {summary['ranks']} ranks, summed over them "
        f"(%T of the {summary['percent_of']} time)",
        format_table(headers, table),
        f"load balance {_number(summary['load_balance_efficiency'], '.3f')}, communication efficiency "
        f"{_number(summary['communication_efficiency'], '.3f')}, parallel efficiency "
        f"{_number(summary['parallel_efficiency'], '.3f')} (POP; useful = {', '.join(COMPUTE_PHASES)})",
        f"communication per multiply {_number(summary['communication_seconds_per_multiply'], '.3e')} s measured (slowest "
        f"rank's posts and waits), {_number(predicted, '.3e')} s predicted",
        f"cost of the numbers: {summary['timer_seconds'] * 1e9:.0f} ns a clock read, {summary['record_seconds'] * 1e9:.0f} ns "
        f"a recorded {summary['record']} (CPU time, measured in this run)",
    ]
    return "\n".join(lines)
