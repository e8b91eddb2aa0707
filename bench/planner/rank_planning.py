"""What one rank pays to build its own plan at large P, without starting P processes.

Under ``mpiexec`` every rank runs :func:`sparsewire.plan.plan.build_rank_plan_collective` on its own
rows; for a flat strategy that is :mod:`sparsewire.plan.flat`, whose only communication is one ``Alltoall``
of counts and four ``Alltoallv``. Here one rank p runs that function unchanged on its rows of the matrix,
with a stand-in communicator whose exchange delivers what the other ranks would send p. That is made by
the same function on each rank r that holds a nonzero in p's columns (only those send p anything), run
with a stand-in that keeps what r sends p (so r's choice, ``joint``'s cover included, is the one r makes
under MPI). What arrives is copied into p's buffers inside ``Alltoallv``, as MPI writes it there, and
each call allocates as much as the counts and displacements MPI's call takes (four C-int arrays of P, in
case mpi4py converts them), so both count; the network does not.

Per P and strategy: p's planning seconds (median of ``--repeat`` runs, a timer around the call; also without
the time spent inside the stand-in's collectives, whose Python loops over P stand for MPI's) and its
peak of newly allocated memory (``tracemalloc``, which NumPy reports its buffers to; a separate run)
against the bytes of p's rows (CSR data, indices, indptr), the bytes the finished plan holds and those the
exchange delivers it. First checks the stand-in's plans equal serial planning's (the records planner). Writes
``bench/results/rank_planning.json``.

    .venv/bin/python bench/planner/rank_planning.py --matrix rmat:22:16 --ranks 1024,4096,16384
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/common.py
from common import ROOT  # noqa: E402

from sparsewire.io import load_matrix
from sparsewire.partition import even_rows
from sparsewire.plan import build_rank_plan_collective


class SliceComm:
    """The parts of an mpi4py communicator that flat planning (:mod:`sparsewire.plan.flat`) uses, for one rank of P.
    ``incoming`` holds, per rank, what it sends this one: its row of counts and its segment of every
    ``Alltoallv`` in call order (None where nothing). With ``target``, the rank is a source: it receives
    nothing, and what it sends ``target`` is kept in ``taken``. Each ``Alltoallv`` also allocates four C-int
    arrays of P, what its counts and displacements take if mpi4py converts them, so that they count."""

    def __init__(self, rank: int, size: int, incoming: list | None = None, target: int | None = None):
        self.rank, self.size, self.incoming, self.target = rank, size, incoming, target
        self.taken: list = []
        self.calls = 0
        self.seconds = 0.0  # spent inside the stand-in's collectives (its Python loop over P; MPI's is in C)

    def Get_rank(self) -> int:  # noqa: N802 (mpi4py's names)
        return self.rank

    def Get_size(self) -> int:  # noqa: N802
        return self.size

    def allgather(self, value):
        return [value] * self.size  # every rank agrees (the inputs are consistent by construction)

    def allreduce(self, value, op=None):
        return value  # (the planner reduces flags every rank computes alike or only this one raises)

    def Alltoall(self, send: np.ndarray, receive: np.ndarray) -> None:  # noqa: N802
        began = time.perf_counter()
        self._alltoall(send, receive)
        self.seconds += time.perf_counter() - began

    def Alltoallv(self, send: list, receive: list) -> None:  # noqa: N802
        began = time.perf_counter()
        self._alltoallv(send, receive)
        self.seconds += time.perf_counter() - began

    def _alltoall(self, send: np.ndarray, receive: np.ndarray) -> None:
        receive[...] = 0
        if self.target is not None:
            self.taken.append(send[self.target].copy())
            return
        for source, parts in enumerate(self.incoming):
            if parts is not None:
                receive[source] = parts[0]

    def _alltoallv(self, send: list, receive: list) -> None:
        c_ints = np.empty((4, self.size), np.intc)  # noqa: F841 (the counts and displacements as C ints)
        if self.target is not None:  # a source rank: keep what it sends the measured rank
            buffer, (counts, displacements), _ = send
            start = int(displacements[self.target])
            self.taken.append(buffer[start : start + int(counts[self.target])].copy())
            return
        self.calls += 1
        buffer, (counts, displacements), _ = receive
        for source, parts in enumerate(self.incoming):
            if parts is not None and parts[self.calls].size:
                start = int(displacements[source])
                buffer[start : start + parts[self.calls].size] = parts[self.calls]  # what MPI writes there


def incoming_parts(csr: sp.csr_array, csc: sp.csc_array, rows, cols, rank: int, strategy: str) -> list:
    """What every other rank sends ``rank`` in the planner's exchange (None where nothing): its counts and its
    segment of every ``Alltoallv``, from the same function run on that rank's rows (partitions ``rows`` of the
    rows, ``cols`` of the columns)."""
    start, stop = cols.range(rank)
    senders_rows = csc[:, start:stop].tocoo().row
    sources = np.unique(np.asarray(rows.owner(senders_rows)))
    incoming = [None] * rows.n_parts
    for source in sources.tolist():
        if source == rank:
            continue
        comm = SliceComm(source, rows.n_parts, target=rank)
        build_rank_plan_collective(comm, csr[slice(*rows.range(source))], rows, cols, strategy)
        incoming[source] = comm.taken
    return incoming


def check_against_serial() -> None:
    """The stand-in gives each rank the plan serial planning gives it (``RankPlan.equals``), on rmat:11:8:2 at
    P = 5 and 16, three ranks each, every flat strategy; exits otherwise."""
    from sparsewire.io import from_spec
    from sparsewire.plan import build_plan

    csr = from_spec("rmat:11:8:2")
    csc = sp.csc_array(csr)
    for ranks in (5, 16):
        parts = even_rows(csr.shape[0], ranks)
        for strategy in ("column", "row", "joint"):
            serial = build_plan(csr, parts, parts, strategy)
            for rank in (0, ranks // 2, ranks - 1):
                incoming = incoming_parts(csr, csc, parts, parts, rank, strategy)
                plan = build_rank_plan_collective(
                    SliceComm(rank, ranks, incoming), csr[slice(*parts.range(rank))], parts, parts, strategy
                )
                if not plan.equals(serial.ranks[rank]):
                    raise SystemExit(f"the stand-in's plan of rank {rank} at P = {ranks} ({strategy}) is not the serial one")
    print("stand-in checked: its plans equal serial planning's (rmat:11:8:2, P = 5 and 16, 3 ranks, 3 strategies)")


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
            incoming = incoming_parts(csr, csc, parts, parts, rank, strategy)
            made = time.perf_counter() - made
            times, delivery = [], []
            for _ in range(args.repeat):
                comm = SliceComm(rank, ranks, incoming)
                began = time.perf_counter()
                plan = build_rank_plan_collective(comm, local, parts, parts, strategy)
                times.append(time.perf_counter() - began)
                delivery.append(comm.seconds)
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            plan = build_rank_plan_collective(SliceComm(rank, ranks, incoming), local, parts, parts, strategy)
            peak = tracemalloc.get_traced_memory()[1] - before
            tracemalloc.stop()
            sources = sum(parts is not None for parts in incoming)
            entry = {
                "ranks": ranks,
                "rank": rank,
                "strategy": strategy,
                "local_nnz": int(local.nnz),
                "rows_bytes": int(rows_bytes),
                "sources": sources,
                "seconds": statistics.median(times),
                "planning_seconds": statistics.median(t - d for t, d in zip(times, delivery)),
                "peak_bytes": int(peak),
                "plan_bytes": plan_bytes(plan),
                "received_bytes": int(sum(part.nbytes for parts in incoming if parts is not None for part in parts[1:])),
                "sent_rows": int(sum(e.send_counts.sum() for e in plan.exchanges)),
                "received_rows": int(sum(e.recv_counts.sum() for e in plan.exchanges)),
            }
            results.append(entry)
            print(
                f"P={ranks:6d} rank {rank:5d} {strategy:6s} nnz {entry['local_nnz']:7,d} ({rows_bytes / 1024:7.1f} KiB), "
                f"{sources:5d} senders: {entry['seconds'] * 1e3:8.1f} ms "
                f"({entry['planning_seconds'] * 1e3:.1f} outside the stand-in's collectives), peak {peak / 1024:9.1f} KiB "
                f"= {peak / rows_bytes:6.1f}x its rows  (incoming made in {made:.1f} s)",
                flush=True,
            )
            print(
                f"    the finished plan holds {entry['plan_bytes'] / rows_bytes:.2f}x its rows; "
                f"the exchange delivers it {entry['received_bytes'] / rows_bytes:.2f}x"
            )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"arguments": vars(args), "points": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
