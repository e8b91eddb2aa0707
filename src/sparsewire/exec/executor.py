"""The SpMM executor: runs one rank's :class:`~sparsewire.plan.RankPlan`, many times.

Per multiply, with B_p the rank's rows of B and C_p its rows of C, for every exchange e of the plan
(in order of steps):

1. pack: ``send_buffer_e = send_matrix_e @ [B_p ; receive_buffer_(input of e)]`` (selected B rows
   by a gather, partial C rows, forwarded B rows and summed partial C rows by a CSR product);
2. exchange: every destination gets its rows of ``send_buffer_e``; every source's rows land in
   ``receive_buffer_e``;
3. combine: ``C_p += receive_matrix_e @ receive_buffer_e``, after ``C_p = diagonal @ B_p``.

:class:`SpmmExecutor` validates and assembles four parts, each with one job (the model is PETSc's
split of the communication graph, ``PetscSF``, from the transports that run it):

* buffers (:mod:`~sparsewire.exec.buffers`): every buffer, offset and kernel operand, built once
  from the plan, as arrays of a kernel backend (:mod:`~sparsewire.kernels`: ``numpy``,
  the compiled kernels, or ``torch``, tensors and PyTorch's sparse products), which also runs every
  local product;
* transport (:mod:`~sparsewire.exec.transports.base`): moves an exchange's messages and counts what
  arrived: ``mpi`` (persistent point-to-point, MPI-4 partitioned, or partitions over
  point-to-point) or ``torch`` (torch.distributed: Gloo for CPU tensors);
* schedule (:mod:`~sparsewire.exec.schedules.messages`, :mod:`~sparsewire.exec.schedules.partitioned`): the order of
  packing, moving and combining, one per mode (:mod:`~sparsewire.plan.modes`);
* combine (:mod:`~sparsewire.exec.combine`): streaming (rows added as they arrive) or ordered
  (``deterministic=True``: C bitwise identical across runs, modes, transports and threads).

Bytes are counted by the transport: after each multiply ``bytes_received_from[q]`` holds the bytes
received from rank q (MPI: the receive statuses), and ``delivery_problems`` names every message,
over all of the executor's multiplies, whose size differed from what this rank's plan expects.

Buffers, operands and requests are made once per executor (one plan, one k, one dtype, T threads);
``multiply(b, out=c)`` on the MPI transport then allocates nothing that grows with the problem.
"""

from __future__ import annotations

import functools
import threading
import weakref

import numpy as np
from mpi4py import MPI

from sparsewire._lib.cores import default_threads, oversubscribed
from sparsewire._lib.sizes import check_dense_fits
from sparsewire.comm.lifetime import admit, free_communicators, release_now, track
from sparsewire.comm.runtime import agree_on_error, agreed, node_ids, on_mpi
from sparsewire.comm.watchdog import Watchdog
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec.buffers import BufferNeeds, build_buffers
from sparsewire.exec.combine import OrderedCombine, StreamingCombine
from sparsewire.exec.message_rows import PIECE_BYTES
from sparsewire.exec.options import ExecOptions, cuts_messages
from sparsewire.exec.schedules import SCHEDULES
from sparsewire.exec.transports import transport_entry
from sparsewire.exec.transports.base import ByteLedger
from sparsewire.kernels import make_backend
from sparsewire.plan.modes import Mode
from sparsewire.plan.plan import RankPlan
from sparsewire.plan.stats import relays as plan_relays
from sparsewire.profile.laps import FOLD_EVERY, MULTIPLY, START, Laps
from sparsewire.wire.codecs import parse_compress

__all__ = ["SpmmExecutor"]


class SpmmExecutor:
    """Collective (construction and :meth:`multiply`). Runs ``C = A @ B`` with one plan, many times.

    Args:
        plan: this rank's plan (layout ``pipelined`` for the pipelined mode, ``merged`` otherwise).
        comm: the communicator the plan was built for (MPI's, or a ``TorchComm`` under torchrun).
        k: columns of B.
        dtype: float32 or float64 (A's values are cast once).
        options: how it runs (:class:`~sparsewire.exec.options.ExecOptions`, its mode chosen): the mode,
            threads per rank (and partitions per message in the partitioned mode; None: ``cores /
            ranks on this node``), the ordered combine when ``deterministic``, the transport (a
            registered name), the kernel backend on its device (with ``torch``, :meth:`multiply`
            takes and returns tensors; a NumPy B is wrapped) and the transfer calibration whose
            threshold picks the messages staged through host memory (:mod:`sparsewire.wire.paths`).
        operands_of: an executor of the same ``plan`` at another k, whose sparse operands this one shares
            (:func:`~sparsewire.exec.buffers.build_buffers`).
        memory_of: an executor whose dense buffers hold this one's where they fit; the two then multiply one at a
            time (one lock: a multiply on either while the other runs is refused).

    Attributes:
        options: the options it runs with (threads filled in).
        buffers, transport, schedule, combine: the parts (see the module docstring).
        kernels: the backend object (every buffer's array type and every local product).
        transfer_rule: which messages are staged (:class:`~sparsewire.wire.paths.TransferRule`);
            ``stages_messages``: whether the transport applies it (``Transport.stages_messages``).
        bytes_received_from, delivery_problems: the transport's byte ledger.
    """

    def __init__(
        self,
        plan: RankPlan,
        comm: MPI.Comm,
        k: int,
        dtype=np.float64,
        options: ExecOptions | None = None,
        *,
        operands_of: SpmmExecutor | None = None,
        memory_of: SpmmExecutor | None = None,
    ) -> None:
        options = options or ExecOptions(mode=Mode.OVERLAP)
        if options.mode is None:
            raise InputError(
                "the executor runs one mode: choose it first (ExecOptions(mode=...); plan_spmm chooses 'auto' for you)"
            )
        mode = Mode(options.mode)
        if options.transport == "mpi" and not on_mpi(comm):  # (every rank's communicator alike: raised on all)
            raise agreed(
                InputError(
                    "this job's processes share no MPI world (torchrun started them): use transport 'torch' "
                    "(--transport torch, ExecOptions(transport='torch'))"
                )
            )
        transport_class = transport_entry(options.transport).transport_class(mode, comm, options.device)
        self.stages_messages = transport_class.stages_messages
        try:
            self.transfer_rule, problem = options.transfer_rule(), None
        except InputError as error:
            self.transfer_rule, problem = None, error
        agree_on_error(comm, problem)
        if k < 1:
            raise InputError(f"k must be at least 1 (got {k})")
        if comm.Get_size() != plan.n_ranks or comm.Get_rank() != plan.rank:
            raise PlanMismatchError(
                f"plan for rank {plan.rank} of {plan.n_ranks} used on rank {comm.Get_rank()} of {comm.Get_size()}; "
                "build the plan on the communicator that runs it"
            )
        if plan.layout != mode.layout:
            raise PlanMismatchError(
                f"mode {mode!r} runs plans with the {mode.layout!r} layout but this plan is {plan.layout!r}; "
                f"build it with layout={mode.layout!r}"
            )
        # B, C and every message buffer, before any is allocated (a k of 2^31 from a damaged plan
        # file is one error on every rank, not a MemoryError on some).
        rows = sum(plan.local_shape) + sum(int(e.send_counts.sum() + e.recv_counts.sum()) for e in plan.exchanges)
        try:
            check_dense_fits(rows, k, np.dtype(dtype).itemsize, "the executor's buffers")
            problem = None
        except InputError as error:
            problem = error
        agree_on_error(comm, problem)
        self._nodes = node_ids(comm)
        sharing = int((self._nodes == self._nodes[comm.Get_rank()]).sum())
        threads = options.threads
        if threads is None:
            threads = default_threads(sharing)
        if mode.partitions_per_thread:
            if threads > 1 and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
                raise InputError(
                    f"the partitioned mode with {threads} threads calls MPI from every thread and needs MPI_THREAD_MULTIPLE, "
                    f"but MPI was initialised at level {MPI.Query_thread()}; set mpi4py.rc.thread_level = 'multiple' before "
                    "importing mpi4py.MPI, or use threads=1"
                )
            # Both ends of a message must cut it into the same partitions (and the same padding).
            fewest, most = comm.allreduce(threads, op=MPI.MIN), comm.allreduce(threads, op=MPI.MAX)
            if fewest != most:
                raise InputError(
                    f"the partitioned mode needs the same number of threads on every rank (got {fewest} to {most}); "
                    "pass threads explicitly"
                )
        self.kernels = make_backend(options.backend, options.device)
        self.kernels.set_threads(threads, sharing)
        # What dropped executors held is freed here; too many open ones is one error on every rank.
        agree_on_error(comm, admit())
        # A communicator of its own: the executor's tags cannot match the caller's messages.
        self.comm = comm.Dup()
        self.options = options.replace(threads=int(threads))
        self.plan, self.k, self.mode = plan, int(k), mode
        self.threads, self.deterministic = int(threads), options.deterministic
        self.dtype = np.dtype(dtype)
        self._closed = False
        # Held during a multiply: a second thread is refused (also on an executor whose buffers this one shares).
        self._running = memory_of._running if memory_of is not None else threading.Lock()
        needs = BufferNeeds(
            partitions=self.threads if mode.partitions_per_thread else 1,
            unpack=None if self.deterministic else ("message" if mode.per_message else "exchange"),
            dependencies=mode.relays_per_message,
            ordered=self.deterministic,
            codec=options.codec,
            codec_peers=self._codec_peers(options, comm),
            # Messages to another node leave first: the slow link starts while the rest are packed (2 nodes x 2
            # ranks at 1 Gbit/s: docs/design-decisions.md, "Slow links first").
            first_peers=self._other_groups(options, comm),
            piece_bytes=self._piece_bytes(mode, transport_class, options, plan, comm),
        )
        rule = self.transfer_rule if self.stages_messages else None
        shared, memory = (other.buffers if other is not None else None for other in (operands_of, memory_of))
        self.buffers = build_buffers(plan, self.k, self.dtype, self.threads, needs, self.kernels, rule, shared, memory)
        self.ledger = ByteLedger(plan.rank, plan.n_ranks, self.dtype.itemsize)
        self.transport = transport_class(self.comm, self.buffers, self.ledger)
        busy = oversubscribed(sharing, self.threads)
        self.transport.yield_while_waiting = busy
        this = weakref.ref(self)  # the watchdog must not keep a dropped executor alive
        self.watchdog = Watchdog(self.options.wait_timeout, lambda: this().describe_wait() if this() else "(plan closed)")
        self.ledger.on_arrival = self.watchdog.progress
        # The diagonal block in pieces with MPI progress between them only where the cores are not all taken by ranks:
        # on 2 nodes x 1 rank at 5 Gbit/s the overlap mode went 0.909 -> 0.862 of bulk's time; with 4 ranks on 2
        # cores 3-6% slower against bulk (docs/design-decisions.md, "Executor").
        self.combine = OrderedCombine(self.buffers) if self.deterministic else StreamingCombine(self.buffers, in_pieces=not busy)
        self.schedule = SCHEDULES[mode](self.buffers, self.transport, self.combine)
        self.tracer = self._laps = None
        self._schedules = [self.schedule]  # with a traced one while tracing
        # Freed by close(), or after the executor is garbage-collected (exec.lifetime).
        self._finalizer = track(self, functools.partial(_release, self._schedules, self.transport, self.comm))

    def _piece_bytes(self, mode: Mode, transport_class: type, options: ExecOptions, plan: RankPlan, comm) -> int:
        """Collective. The size of the pieces the messages to and from another group are cut into
        (:mod:`~sparsewire.exec.message_rows`), or 0 for whole messages: pieces in the overlap schedule (the overlap and
        pipelined modes) of a transport that sends them, on the CPU, without a codec or the ordered combine, where no
        rank's plan relays a message (a relay forwards whole messages) and no rank stages one
        (:func:`~sparsewire.exec.options.cuts_messages`)."""
        if not (cuts_messages(options, mode) and transport_class.sends_pieces):
            return 0  # (the same answer on every rank: the options and mode are)
        # A two-level plan on groups of one rank relays nothing: its second exchange sends no message on any rank.
        relays = plan_relays(plan)
        # A message staged through host memory is received into its stage and copied whole (each end decides alone).
        stages = self.stages_messages and self.transfer_rule is not None and self.transfer_rule.staged_below_bytes > 0
        return 0 if comm.allreduce(int(relays or stages), op=MPI.MAX) else PIECE_BYTES

    def _codec_peers(self, options: ExecOptions, comm) -> frozenset[int] | None:
        """The ranks whose messages go through the codec: all (None); for ``inter:CODEC`` those in another group
        (the topology's groups where it has them, else MPI's shared-memory nodes); for ``auto`` those whose link
        is slow enough that coding pays (collective: :func:`~sparsewire.wire.codec_choice.choose_coded_peers`)."""
        self.codec_choice = None
        codec, scope = parse_compress(options.compress)
        self.codes_messages = codec != "none"  # (on some rank: the error bound's passes count where it is)
        if scope == "all":
            return None
        if scope == "auto":
            from sparsewire.wire.codec_choice import choose_coded_peers

            peers, self.codec_choice = choose_coded_peers(comm, codec, self.k, self.dtype, options.topology)
            self.codes_messages = bool(comm.allreduce(len(peers), op=MPI.MAX))
            return peers
        return self._other_groups(options, comm)

    def _other_groups(self, options: ExecOptions, comm) -> frozenset[int]:
        """The ranks in another group than this one: the topology's groups where it has them, else MPI's
        shared-memory nodes."""
        topology = options.topology
        groups = topology.groups(comm.Get_size()) if topology is not None and len(topology.levels) > 1 else self._nodes
        return frozenset(np.flatnonzero(groups != groups[comm.Get_rank()]).tolist())

    @property
    def bytes_received_from(self) -> np.ndarray:
        """Bytes received from each rank in the last multiply, as the transport counted them
        (:attr:`counted_by`), without partition padding."""
        return self.ledger.bytes_from

    @property
    def delivery_problems(self) -> list[str]:
        """One line per message, over all multiplies, whose size differed from this rank's plan."""
        return self.ledger.problems

    @property
    def bytes_received(self) -> int:
        """Bytes received by this rank in the last multiply (:attr:`bytes_received_from` summed)."""
        return int(self.ledger.bytes_from.sum())

    @property
    def counted_by(self) -> str:
        """What the byte counts come from (the transport's own knowledge of each receive)."""
        return self.transport.counted_by

    def multiply(self, b_local, out=None):
        """Collective. This rank's rows of ``C = A @ B`` from its rows of B (shape (rows of B
        owned, k)), written into ``out`` when given (shape (rows of A owned, k), C-contiguous, the
        executor's dtype; a tensor on the device with the torch backend; it may be or overlap B,
        which is then copied first). Arguments are checked before any message is sent
        (PlanMismatchError; a complex B or one of non-numbers is refused)."""
        rank = self.plan.rank
        b_local = self.kernels.block(b_local, (self.plan.local_shape[1], self.k), self.dtype, rank)
        if self._closed:
            raise PlanMismatchError("this executor was closed; make a new one")
        out = self.kernels.output(out, (self.plan.local_shape[0], self.k), self.dtype, rank)
        b_local = self.kernels.apart(b_local, out)  # out=B (or overlapping it) stays exact
        if not self._running.acquire(blocking=False):
            # Two threads would share the buffers and requests (wrong C at P = 1, a raw MPI error
            # at P > 1); waiting would not help at P > 1, where ranks must multiply the same B's in
            # the same order.
            refused = PlanMismatchError(
                f"rank {rank}: this plan is already multiplying in another thread; a plan runs one multiply at a "
                "time: call it from one thread (at P = 1 a lock around multiply will do; at P > 1 every rank must "
                "multiply the same B's in the same order)"
            )
            refused.nothing_sent = True  # the other thread's multiply goes on: the caller gets it, the job is not ended
            raise refused
        try:
            self.ledger.reset()
            tracer, laps, schedule = self.tracer, self._laps, self.schedule
            if tracer is not None:
                tracer.begin_multiply()
                if laps is None:
                    started = tracer.clock()
                elif tracer.recording:
                    laps.push((START, tracer.clock()))
                else:  # outside the window: untraced
                    schedule = self._schedules[0]
            self.watchdog.arm()
            try:
                schedule.run(b_local, out)
            finally:
                self.watchdog.disarm()
            if tracer is not None and tracer.recording:
                if laps is None:
                    tracer.span("multiply", started, tracer.clock())
                else:
                    laps.push((MULTIPLY, tracer.clock()))
                    if len(laps.stamps) >= FOLD_EVERY:
                        laps.fold()
        finally:
            self._running.release()
        return out

    def start_tracing(self, tracer) -> None:
        """Not collective (every rank starts alike). Run the following multiplies through a schedule that
        records into ``tracer``: for a trace (events kept) or the partitioned mode's threads, one whose
        packer, transport and combine are proxies (:mod:`sparsewire.exec.traced_parts`); for a summary
        alone, the schedule with laps (:mod:`sparsewire.profile.laps`: a clock read per phase, no proxies)."""
        from sparsewire.exec.pack import Packer

        if self.tracer is not None:
            raise InputError("this plan is being traced already; end that trace block before starting another")
        if tracer.keep_events or self.mode.partitions_per_thread:
            from sparsewire.exec.traced_parts import TracedCombine, TracedPacker, TracedTransport

            traced = SCHEDULES[self.mode](
                self.buffers,
                TracedTransport(self.transport, tracer),
                TracedCombine(self.combine, tracer),
                TracedPacker(Packer(self.buffers), tracer),
            )
        else:
            self._laps = Laps(tracer, self.buffers, self.dtype.itemsize)
            tracer.records_laps = True
            traced = SCHEDULES[self.mode](self.buffers, self.transport, self.combine, Packer(self.buffers), self._laps)
        self._schedules.append(traced)
        self.schedule, self.tracer = traced, tracer
        if self.codes_messages:  # (the MPI transport: the only one with a codec) coding and decoding as spans
            self.transport.codec_tracer = tracer

    def stop_tracing(self) -> None:
        """Not collective. Multiplies run untraced again (a summary's laps folded into its tracer first)."""
        if self.tracer is not None:
            if self._laps is not None:
                self._laps.fold()
            self._schedules.pop().close()
            self.schedule, self.tracer, self._laps = self._schedules[0], None, None
            if self.codes_messages:
                self.transport.codec_tracer = None

    def link_of(self, peer: int) -> str:
        """Not collective. The link between this rank and ``peer``: whether MPI puts them on one node
        (shared memory) or two, and the topology's link class where the options give one."""
        rank = self.plan.rank
        where = "same node" if self._nodes[peer] == self._nodes[rank] else "another node"
        topology = self.options.topology
        if topology is None or len(topology.levels) < 2:
            return where
        level = int(topology.link_levels(np.array([rank]), np.array([peer]), self.plan.n_ranks)[0])
        return f"{where}, {topology.levels[level].link.name} link"

    def describe_wait(self) -> str:
        """Not collective. What this rank's multiply still waits for: every expected message that
        has not arrived, by peer with its link and bytes, or else its sends (the watchdog's message)."""
        rank, itemsize = self.plan.rank, self.dtype.itemsize
        missing: dict[int, list[int]] = {}
        for ex in self.buffers.exchanges:
            uncounted = [m for m in range(len(ex.recv_ranks)) if (ex.index, m) not in self.ledger.arrived]
            incomplete = self.transport.incomplete_receives(ex) if uncounted else None
            for message in uncounted if incomplete is None else incomplete:
                entry = missing.setdefault(int(ex.recv_ranks[message]), [0, 0])
                entry[0] += 1
                entry[1] += int(ex.expected_elements[message]) * itemsize
        if missing:
            peers = ", ".join(
                f"from rank {peer} ({self.link_of(peer)}): {count} message{'s' * (count > 1)}, {size} bytes"
                for peer, (count, size) in sorted(missing.items())
            )
            total = sum(size for _, size in missing.values())
            return f"rank {rank} ({self.mode.value} mode) still waits for {total} bytes: {peers}"
        peers = sorted({int(q) for ex in self.buffers.exchanges for q in ex.send_ranks})
        links = ", ".join(f"rank {q} ({self.link_of(q)})" for q in peers)
        return f"rank {rank} ({self.mode.value} mode) has every message it expects; its sends to {links or 'no rank'} wait"

    def close(self) -> None:
        """Collective. Stop the schedule's threads, free the transport's requests and the
        executor's communicator."""
        if self._closed:
            return
        self._closed = True
        release_now(self, self._finalizer)

    def __enter__(self) -> SpmmExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _release(schedules, transport, comm: MPI.Comm) -> None:
    """Stop the schedules' threads, free the transport's requests and the communicator (local in MPICH)."""
    for schedule in schedules:
        schedule.close()
    transport.free()
    free_communicators(comm)
