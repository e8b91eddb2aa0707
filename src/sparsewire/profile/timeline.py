"""A timeline picture of a trace (:mod:`sparsewire.profile.tracing`) for a person without a trace viewer:
ranks as rows, each phase a coloured bar on its rank's row (the whole multiply a pale band behind
them; in a training trace each layer's forward and backward and each propagation a grey strip
above), each message an arrow from its send's post on the sender's row to its receive's completion
on the receiver's, times on rank 0's clock."""

from __future__ import annotations

import json

from sparsewire._lib.atomic import save_figure

__all__ = ["plot_timeline"]

_COLOURS = {
    "local product": "tab:green",
    "pack": "tab:orange",
    "post receives": "tab:gray",
    "post sends": "tab:purple",
    "post send": "tab:purple",
    "post partition": "tab:purple",
    "wait": "tab:red",
    "wait sends": "tab:pink",
    "unpack": "tab:blue",
    "early multiply": "tab:cyan",
    "combine": "tab:olive",
}


def plot_timeline(trace_path: str, path: str, title: str, multiplies: int = 2) -> None:
    """Not collective. Draw the first ``multiplies`` multiplies of the trace at ``trace_path`` into ``path``; a trace
    of training (with ``training step`` spans) is drawn over its first traced training step instead, each layer's
    forward and backward and each propagation a labelled strip above its rank's row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    with open(trace_path) as handle:
        events = json.load(handle)["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    ranks = sorted({e["pid"] for e in events if e["ph"] != "M"} or {0})
    steps = sorted((e for e in spans if e["name"] == "training step"), key=lambda e: e["ts"])
    bands = steps or sorted((e for e in spans if e["name"] == "multiply"), key=lambda e: e["ts"])
    shown = 1 if steps else multiplies
    if bands:
        per_rank = {r: [b for b in bands if b["pid"] == r][:shown] for r in ranks}
        begin = min(b["ts"] for bs in per_rank.values() for b in bs)
        end = max(b["ts"] + b["dur"] for bs in per_rank.values() for b in bs)
    else:
        begin, end = min((e["ts"] for e in spans), default=0.0), max((e["ts"] + e["dur"] for e in spans), default=1.0)
    figure, axis = plt.subplots(figsize=(13, 1.2 + (1.4 if steps else 0.9) * len(ranks)))
    for event in spans:
        if event["ts"] + event["dur"] < begin or event["ts"] > end:
            continue
        row = ranks.index(event["pid"])
        start, width = (event["ts"] - begin) / 1e3, event["dur"] / 1e3
        if event["name"] == "multiply":
            axis.broken_barh([(start, width)], (row - 0.42, 0.84), color="0.92", zorder=0)
        elif event["name"] in _COLOURS:
            axis.broken_barh([(start, max(width, 1e-4))], (row - 0.3, 0.6), color=_COLOURS[event["name"]], zorder=1)
        elif event["name"] not in ("epoch", "training step"):  # a layer or a propagation: a strip above
            layer = event["name"].startswith("layer")
            axis.broken_barh([(start, width)], (row - (0.72 if layer else 0.56), 0.09), color="0.45" if layer else "0.7")
            if layer and width > (end - begin) / 1e3 / 40:  # "layer 1 backward" as "L1 bwd"
                words = event["name"].split()
                label = f"L{words[1]} {'fwd' if words[2] == 'forward' else 'bwd'}"
                axis.text(start + width / 2, row - 0.74, label, ha="center", va="bottom", fontsize=7, zorder=3)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    arrows = []
    for event in events:
        if event["ph"] != "f" or event["id"] not in starts:
            continue
        sent = starts[event["id"]]
        if sent["ts"] < begin or event["ts"] > end:
            continue
        arrows.append(int(event["id"].split(":")[0]))
        x0, x1 = (sent["ts"] - begin) / 1e3, (event["ts"] - begin) / 1e3
        y0, y1 = ranks.index(sent["pid"]), ranks.index(event["pid"])
        axis.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.7}, zorder=2)
    axis.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    axis.set_ylim(len(ranks) - 0.5, -0.95 if steps else -0.5)
    axis.set_xlabel("milliseconds (rank 0's clock)")
    axis.set_xlim(0, max((end - begin) / 1e3, 1e-3))
    used = [name for name in _COLOURS if any(e["name"] == name for e in spans)]
    handles = [Patch(color=_COLOURS[name], label=name) for name in used] + [Patch(color="0.92", label="multiply")]
    if steps:
        handles += [Patch(color="0.45", label="layer (L0 fwd, ...)"), Patch(color="0.7", label="propagation")]
    axis.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(ranks) < 3 else -0.12), ncol=6, fontsize=8)
    if steps:
        shown_what = f"the first traced training step ({len(set(arrows))} multiplies)"
    else:
        shown_what = "multiplies " + (", ".join(map(str, sorted(set(arrows)))) or "-")
    axis.set_title(f"{title}: {shown_what}; arrows: messages, send post to receive")
    figure.tight_layout()
    save_figure(figure, path, dpi=110)
    plt.close(figure)
