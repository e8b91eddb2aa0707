"""How much of a stream over the links hides the work the ranks do beside it, every rank at once: the cost model's
two overlap fractions (:func:`~sparsewire.plan.cost.predicted_seconds`), measured by ``calibrate --network``
(:func:`~sparsewire.calibration.network.measure_network`) with the executor's CSR kernel as the work. Both size the
stream to cross in about the work's time and take the fraction from the medians of the stream alone, the work alone
and both (:func:`hidden_fraction`): :func:`stream_overlap` with the kernel in one call, as a rank multiplies its
diagonal block while the messages cross, :func:`piece_overlap` with the stream in pieces and a row range of the
kernel after each, as the overlap schedule applies the messages it cuts.
"""

from __future__ import annotations

import statistics

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import wait_all
from sparsewire.errors import InputError

__all__ = ["hidden_fraction", "stream_overlap", "piece_overlap"]

_TAG = 6140


def hidden_fraction(stream: float, work: float, together: float) -> float:
    """Not collective. The share of the shorter of a stream and a piece of work (seconds each alone) that hides
    behind the longer when both run at once (``together`` seconds): ``(stream + work - together) / min(stream,
    work)``, clipped to [0, 1] (1: ``together = max``; 0: ``together >= stream + work``)."""
    if min(stream, work) <= 0:
        raise InputError(f"a stream and a work of positive length hide behind each other (got {stream!r}, {work!r})")
    return float(min(1.0, max(0.0, (stream + work - together) / min(stream, work))))


def _kernel(sharing: int) -> tuple[bool, object, object, np.ndarray, np.ndarray, int]:
    """The executor's CSR kernel as a rank of a node of ``sharing`` ranks runs it (R-MAT of the local rates, k = 32,
    float64, the rank's default threads): whether its waits yield, the matrix, the kernel's operand, B, C and the
    threads."""
    from sparsewire._lib.cores import default_threads, oversubscribed
    from sparsewire.calibration.compute import benchmark_matrix, kernel_block, kernel_operand

    threads = default_threads(sharing)
    matrix = benchmark_matrix()
    dense, out = kernel_block(matrix.shape, 32, np.float64)
    return oversubscribed(sharing, threads), matrix, kernel_operand(matrix, np.float64, threads, sharing), dense, out, threads


def _pieces(nbytes: int) -> int:
    """Pieces of :data:`~sparsewire.exec.message_rows.PIECE_BYTES` a message of ``nbytes`` is cut into (one at least)."""
    from sparsewire.exec.message_rows import PIECE_BYTES

    return max(1, -(-nbytes // PIECE_BYTES))


def _taking_turns(timed, rate: float, flows: list[tuple[int, int]], repeat: int) -> dict:
    """Collective. ``timed(stream, compute, outgoing, incoming)`` (the slowest rank's seconds) once to warm the kernel,
    three times alone to size the message to cross in the work's time at ``rate`` over ``flows``, once to make the
    connections, then ``repeat`` turns of the stream alone, the work alone and both: the medians and their
    :func:`hidden_fraction`."""
    empty = np.empty(0, np.uint8)
    timed(False, True, empty, empty)  # compiled, pages touched
    alone = statistics.median([timed(False, True, empty, empty) for _ in range(3)])
    nbytes = int(max(1 << 16, alone * rate / len(flows)))
    outgoing, incoming = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    timed(True, False, outgoing, incoming)  # connections made
    times: dict[str, list[float]] = {"stream": [], "work": [], "both": []}
    for _ in range(repeat):
        times["stream"].append(timed(True, False, outgoing, incoming))
        times["work"].append(timed(False, True, outgoing, incoming))
        times["both"].append(timed(True, True, outgoing, incoming))
    c, w, b = (statistics.median(times[name]) for name in ("stream", "work", "both"))
    return {
        "fraction": hidden_fraction(c, w, b),
        "message_bytes": nbytes,
        "stream_seconds": c,
        "work_seconds": w,
        "together_seconds": b,
        "repeat": repeat,
    }


def stream_overlap(comm: MPI.Comm, flows: list[tuple[int, int]], rate: float, sharing: int, repeat: int) -> dict:
    """Collective. How much of a stream over the links a computing rank hides, every rank at once, as the overlapping modes
    run a multiply (:class:`~sparsewire.exec.schedules.messages.OverlapSchedule`): each rank posts its receive and
    its send of ``flows`` (one message each), then computes (the executor's CSR kernel on the R-MAT of the local
    rates, k = 32; in pieces with ``MPI_Iprobe`` between them where the executor makes them,
    :func:`~sparsewire.exec.combine.progress_piece_bounds`, else whole) and waits. The message is sized to cross
    in about the work's time at ``rate`` (bytes per second; :func:`~sparsewire.calibration.network.measure_network`
    passes the aggregate of all nodes' links, measured over every rank's flows to the other nodes, which on 4x1 at
    5 Gbit/s carry more than the ring these ``flows`` are, so there the stream outlasts the work). Taking turns ``repeat``
    times, the slowest rank's time from a barrier of the stream alone ``c``, the work alone ``w`` and both ``b``;
    from their medians the fraction ``(c + w - b) / min(c, w)``, within [0, 1] (1: the shorter hides whole
    behind the longer, ``b = max(c, w)``; 0: they add), on every rank.

    Why: on the emulated cluster, where the two cores that compute also move the bytes through the network stack,
    the overlapping modes ran no faster than ``bulk``, while the cost model had hidden the link whole behind the
    diagonal block (docs/design-decisions.md, "Cost model and the link")."""
    from sparsewire.exec.combine import multiply_in_pieces, progress_piece_bounds
    from sparsewire.kernels import compiled as kernels

    rank = comm.Get_rank()
    yielding, matrix, operand, dense, out, threads = _kernel(sharing)
    # as the executor: pieces on one thread where the node's cores are not all taken by ranks
    bounds = None if yielding or threads > 1 else progress_piece_bounds(matrix.indptr, dense.shape[1])

    def work() -> None:
        if bounds is None:
            kernels.multiply(operand, dense, out)
        else:
            multiply_in_pieces(kernels, operand, dense, out, bounds, lambda: comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG))

    def timed(stream: bool, compute: bool, outgoing: np.ndarray, incoming: np.ndarray) -> float:
        wait_all([comm.Ibarrier()], yielding=yielding)
        started = MPI.Wtime()
        requests = []
        if stream:
            requests = [comm.Irecv(incoming, s, _TAG) for s, r in flows if r == rank]
            requests += [comm.Isend(outgoing, r, _TAG) for s, r in flows if s == rank]
        if compute:
            work()
        wait_all(requests, yielding=yielding)
        return comm.allreduce(MPI.Wtime() - started, op=MPI.MAX)

    return {**_taking_turns(timed, rate, flows, repeat), "in_pieces": bounds is not None}


def piece_overlap(comm: MPI.Comm, flows: list[tuple[int, int]], rate: float, sharing: int, repeat: int) -> dict:
    """Collective. How much of a stream in pieces hides the work done between them, every rank at once, as the overlap
    schedule sends and applies the messages it cuts (:mod:`~sparsewire.exec.message_rows`): each rank posts the
    receives and sends of ``flows``, each message cut into pieces of
    :data:`~sparsewire.exec.message_rows.PIECE_BYTES`, then waits for its incoming pieces in order and after each
    multiplies the next row range of the executor's CSR kernel (the R-MAT of the local rates, k = 32, its rows split
    into as many ranges as the message has pieces), then waits for its sends. Sized and timed as :func:`stream_overlap`
    (stream alone ``c``, the work's row ranges alone ``w``, both ``b``, medians of ``repeat`` turns), the fraction
    ``(c + w - b) / min(c, w)`` within [0, 1].

    Why apart from :func:`stream_overlap`, whose kernel runs in one call where the cores are all taken by ranks: on the
    emulated 4 nodes x 1 rank at 1 Gbit/s the stream stopped while a rank ran one long call (hidden 0.00-0.20 of the
    shorter, with the stream whole or in pieces; 0.00-0.08 with the work a half or a third of it), while work between
    pieces hid 0.25-0.32 of the shorter with the two as long, 0.65-0.69 with the work half the stream and all of it with a
    third: the cores then take ``(1 - fraction)`` of the stream's time, 0.63-0.77 at the three sizes."""
    from sparsewire.kernels import compiled as kernels

    rank = comm.Get_rank()
    yielding, matrix, operand, dense, out, _ = _kernel(sharing)
    sources = [s for s, r in flows if r == rank]
    destinations = [r for s, r in flows if s == rank]

    def timed(stream: bool, compute: bool, outgoing: np.ndarray, incoming: np.ndarray) -> float:
        pieces = _pieces(outgoing.size)  # one while the message is sized
        rows = np.linspace(0, matrix.shape[0], pieces + 1).astype(np.int64).tolist()
        cuts = np.linspace(0, outgoing.size, pieces + 1).astype(np.int64).tolist()
        wait_all([comm.Ibarrier()], yielding=yielding)
        started = MPI.Wtime()
        arrivals, sends = [], []
        if stream:
            arrivals = [[comm.Irecv(incoming[a:b], s, _TAG + 1) for a, b in zip(cuts, cuts[1:])] for s in sources]
            sends = [comm.Isend(outgoing[a:b], r, _TAG + 1) for r in destinations for a, b in zip(cuts, cuts[1:])]
        for piece in range(pieces):
            if arrivals:
                wait_all([pieces_from[piece] for pieces_from in arrivals], yielding=yielding)
            if compute:
                kernels.multiply_rows(operand, dense, out, rows[piece], rows[piece + 1])
        wait_all(sends, yielding=yielding)
        return comm.allreduce(MPI.Wtime() - started, op=MPI.MAX)

    measured = _taking_turns(timed, rate, flows, repeat)
    return {**measured, "pieces": _pieces(measured["message_bytes"])}
