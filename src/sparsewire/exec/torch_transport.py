"""The torch.distributed transport: an exchange's messages as ``isend``/``irecv`` on PyTorch's
default process group (Gloo for CPU tensors; the backend follows the tensors' device, so NCCL
moves CUDA tensors where it is available).

Planning and setup stay on MPI. The process group is the caller's, if one is initialised on every
rank, or is initialised from the MPI communicator (:func:`process_group_ranks`: rank 0 picks a
free TCP port and broadcasts it, every rank calls ``init_process_group`` with its MPI rank and the
communicator's size). Peers are addressed by their rank in that group, so the communicator may be
a part of it.

Gloo and NCCL deliver a message into whatever buffer the receiver posted: a sender whose count
differs from its receiver's hangs the job or leaves a wrong C without an error (seen with Gloo: 10
elements sent into a 12-element receive completes on both sides). So at setup every rank tells
each receiver, over MPI, what it will send it, and every rank raises the same
:class:`~sparsewire.errors.PlanMismatchError` when any pair disagrees. torch.distributed reports no
receive status, so the byte ledger counts the sizes of the tensors received into: those agree with
the senders' counts by that check, but are not measured per message (``counts_measured`` False;
the JSON and ``explain()`` say so).

Gloo's receives report completion only when waited on, so ``wait_any`` completes them in the order
they were posted (the early schedule then combines each message as soon as it and the ones posted
before it have arrived). Not supported: the partitioned mode (MPI-4 partitioned messages).
"""

from __future__ import annotations

import datetime
import itertools
import os
import socket

from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, ranks_on_node
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec.buffers import Buffers, ExchangeBuffers
from sparsewire.exec.modes import Mode
from sparsewire.exec.transport import ByteLedger, MessageTransport

__all__ = ["TorchTransport", "process_group_ranks", "TIMEOUT_ENVIRONMENT_VARIABLE"]

#: Seconds a torch.distributed operation may wait before it fails (default 300).
TIMEOUT_ENVIRONMENT_VARIABLE = "SPARSEWIRE_TORCH_TIMEOUT"
_SERIALS = itertools.count()  # executors are made collectively, so every rank numbers them alike


def _timeout() -> datetime.timedelta:
    setting = os.environ.get(TIMEOUT_ENVIRONMENT_VARIABLE, "300")
    try:
        seconds = float(setting)
        if seconds <= 0:
            raise ValueError
    except ValueError:
        raise InputError(f"{TIMEOUT_ENVIRONMENT_VARIABLE}={setting!r} must be a positive number of seconds") from None
    return datetime.timedelta(seconds=seconds)


def process_group_ranks(comm: MPI.Comm) -> list[int]:
    """Collective. The torch.distributed rank of every rank of ``comm``, in ``comm``'s order.

    Uses the default process group when every rank has one; initialises it from ``comm`` when no
    rank has one (backend ``gloo``, plus ``nccl`` for CUDA tensors where PyTorch has it; the
    address is 127.0.0.1 when every rank is on one node, else ``MASTER_ADDR`` or rank 0's host
    name). Raises InputError on every rank when only some ranks have one, or two ranks of
    ``comm`` share one torch rank.
    """
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        torch = dist = None
    available = dist is not None and dist.is_available()
    agree_on_error(comm, None if available else "the torch transport needs PyTorch with torch.distributed; install it with 'pip install -r requirements.lock'")
    initialised = comm.allgather(dist.is_initialized())
    if any(initialised) and not all(initialised):
        agree_on_error(comm, "some ranks have a torch.distributed process group and some do not; initialise it on every rank or on none")
    if not any(initialised):
        address = _rendezvous(comm)
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://{address}", rank=comm.Get_rank(), world_size=comm.Get_size(), timeout=_timeout())
    ranks = comm.allgather(dist.get_rank())
    agree_on_error(comm, None if len(set(ranks)) == len(ranks) else f"ranks of the communicator share torch.distributed ranks {ranks}; give each rank its own")
    return ranks


def _rendezvous(comm: MPI.Comm) -> str:
    """Collective. ``host:port`` of a free TCP port on rank 0, on every rank."""
    one_node = ranks_on_node(comm) == comm.Get_size()
    address = None
    if comm.Get_rank() == 0:
        host = "127.0.0.1" if one_node else os.environ.get("MASTER_ADDR") or socket.gethostname()
        with socket.socket() as probe:
            probe.bind(("" if not one_node else "127.0.0.1", 0))
            address = f"{host}:{probe.getsockname()[1]}"
    return comm.bcast(address, root=0)


def _count_problems(comm: MPI.Comm, buffers: Buffers) -> str | None:
    """Collective. Every sender tells each receiver, per exchange, how many elements it will send
    it; the first message whose counts disagree, or None."""
    size, rank = comm.Get_size(), comm.Get_rank()
    outgoing: list[dict] = [{} for _ in range(size)]
    for ex in buffers.exchanges:
        for destination, elements in zip(ex.send_ranks, ex.send_elements):
            outgoing[destination][ex.index] = elements
    incoming = comm.alltoall(outgoing)
    for ex in buffers.exchanges:
        expected = dict(zip(ex.recv_ranks, ex.recv_elements))
        for source in range(size):
            sent, wanted = incoming[source].get(ex.index, 0), expected.get(source, 0)
            if sent != wanted:
                return (
                    f"rank {rank} expects {wanted} elements from rank {source} in exchange {ex.index} but rank {source} "
                    f"sends {sent}; the ranks' plans disagree (torch.distributed would hang or deliver a wrong C), so build "
                    "them together with build_rank_plan_collective"
                )
    return None


class TorchTransport(MessageTransport):
    """``isend``/``irecv`` on the torch.distributed default group (see the module docstring)."""

    name = "torch"
    modes = frozenset({Mode.BULK, Mode.OVERLAP, Mode.PIPELINED, Mode.EARLY})
    counted_by = (
        "sizes of the tensors torch.distributed received into (it has no receive status); every sender's "
        "count was checked against its receiver's at setup"
    )
    counts_measured = False

    def __init__(self, comm: MPI.Comm, buffers: Buffers, ledger: ByteLedger) -> None:
        super().__init__(buffers, ledger)
        import torch
        import torch.distributed as dist

        self._dist = dist
        self._peer = process_group_ranks(comm)
        problem = _count_problems(comm, buffers)
        agree_on_error(comm, PlanMismatchError(problem) if problem else None)
        serial = next(_SERIALS) % (1 << 14)
        self._tags = [(serial << 16) + ex.index for ex in buffers.exchanges]
        k = buffers.k
        self._recv_tensors, self._send_tensors = [], []
        for ex in buffers.exchanges:
            flat_recv, flat_send = torch.from_numpy(ex.recv_flat), torch.from_numpy(ex.send_flat)
            self._recv_tensors.append([flat_recv[s * k : s * k + n] for s, n in zip(ex.recv_offsets[:-1].tolist(), ex.recv_elements)])
            self._send_tensors.append([flat_send[s * k : s * k + n] for s, n in zip(ex.send_offsets[:-1].tolist(), ex.send_elements)])
        self._recv_works: list[list] = [[None] * len(ex.recv_ranks) for ex in buffers.exchanges]
        self._send_works: list[list] = [[None] * len(ex.send_ranks) for ex in buffers.exchanges]
        self._pending: list[tuple[int, int]] = []  # posted receives not yet completed, in posting order

    def post_receives(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transport`."""
        works, tag = self._recv_works[ex.index], self._tags[ex.index]
        for message, (source, tensor) in enumerate(zip(ex.recv_ranks, self._recv_tensors[ex.index])):
            works[message] = self._dist.irecv(tensor, src=self._peer[source], tag=tag)
            self._pending.append((ex.index, message))

    def start_sends(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transport`."""
        for message in range(len(ex.send_ranks)):
            self.start_send(ex, message)

    def start_send(self, ex: ExchangeBuffers, message: int) -> None:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transport`."""
        destination = self._peer[ex.send_ranks[message]]
        self._send_works[ex.index][message] = self._dist.isend(self._send_tensors[ex.index][message], dst=destination, tag=self._tags[ex.index])

    def _complete(self, index: int, message: int) -> None:
        works = self._recv_works[index]
        works[message].wait()
        works[message] = None
        self.ledger.record(self.buffers.exchanges[index], message, self._recv_tensors[index][message].numel())

    def wait_receives(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transport`."""
        for message, work in enumerate(self._recv_works[ex.index]):
            if work is not None:
                self._complete(ex.index, message)
        self._pending = [p for p in self._pending if p[0] != ex.index]

    def wait_any(self) -> tuple[int, int]:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transport`."""
        while self._pending:
            index, message = self._pending.pop(0)
            if self._recv_works[index][message] is not None:
                self._complete(index, message)
                return index, message
        raise RuntimeError("no receive is active but messages are missing; the executor's schedule is broken")

    def wait_sends(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transport`."""
        works = self._send_works[ex.index]
        for message, work in enumerate(works):
            if work is not None:
                work.wait()
                works[message] = None

    def free(self) -> None:
        """Not collective (frees this rank's requests). Nothing is held between multiplies (torch.distributed has no persistent requests)."""
        self._pending = []
