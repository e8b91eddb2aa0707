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

CUDA buffers (the torch backend on ``cuda``) move over NCCL, which matches a pair's sends and
receives in the order they are issued, ignores tags, and runs each rank's operations in order on
one stream: a receive issued alone before the send its peer waits on deadlocks. So on CUDA an
exchange's receives are held until its sends are issued and all go in one NCCL group
(``batch_isend_irecv``); completion is per exchange, which the bulk, overlap and pipelined modes
need (not the early mode, :func:`device_mode_problem`). NCCL needs one GPU per rank
(:func:`process_group_ranks` sets each rank's device before the group is made and refuses ranks
that share one) and every rank of the group in its first operation, so the communicator must be
the whole group. Two or more GPUs, one per rank, are needed to run it past P = 1.
"""

from __future__ import annotations

import datetime
import itertools
import math
import os
import socket

from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, ranks_on_node
from sparsewire.comm.torch_world import shut_down_at_exit
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec.buffers import Buffers, ExchangeBuffers
from sparsewire.exec.transports.base import ByteLedger, MessageTransport
from sparsewire.plan.modes import Mode

__all__ = [
    "TorchTransport",
    "GROUPED_MODES",
    "process_group_ranks",
    "device_mode_problem",
    "select",
    "TIMEOUT_ENVIRONMENT_VARIABLE",
]

#: The modes the transport runs on CUDA tensors (whole exchanges in one NCCL group).
GROUPED_MODES = frozenset({Mode.BULK, Mode.OVERLAP, Mode.PIPELINED})


def device_mode_problem(mode: str, device: str) -> str | None:
    """Not collective. What is wrong with the torch transport running ``mode`` on ``device`` (None: nothing)."""
    if str(device).startswith("cuda") and Mode(mode) not in GROUPED_MODES:
        return (
            f"the torch transport moves CUDA tensors over NCCL one exchange at a time, so it runs the "
            f"{', '.join(m.value for m in Mode if m in GROUPED_MODES)} modes on {device} (not {mode}); use one of those or "
            "transport 'mpi'"
        )
    return None


#: Seconds a torch.distributed operation may wait before it fails (default 300).
TIMEOUT_ENVIRONMENT_VARIABLE = "SPARSEWIRE_TORCH_TIMEOUT"
_SERIALS = itertools.count()  # executors are made collectively, so every rank numbers them alike


def _timeout() -> datetime.timedelta:
    setting = os.environ.get(TIMEOUT_ENVIRONMENT_VARIABLE, "300")
    try:
        seconds = float(setting)
        if not math.isfinite(seconds) or seconds <= 0 or seconds > 1e9:  # NaN and inf overflow timedelta
            raise ValueError
    except ValueError:
        raise InputError(
            f"{TIMEOUT_ENVIRONMENT_VARIABLE}={setting!r} must be a positive, finite number of seconds (at most 1e9)"
        ) from None
    return datetime.timedelta(seconds=seconds)


def process_group_ranks(comm: MPI.Comm, device=None) -> list[int]:
    """Collective. The torch.distributed rank of every rank of ``comm``, in ``comm``'s order.

    Uses the default process group when every rank has one; initialises it from ``comm`` when no
    rank has one (backend ``gloo``, plus ``nccl`` for CUDA tensors where PyTorch has it; the
    address is 127.0.0.1 when every rank is on one node, else ``MASTER_ADDR`` or rank 0's host
    name). With a CUDA ``device`` it is made PyTorch's current device first, as NCCL needs.
    Raises InputError on every rank when only some ranks have one, or two ranks of ``comm`` share
    one torch rank.
    """
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        torch = dist = None
    available = dist is not None and dist.is_available()
    agree_on_error(
        comm,
        None
        if available
        else "the torch transport needs PyTorch with torch.distributed; install it with 'pip install -r requirements.lock'",
    )
    initialised = comm.allgather(dist.is_initialized())
    if any(initialised) and not all(initialised):
        agree_on_error(
            comm, "some ranks have a torch.distributed process group and some do not; initialise it on every rank or on none"
        )
    if not any(initialised):
        if device is not None and torch.device(device).type == "cuda":
            torch.cuda.set_device(torch.device(device))
        address = _rendezvous(comm)
        backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
        dist.init_process_group(
            backend, init_method=f"tcp://{address}", rank=comm.Get_rank(), world_size=comm.Get_size(), timeout=_timeout()
        )
        shut_down_at_exit(default_group=True)
    ranks = comm.allgather(dist.get_rank())
    agree_on_error(
        comm,
        None
        if len(set(ranks)) == len(ranks)
        else f"ranks of the communicator share torch.distributed ranks {ranks}; give each rank its own",
    )
    return ranks


def _prepare_nccl(comm: MPI.Comm, device) -> None:
    """Collective. NCCL's conditions, checked on every rank: PyTorch has NCCL, the communicator is
    the whole process group, no two ranks share a GPU; then the group's first NCCL operation,
    with every rank in it."""
    import torch
    import torch.distributed as dist

    device = torch.device(device)
    problem = None
    if not dist.is_nccl_available():
        problem = "CUDA tensors move over NCCL, which this PyTorch lacks; use transport 'mpi' (staged through host memory)"
    elif comm.Get_size() != dist.get_world_size():
        problem = (
            f"on CUDA the torch transport needs the communicator to be the whole process group ({comm.Get_size()} of "
            f"{dist.get_world_size()} ranks): NCCL's first operation must include every rank"
        )
    elif "nccl" not in str(dist.get_backend_config()):
        problem = (
            f"the process group ({dist.get_backend_config()}) has no NCCL backend for CUDA tensors; initialise it with "
            "'cpu:gloo,cuda:nccl'"
        )
    agree_on_error(comm, problem)
    places = comm.allgather((socket.gethostname(), device.index))
    shared = [(a, b) for a in range(len(places)) for b in range(a + 1, len(places)) if places[a] == places[b]]
    agree_on_error(
        comm,
        None
        if not shared
        else (
            f"ranks {shared[0][0]} and {shared[0][1]} share GPU cuda:{places[shared[0][0]][1]} on {places[shared[0][0]][0]}; "
            "NCCL needs one GPU per "
            "rank: run as many ranks as GPUs, or use transport 'mpi' (host-staged), where ranks may share a GPU"
        ),
    )
    torch.cuda.set_device(device)  # NCCL's batched point-to-point hangs on another current device
    dist.all_reduce(torch.zeros(1, device=device))
    torch.cuda.synchronize(device)


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
    #: Whether each exchange's operations go in one group (NCCL's protocol); None: on CUDA buffers.
    #: A subclass with True runs that protocol on Gloo (the tests register one, ``torch-grouped``).
    grouped: bool | None = None

    def __init__(self, comm: MPI.Comm, buffers: Buffers, ledger: ByteLedger) -> None:
        super().__init__(buffers, ledger)
        import torch
        import torch.distributed as dist

        self._dist = dist
        device = getattr(buffers.kernels, "device", "cpu")
        self._peer = process_group_ranks(comm, device)
        problem = _count_problems(comm, buffers)
        agree_on_error(comm, PlanMismatchError(problem) if problem else None)
        # Each exchange in one group: NCCL's protocol, needed for CUDA buffers; a subclass may ask for it on Gloo.
        self._grouped = str(device).startswith("cuda") if self.grouped is None else self.grouped
        if str(device).startswith("cuda"):
            _prepare_nccl(comm, device)
        serial = next(_SERIALS) % (1 << 14)
        self._tags = [(serial << 16) + ex.index for ex in buffers.exchanges]
        k = buffers.k
        self._recv_tensors, self._send_tensors = [], []
        for ex in buffers.exchanges:
            # The buffers as tensors: the torch backend's own (on its device), a NumPy buffer's memory.
            flat_recv, flat_send = (
                x if isinstance(x, torch.Tensor) else torch.from_numpy(x) for x in (ex.recv_device, ex.send_device)
            )
            self._recv_tensors.append(
                [flat_recv[s * k : s * k + n] for s, n in zip(ex.recv_offsets[:-1].tolist(), ex.recv_elements)]
            )
            self._send_tensors.append(
                [flat_send[s * k : s * k + n] for s, n in zip(ex.send_offsets[:-1].tolist(), ex.send_elements)]
            )
        self._recv_works: list[list] = [[None] * len(ex.recv_ranks) for ex in buffers.exchanges]
        self._send_works: list[list] = [[None] * len(ex.send_ranks) for ex in buffers.exchanges]
        self._pending: list[tuple[int, int]] = []  # posted receives not yet completed, in posting order
        self._held: list[list] = [[] for _ in buffers.exchanges]  # grouped: receives waiting for their exchange's sends
        self._group_works: list[list] = [[] for _ in buffers.exchanges]  # grouped: the works of each exchange's group

    def post_receives(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transports.base`
        (grouped: held until :meth:`start_sends` issues the exchange's group)."""
        tag = self._tags[ex.index]
        if self._grouped:
            self._held[ex.index] = [
                self._dist.P2POp(self._dist.irecv, tensor, self._peer[source], tag=tag)
                for source, tensor in zip(ex.recv_ranks, self._recv_tensors[ex.index])
            ]
            return
        works = self._recv_works[ex.index]
        for message, (source, tensor) in enumerate(zip(ex.recv_ranks, self._recv_tensors[ex.index])):
            works[message] = self._dist.irecv(tensor, src=self._peer[source], tag=tag)
            self._pending.append((ex.index, message))

    def start_sends(self, ex: ExchangeBuffers) -> None:
        """Not collective (point to point with the peers); what it does: :mod:`sparsewire.exec.transports.base`
        (grouped: the held receives and every send of ``ex`` in one group)."""
        if self._grouped:
            dist, tag = self._dist, self._tags[ex.index]
            operations = self._held[ex.index] + [
                dist.P2POp(dist.isend, tensor, self._peer[destination], tag=tag)
                for destination, tensor in zip(ex.send_ranks, self._send_tensors[ex.index])
            ]
            self._held[ex.index] = []
            self._group_works[ex.index] = dist.batch_isend_irecv(operations) if operations else []
            return
        for message in range(len(ex.send_ranks)):
            self.start_send(ex, message)

    @property
    def sends_message_by_message(self) -> bool:
        return not self._grouped

    def start_send(self, ex: ExchangeBuffers, message: int) -> None:
        if self._grouped:
            raise RuntimeError(
                "grouped torch transport sends whole exchanges; the schedule asked for one message (see device_mode_problem)"
            )
        destination = self._peer[ex.send_ranks[message]]
        self._send_works[ex.index][message] = self._dist.isend(
            self._send_tensors[ex.index][message], dst=destination, tag=self._tags[ex.index]
        )

    def _complete(self, index: int, message: int) -> None:
        works = self._recv_works[index]
        works[message].wait()
        works[message] = None
        self.ledger.record(self.buffers.exchanges[index], message, self._recv_tensors[index][message].numel())

    def _complete_group(self, ex: ExchangeBuffers) -> None:
        for work in self._group_works[ex.index]:
            work.wait()  # NCCL: the compute stream waits for the group (the host does not)
        self._group_works[ex.index] = []

    def wait_receives(self, ex: ExchangeBuffers) -> None:
        if self._grouped:
            self._complete_group(ex)
            for message, tensor in enumerate(self._recv_tensors[ex.index]):
                self.ledger.record(ex, message, tensor.numel())
            return
        for message, work in enumerate(self._recv_works[ex.index]):
            if work is not None:
                self._complete(ex.index, message)
        self._pending = [p for p in self._pending if p[0] != ex.index]

    def wait_any(self) -> tuple[int, int]:
        while self._pending:
            index, message = self._pending.pop(0)
            if self._recv_works[index][message] is not None:
                self._complete(index, message)
                return index, message
        raise RuntimeError("no receive is active but messages are missing; the executor's schedule is broken")

    def wait_sends(self, ex: ExchangeBuffers) -> None:
        if self._grouped:
            self._complete_group(ex)
            return
        works = self._send_works[ex.index]
        for message, work in enumerate(works):
            if work is not None:
                work.wait()
                works[message] = None

    def free(self) -> None:
        """Not collective (frees this rank's requests). Nothing is held between multiplies (torch.distributed
        has no persistent requests)."""
        self._pending = []


def select(mode: Mode, comm: MPI.Comm, device: str = "cpu") -> type[TorchTransport]:
    """Not collective. The registry's selector (:mod:`sparsewire.exec.transports`): one class for every mode."""
    return TorchTransport
