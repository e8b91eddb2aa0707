"""What one rank pays to build its own plan at large P (issue 44), without starting P processes.

Under ``mpiexec`` every rank runs :func:`sparsewire.plan.plan.build_rank_plan_collective` on its own
rows; its only exchange for a flat strategy is one all-to-all of records. Here one rank p runs that
function unchanged on its rows of the matrix, with a stand-in communicator whose ``alltoall`` returns
what the other ranks would send p. Those boxes are made by the same function on each rank r that holds
a nonzero in p's columns (only those send p anything), stopped at its own all-to-all (so r's choice,
``joint``'s cover included, is the one r makes under MPI). The packed boxes are copied into p's receive
buffer inside ``Alltoallv``, as MPI writes them there, so receiving them counts; the network does not.

Per P and strategy: p's planning seconds (median of ``--repeat`` runs, a timer around the call) and its
peak of newly allocated memory (``tracemalloc``, which NumPy reports its buffers to; a separate run)
against the bytes of p's rows (CSR data, indices, indptr), the bytes the finished plan holds and those the
all-to-all delivers it; with
``--stages`` also the peak inside each planning stage and what is held after it. Writes
``bench/results/rank_planning.json``.

    .venv/bin/python bench/rank_planning.py --matrix rmat:22:16 --ranks 1024,4096,16384
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import pickle
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from common import ROOT

from sparsewire.distinct import distinct
from sparsewire.io import load_matrix
from sparsewire.partition import even_rows
from sparsewire.plan.plan import build_rank_plan_collective


class _Stopped(Exception):
    """A source rank reached its all-to-all: its boxes are taken, the rest of its planning is not needed."""


class SliceComm:
    """The parts of an mpi4py communicator that flat planning uses, for one rank of P: ``incoming`` holds the
    packed box each rank sends it (None where nothing); with ``target``, the rank is a source whose box for
    ``target`` is taken at its all-to-all."""

    def __init__(self, rank: int, size: int, incoming: list | None = None, target: int | None = None):
        self.rank, self.size, self.incoming, self.target, self.taken = rank, size, incoming, target, None
        self.send_counts = None

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's names)
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def allgather(self, value):
        return [value] * self.size  # every rank agrees (the inputs are consistent by construction)

    def Split(self, color: int, key: int):  # noqa: N802
        return self  # flat strategies make no group call; Free is all the planner asks of it

    def Free(self) -> None:  # noqa: N802
        pass

    def Alltoall(self, send_counts: np.ndarray, recv_counts: np.ndarray) -> None:  # noqa: N802
        self.send_counts = send_counts.copy()
        recv_counts[:] = [0 if box is None else box.size for box in (self.incoming or [None] * self.size)]

    def Alltoallv(self, send: list, receive: list) -> None:  # noqa: N802
        if self.target is not None:  # a source rank: keep what it sends the measured rank
            offsets = np.concatenate([[0], np.cumsum(self.send_counts)])
            self.taken = (
                send[0][offsets[self.target] : offsets[self.target + 1]].copy() if self.send_counts[self.target] else None
            )
            raise _Stopped
        parts = [box for box in self.incoming if box is not None]
        if parts:
            np.concatenate(parts, out=receive[0])  # what MPI writes into the receive buffer


def incoming_boxes(csr: sp.csr_array, csc: sp.csc_array, parts, rank: int, strategy: str) -> list:
    """What every other rank sends ``rank`` in the planner's all-to-all (None where nothing)."""
    start, stop = parts.range(rank)
    senders_rows = csc[:, start:stop].tocoo().row
    sources = distinct(np.asarray(parts.owner(senders_rows)))
    boxes = [None] * parts.n_parts
    for source in sources.tolist():
        if source == rank:
            continue
        comm = SliceComm(source, parts.n_parts, target=rank)
        try:
            build_rank_plan_collective(comm, csr[slice(*parts.range(source))], parts, parts, strategy)
        except _Stopped:
            boxes[source] = comm.taken
    return boxes


def check_against_serial() -> None:
    """The stand-in gives each rank the plan serial planning gives it (pickled bytes equal), on rmat:11:8:2 at
    P = 5 and 16, three ranks each, every flat strategy; exits otherwise."""
    from sparsewire.generators import from_spec
    from sparsewire.plan.plan import build_plan

    csr = from_spec("rmat:11:8:2")
    csc = sp.csc_array(csr)
    for ranks in (5, 16):
        parts = even_rows(csr.shape[0], ranks)
        for strategy in ("column", "row", "joint"):
            serial = build_plan(csr, parts, parts, strategy)
            for rank in (0, ranks // 2, ranks - 1):
                incoming = incoming_boxes(csr, csc, parts, rank, strategy)
                plan = build_rank_plan_collective(
                    SliceComm(rank, ranks, incoming), csr[slice(*parts.range(rank))], parts, parts, strategy
                )
                built = dataclasses.replace(plan, setup_exchange_bytes=(0, 0))  # what the all-to-all measured
                if pickle.dumps(built) != pickle.dumps(serial.ranks[rank]):
                    raise SystemExit(f"the stand-in's plan of rank {rank} at P = {ranks} ({strategy}) is not the serial one")
    print("stand-in checked: its plans equal serial planning's (rmat:11:8:2, P = 5 and 16, 3 ranks, 3 strategies)")


STAGES = {
    "split_local_rows": "split into diagonal block and off-diagonal nonzeros",
    "request_records": "the rank's requests (with what it serves)",
    "unique_records": "their distinct records",
    "exchange_boxes": "the all-to-all (packed boxes, receive buffer, unpacked records)",
    "assemble": "assembling the plan",
}


@contextlib.contextmanager
def stage_memory(log: list):
    """While inside, each stage of :mod:`sparsewire.plan.plan` (``STAGES``) appends (stage, peak, held): tracemalloc's
    peak inside it and its current memory after it (tracemalloc must be tracing)."""
    import sparsewire.plan.plan as planner

    originals = {name: getattr(planner, name) for name in STAGES}

    def watched(name, function):
        def stage(*args, **kwargs):
            tracemalloc.reset_peak()
            result = function(*args, **kwargs)
            held, peak = tracemalloc.get_traced_memory()
            log.append((name, peak, held))
            return result

        return stage

    for name, function in originals.items():
        setattr(planner, name, watched(name, function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(planner, name, function)


def plan_bytes(value) -> int:
    """Bytes of the arrays a plan holds (its matrices, index arrays and exchanges; not the shared partitions)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, sp.sparray):
        return value.data.nbytes + value.indices.nbytes + value.indptr.nbytes
    if isinstance(value, tuple):
        return sum(plan_bytes(v) for v in value)
    if dataclasses.is_dataclass(value):
        skipped = ("row_partition", "col_partition", "groups")
        return sum(plan_bytes(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in skipped)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrix", default="rmat:22:16", help="matrix or generator spec (default: %(default)s)")
    parser.add_argument("--ranks", default="1024,4096,16384", help="P values (default: %(default)s)")
    parser.add_argument("--strategies", default="column,row,joint", help="flat strategies (default: %(default)s)")
    parser.add_argument("--rank", default="busiest", help="the measured rank: a number or 'busiest' (most nonzeros)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per point, median (default: %(default)s)")
    parser.add_argument("--stages", action="store_true", help="also each planning stage's peak and held memory")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "rank_planning.json"))
    args = parser.parse_args()

    check_against_serial()
    started = time.perf_counter()
    csr = sp.csr_array(load_matrix(args.matrix))
    csc = sp.csc_array(csr)
    print(f"{args.matrix}: {csr.shape[0]} x {csr.shape[1]}, {csr.nnz:,} nonzeros ({time.perf_counter() - started:.1f} s)")
    results = []
    for ranks in [int(v) for v in args.ranks.split(",")]:
        parts = even_rows(csr.shape[0], ranks)
        rank = int(np.argmax(np.diff(csr.indptr[parts.offsets]))) if args.rank == "busiest" else int(args.rank)
        local = csr[slice(*parts.range(rank))]
        rows_bytes = local.data.nbytes + local.indices.nbytes + local.indptr.nbytes
        for strategy in args.strategies.split(","):
            made = time.perf_counter()
            incoming = incoming_boxes(csr, csc, parts, rank, strategy)
            made = time.perf_counter() - made
            times = []
            for _ in range(args.repeat):
                comm = SliceComm(rank, ranks, incoming)
                began = time.perf_counter()
                plan = build_rank_plan_collective(comm, local, parts, parts, strategy)
                times.append(time.perf_counter() - began)
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            stages: list = []
            with stage_memory(stages) if args.stages else contextlib.nullcontext():
                plan = build_rank_plan_collective(SliceComm(rank, ranks, incoming), local, parts, parts, strategy)
            peak = max([tracemalloc.get_traced_memory()[1], *(stage_peak for _, stage_peak, _ in stages)]) - before
            tracemalloc.stop()
            sources = sum(box is not None for box in incoming)
            entry = {
                "ranks": ranks,
                "rank": rank,
                "strategy": strategy,
                "local_nnz": int(local.nnz),
                "rows_bytes": int(rows_bytes),
                "sources": sources,
                "seconds": statistics.median(times),
                "peak_bytes": int(peak),
                "plan_bytes": plan_bytes(plan),
                "received_bytes": int(sum(box.nbytes for box in incoming if box is not None)),
                "stages": [
                    {"stage": name, "peak_bytes": int(p - before), "held_bytes": int(h - before)} for name, p, h in stages
                ],
                "sent_rows": int(sum(e.send_counts.sum() for e in plan.exchanges)),
                "received_rows": int(sum(e.recv_counts.sum() for e in plan.exchanges)),
            }
            results.append(entry)
            print(
                f"P={ranks:6d} rank {rank:5d} {strategy:6s} nnz {entry['local_nnz']:7,d} ({rows_bytes / 1024:7.1f} KiB), "
                f"{sources:5d} senders: {entry['seconds'] * 1e3:8.1f} ms, peak {peak / 1024:9.1f} KiB "
                f"= {peak / rows_bytes:6.1f}x its rows  (boxes made in {made:.1f} s)",
                flush=True,
            )
            print(
                f"    the finished plan holds {entry['plan_bytes'] / rows_bytes:.2f}x its rows; "
                f"the all-to-all delivers it {entry['received_bytes'] / rows_bytes:.2f}x"
            )
            for stage in entry["stages"]:
                print(
                    f"    {STAGES[stage['stage']]:65s} peak {stage['peak_bytes'] / rows_bytes:5.1f}x, "
                    f"held after {stage['held_bytes'] / rows_bytes:5.1f}x"
                )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"arguments": vars(args), "points": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
