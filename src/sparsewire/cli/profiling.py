"""The profiling flags (docs/profiling.md): ``--trace``, ``--trace-window``, ``--log-view`` and
``--plot`` on ``spmm``, ``eigs``, ``spgemm`` and ``gcn`` (whose window counts epochs), and
``--traffic-map`` on the SpMM commands; their checks before MPI starts, the trace's fields of the
JSON, and what is printed and drawn after the runs."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from sparsewire.cli.common import check_plot_path, check_writable, write_output
from sparsewire.errors import InputError

__all__ = [
    "add_profiling_arguments",
    "check_profiling_arguments",
    "profiling_request",
    "trace_window",
    "trace_fields",
    "print_profiling",
    "write_profiling_pictures",
]


def add_profiling_arguments(
    parser: argparse.ArgumentParser, run: str, each: str, file_name: str, unit: str = "multiplies", traffic_map: bool = True
) -> None:
    """The flags; ``run`` names what one trace covers (``run``), ``each`` the plural, ``file_name`` the trace's,
    ``unit`` what the window counts (``multiplies`` or ``epochs``); ``traffic_map``: add ``--traffic-map``."""
    first = "which also builds the plans and compiles the kernels" if unit == "epochs" else "which also compiles the kernels"
    parser.add_argument(
        "--trace",
        metavar="DIR",
        help=f"write a Chrome trace (Perfetto, chrome://tracing) of {each} to {file_name}: every rank's pack, post, "
        "wait, unpack, product and combine spans"
        + (", each epoch, layer forward and backward and propagation" if unit == "epochs" else "")
        + ", each message and an arrow from its send to its receive, clocks aligned to rank 0",
    )
    parser.add_argument(
        "--trace-window",
        metavar="A:B",
        default="1:",
        help=f"trace (and summarise) {unit} A to B-1 of {each}; 0 is the first, {first} (default: 1:)",
    )
    parser.add_argument(
        "--log-view",
        action="store_true",
        help=f"print for {each} a -log_view-style summary: per phase count, time max, max/min over ranks, avg, %%T, "
        "messages, average length, bytes; load-balance and communication efficiency (POP)"
        + ("; measured beside predicted communication" if traffic_map else "")
        + " (also in the JSON)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        help=f"draw the first {run}'s timeline (ranks as rows, phases as bars, messages as arrows) into FILE (.png, "
        ".svg or .pdf); traces (into --trace DIR, or a temporary folder)",
    )
    if traffic_map:
        parser.add_argument(
            "--traffic-map",
            metavar="FILE",
            help=f"a heat map of bytes and messages per (source, destination) rank pair of the first {run}'s last "
            "multiply, as MPI counted them, groups outlined (.png, .svg or .pdf); the JSON has the map",
        )


def trace_window(text: str) -> tuple[int, int | None]:
    """``--trace-window A:B`` (B may be empty: to the end) as (A, B)."""
    first, _, stop = text.partition(":")
    try:
        window = (int(first or 0), int(stop) if stop.strip() else None)
    except ValueError:
        raise InputError(f"--trace-window {text!r}: give A:B, whole numbers, e.g. 1:5 (B may be left out)") from None
    if window[0] < 0 or (window[1] is not None and window[1] <= window[0]):
        raise InputError(f"--trace-window {text!r}: give 0 <= A < B")
    return window


def _tracing(args: argparse.Namespace) -> bool:
    return args.trace is not None or args.log_view or args.plot is not None


def check_profiling_arguments(args: argparse.Namespace) -> None:
    """Before MPI starts: the pictures' paths, the window and the trace folder."""
    if getattr(args, "traffic_map", None) is not None:
        check_plot_path(args.traffic_map, "--traffic-map")
    if args.plot is not None:
        check_plot_path(args.plot, "--plot")
    if not _tracing(args):
        return
    trace_window(args.trace_window)
    if args.trace is not None and os.path.exists(args.trace) and not os.path.isdir(args.trace):
        raise InputError(f"--trace {args.trace} is a file; give a folder (it is made when missing)")
    if args.trace is not None:  # a folder made when the run ends, or one that exists
        check_writable(os.path.join(args.trace, "trace.json") if os.path.isdir(args.trace) else args.trace, "--trace")


def profiling_request(args: argparse.Namespace, comm) -> tuple[str | None, tuple, bool] | None:
    """Collective. (trace folder or None, window, summary) for the sessions, or None: nothing traced. --plot alone
    traces into a temporary folder of rank 0's."""
    if not _tracing(args):
        return None
    folder = args.trace
    if folder is None and args.plot is not None:
        folder = comm.bcast(tempfile.mkdtemp(prefix="sparsewire-trace-") if comm.Get_rank() == 0 else None)
    return folder, trace_window(args.trace_window), args.log_view


def trace_fields(tracer) -> dict:
    """Rank 0: the JSON's ``log_view`` (the summary) and ``trace`` (path, events, truncated, clock residual)."""
    fields = {}
    if tracer.summary is not None:
        fields["log_view"] = tracer.summary
    if tracer.metadata is not None:
        ranks = tracer.metadata["ranks"]
        fields["trace"] = {
            "path": tracer.path,
            "events": sum(r["events"] for r in ranks),
            "truncated": any(r["truncated"] for r in ranks),
            "clock_residual_us": max(r["residual_us"] for r in ranks),
        }
    return fields


def print_profiling(run: dict, title: str) -> None:
    """Rank 0, after the table: the run's summary and a warning when its trace hit the event limit."""
    from sparsewire.profile.log_view import format_log_view

    if "log_view" in run:
        print("\n" + format_log_view(run["log_view"], title))
    if run.get("trace", {}).get("truncated"):
        print(
            f"sparsewire: warning: the trace {run['trace']['path']} stopped at its event limit; trace a smaller --trace-window",
            file=sys.stderr,
        )


def write_profiling_pictures(args: argparse.Namespace, first: dict, title: str, topology=None) -> None:
    """Rank 0: the traffic map and the timeline of the ``first`` run (and the temporary trace folder removed)."""
    import numpy as np

    if getattr(args, "traffic_map", None) is not None:
        from sparsewire.profile.traffic import TrafficMap, plot_traffic

        if "bytes" not in first["traffic"]:
            raise InputError(f"--traffic-map draws up to 64 ranks (this run has {first['ranks']}); use the JSON's per_link_class")
        traffic = TrafficMap(np.array(first["traffic"]["bytes"]), np.array(first["traffic"]["messages"]))
        drawn = f"{title} (as MPI counted it)"
        write_output(args.traffic_map, "--traffic-map", lambda target: plot_traffic(traffic, topology, target, drawn))
        if not args.json:
            print(f"traffic map written to {args.traffic_map}", file=sys.stderr)
    if args.plot is not None:
        from sparsewire.profile.timeline import plot_timeline

        write_output(args.plot, "--plot", lambda target: plot_timeline(first["trace"]["path"], target, title))
        if args.trace is None:
            shutil.rmtree(os.path.dirname(first["trace"]["path"]), ignore_errors=True)
        if not args.json:
            print(f"timeline written to {args.plot}", file=sys.stderr)
