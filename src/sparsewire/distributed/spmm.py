"""Reusable SpMM plans: :class:`SpmmPlan` (plan once, multiply many times, transpose, explain,
save and load), the ``auto`` strategy, and the one-line :func:`spmm`.

A plan fixes A's pattern and values, the partitions, k, the element type, the executor mode and
the threads; its executor (:class:`~sparsewire.exec.executor.SpmmExecutor`) holds every buffer and
persistent request, so ``plan.multiply(b_local, out=c_local)`` allocates nothing after the first
call (the model is PETSc's ``PetscSF``: set up once, run many times, invert for the transpose).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import abort_job, agree_on_error, agree_on_values, agreed, collective_errors, ranks_on_node
from sparsewire.distributed.auto import StrategyChoice, candidate_strategies, choose_strategy, collective_stats
from sparsewire.distributed.plan_file import PLAN_FORMAT, PLAN_FORMAT_VERSION, load_plan, write_plan_file
from sparsewire.distributed.trial import trial_of
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec.executor import SpmmExecutor
from sparsewire.exec.options import UNSET as _UNSET
from sparsewire.exec.options import ExecOptions, cuts_messages, exec_options
from sparsewire.plan.modes import Mode, choose_mode
from sparsewire.plan.plan import RankPlan, check_key_space
from sparsewire.plan.stats import PlanStats, predicted_communication_seconds, predicted_local_seconds, predicted_seconds
from sparsewire.plan.transpose import send_keys_collective, transpose_rank_plan
from sparsewire.profile.traffic import TrafficMap, measured_traffic, planned_traffic
from sparsewire.topology.model import Topology
from sparsewire.topology.saved import topology_record
from sparsewire.wire import codec_choice, codecs
from sparsewire.wire.paths import describe_paths, summarize_paths

if TYPE_CHECKING:  # for annotations only: the matrix's class imports this module's users
    from sparsewire.distributed.matrix import DistributedMatrix

__all__ = ["SpmmPlan", "StrategyChoice", "plan_spmm", "candidate_strategies", "PLAN_FORMAT", "PLAN_FORMAT_VERSION"]


def is_distributed_matrix(value) -> bool:
    """Not collective. Whether ``value`` is a :class:`~sparsewire.distributed.matrix.DistributedMatrix`,
    told by its fields (the class's module imports this one, so this one does not import it)."""
    return all(hasattr(value, name) for name in ("comm", "local_rows", "row_partition", "col_partition", "checksum"))


def _check_arguments(matrix: DistributedMatrix, k, dtype, options: ExecOptions | str) -> str | None:
    if isinstance(options, str):  # the options themselves were refused
        return options
    if not is_distributed_matrix(matrix):
        return f"expected a DistributedMatrix from sparsewire.distribute (got {type(matrix).__name__})"
    if not isinstance(k, (int, np.integer)) or k < 1:
        return f"k must be a positive integer (got {k!r})"
    if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        return f"dtype {np.dtype(dtype)} is not supported; use numpy.float32 or numpy.float64"
    try:
        check_key_space(matrix.comm.Get_size(), max(matrix.shape))
    except InputError as error:
        return str(error)
    return None


@collective_errors
def plan_spmm(
    matrix: DistributedMatrix,
    k: int,
    dtype=np.float64,
    *,
    options: ExecOptions | None = None,
    strategy: str = _UNSET,
    topology: Topology | None = _UNSET,
    mode: str | None = _UNSET,
    threads: int | None = _UNSET,
    deterministic: bool = _UNSET,
    proxy: str = _UNSET,
    transport: str = _UNSET,
    backend: str = _UNSET,
    device: str = _UNSET,
    transfer_calibration: str | os.PathLike | None = _UNSET,
) -> SpmmPlan:
    """Collective. Plan ``C = A @ B`` for the distributed A and a B of ``k`` columns.

    How it is made and run is one :class:`~sparsewire.exec.options.ExecOptions` (``options``; the
    defaults when None); each keyword argument given replaces that field.

    Args:
        matrix: A, from :func:`sparsewire.distribute`.
        k: columns of B.
        dtype: numpy.float32 or numpy.float64.
        options: how the plan is made and run (:class:`~sparsewire.exec.options.ExecOptions`).
        strategy: ``auto`` (default: :func:`~sparsewire.distributed.auto.choose_strategy`) or block, column, row,
            joint (with a grouped topology also column-hier, joint-hier, joint-group).
        topology: the cluster model (:class:`~sparsewire.topology.model.Topology`); None = flat.
        mode: executor mode (bulk, overlap, pipelined, early, partitioned) or None/``auto``
            (:func:`~sparsewire.plan.modes.choose_mode`).
        threads: threads per rank (default: cores / ranks on the node).
        deterministic: fixed summation order (C bitwise identical across runs, modes, threads).
        proxy: hierarchical strategies: which rank of a group receives a remote rank's B rows,
            ``local`` (the same local rank, CoLa) or ``balanced`` (spread by bytes).
        transport: how messages move: a registered transport (:mod:`sparsewire.exec.transports`):
            ``mpi`` (default) or ``torch`` (torch.distributed on the default process group, set up
            from MPI when there is none; every mode but partitioned).
        backend: where buffers live and what computes: ``numpy`` (default: the compiled kernels)
            or ``torch`` (tensors and PyTorch's sparse CSR products, gathers and index-adds; every
            mode but partitioned; :meth:`SpmmPlan.multiply` then takes and returns tensors).
        device: the torch backend's device: ``cpu``, ``cuda`` (PyTorch's current CUDA device) or
            ``cuda:N`` (each rank its own; see :mod:`sparsewire.kernels.torch_backend`).
        transfer_calibration: the file ``sparsewire calibrate --device`` wrote; messages below
            its threshold are staged through host memory (:mod:`sparsewire.wire.paths`).
            None: the stored calibration of the device's type when there is one, else every
            message is sent from the buffers themselves.

    Returns:
        :class:`SpmmPlan`, ready to multiply.
    """
    comm = matrix.comm if is_distributed_matrix(matrix) else MPI.COMM_SELF
    options = exec_options(
        options,
        strategy=strategy,
        topology=topology,
        mode=mode,
        threads=threads,
        deterministic=deterministic,
        proxy=proxy,
        transport=transport,
        backend=backend,
        device=device,
        transfer_calibration=transfer_calibration,
    )
    agree_on_error(comm, _check_arguments(matrix, k, dtype, options))
    k, dtype = int(k), np.dtype(dtype)
    agree_on_values(comm, {"k": k, "dtype": dtype.name, **options.agreed()}, "every rank must plan with the same arguments")
    if options.mode is None:
        from sparsewire._lib.cores import default_threads

        sharing = ranks_on_node(comm)
        # Rank 0 decides: threads (and so the choice) may differ per rank, the mode may not.
        # On a GPU the overlap mode (the kernels are asynchronous; nothing measured favours another).
        chosen = (
            "overlap"
            if options.device != "cpu"
            else comm.bcast(choose_mode(k, sharing, options.threads or default_threads(sharing)), root=0)
        )
        options = exec_options(options, mode=chosen)
        agree_on_error(comm, options if isinstance(options, str) else None)
    if options.topology is not None and options.topology.rank_groups is not None:
        options.topology.groups(comm.Get_size())  # the same answer on every rank: raises everywhere
    strategy, mode = options.strategy if options.strategy == "auto" else options.strategy.value, Mode(options.mode)
    plan, stats, choice = choose_strategy(
        matrix, k, dtype, strategy, options.topology, options.layout, options.proxy.value, mode.steps_in_flight,
        options.compress != "none", mode.overlaps_diagonal, trial_of(comm, k, dtype, options), cuts_messages(options, mode),
    )  # fmt: skip
    return SpmmPlan(matrix, plan, stats, k, dtype, options, choice)


class SpmmPlan:
    """A plan of ``C = A @ B`` (or of ``A.T @ G`` after :meth:`transpose`) with its executor.

    Attributes:
        matrix: the :class:`~sparsewire.distributed.matrix.DistributedMatrix` A.
        rank_plan: this rank's :class:`~sparsewire.plan.plan.RankPlan`.
        stats: the :class:`~sparsewire.plan.stats.PlanStats` (bytes, messages, per-rank maxima,
            per link class and predicted time under the topology, flat when none was given).
        options: how it is made and runs (:class:`~sparsewire.exec.options.ExecOptions`, the mode and
            threads filled in); ``mode``, ``threads``, ``deterministic``, ``topology``,
            ``transport``, ``backend``, ``device`` read its fields.
        k, dtype: the width and element type of B and C.
        transposed: True for the plan of ``A.T @ G``.
        choice: the :class:`StrategyChoice` (why this strategy).
        transfer_summary: sent messages of all ranks per link class and path (staged or direct:
            messages, bytes, smallest, largest; :func:`~sparsewire.wire.paths.summarize_paths`).
    """

    def __init__(
        self,
        matrix: DistributedMatrix,
        rank_plan: RankPlan,
        stats: PlanStats,
        k: int,
        dtype,
        options: ExecOptions,
        choice: StrategyChoice,
        *,
        transposed: bool = False,
        like: SpmmPlan | None = None,
        memory: SpmmPlan | None = None,
    ) -> None:
        """Collective (makes the executor). Use :func:`plan_spmm`, ``matrix.spmm_plan`` or :meth:`with_width`."""
        self.matrix, self.comm = matrix, matrix.comm
        self.rank_plan, self.stats = rank_plan, stats
        self.k, self.dtype, self.choice, self.transposed = int(k), np.dtype(dtype), choice, transposed
        self._like, memory = like, like or memory  # (the plan of the same rank plan at another width: all is shared)
        self.executor = SpmmExecutor(rank_plan, self.comm, self.k, self.dtype, options, operands_of=like and like.executor,
                                     memory_of=memory and memory.executor)  # fmt: skip
        self.options = self.executor.options  # threads filled in
        self._steps_in_flight = self.options.mode.steps_in_flight if self.executor.transport.sends_message_by_message else 1
        self.transfer_summary = summarize_paths(self.comm, self.executor.buffers, options.topology)
        self._transpose: SpmmPlan | None = None

    # What the executor runs, by name (each is a field of ``options``).
    mode = property(lambda self: self.options.mode.value, doc="The executor mode.")
    threads = property(lambda self: self.options.threads, doc="Threads per rank.")
    deterministic = property(lambda self: self.options.deterministic, doc="Whether C is summed in a fixed order.")
    topology = property(lambda self: self.options.topology, doc="The cluster model (None: flat).")
    transport = property(lambda self: self.options.transport, doc="The transport's registered name.")
    backend = property(lambda self: self.options.backend, doc="The kernel backend.")
    device = property(lambda self: self.options.device, doc="The backend's device.")

    def __repr__(self) -> str:
        what = "A.T @ G" if self.transposed else "A @ B"
        return (
            f"<SpmmPlan {what}: {self.rank_plan.strategy.value}/{self.mode}, k = {self.k}, {self.dtype.name}, "
            f"{self.comm.Get_size()} ranks, {self.transport} transport, {self.backend} backend on {self.device}>"
        )

    @property
    def input_rows(self) -> int:
        """Rows of the input block this rank passes to :meth:`multiply`."""
        return self.rank_plan.local_shape[1]

    @property
    def output_rows(self) -> int:
        """Rows of the result block this rank gets from :meth:`multiply`."""
        return self.rank_plan.local_shape[0]

    def multiply(self, b_local, out=None):
        """Collective. This rank's rows of ``C = A @ B`` (``A.T @ G`` for a transposed plan): a
        NumPy array, or with the torch backend a tensor on the plan's device.

        Args:
            b_local: this rank's rows of B, shape (``input_rows``, k): the rows
                ``matrix.col_partition.range(rank)`` (``row_partition`` when transposed). The
                product is fastest when B's rows start on cache lines (``sparsewire.empty_aligned``
                allocates such an array; :mod:`sparsewire._lib.aligned` has the measurements).
            out: optional C-contiguous array of shape (``output_rows``, k) and the plan's dtype to
                write C into (then nothing is allocated). A large C is streamed to memory when its
                rows start on cache lines: ``sparsewire.empty_aligned`` allocates such an array, as
                the plan does when ``out`` is not given. With the torch backend: a contiguous
                tensor of the plan's dtype on its device. It may be B itself or overlap it: B is
                then copied first (as NumPy's ``matmul(a, b, out=b)`` does), so C stays exact.

        Returns:
            ``C_p = sum_j A[rows_p, j] B[j, :]`` for this rank's rows p.

        Raises:
            InputError on every rank for a closed plan. PlanMismatchError for a wrong shape or dtype (a
            complex B, values that are not numbers); on a job of several ranks the other ranks may already
            wait for this rank's messages, so there that error aborts the job with its message instead
            (it never hangs). A second thread's multiply while one runs is refused with PlanMismatchError
            to its caller: the running one goes on.
        """
        self._check_open()
        try:
            return self.executor.multiply(b_local, out)
        except PlanMismatchError as error:  # raised before any message left this rank
            if self.comm.Get_size() > 1 and not getattr(error, "nothing_sent", False):
                abort_job(self.comm, str(error))
            raise

    @property
    def predicted_seconds(self) -> float:
        """Not collective. Predicted time per multiply in the form of the plan's mode and transport (steps in flight,
        diagonal block overlapped, work beside the stream, or not: :func:`~sparsewire.plan.cost.predicted_seconds`)."""
        mode, steps = self.options.mode, self._steps_in_flight
        beside, diagonal = cuts_messages(self.options, mode), mode.overlaps_diagonal
        return predicted_seconds(self.stats, steps_in_flight=steps, overlaps_diagonal=diagonal, beside_stream=beside)

    @property
    def predicted_communication_seconds(self) -> float:
        """Not collective. The communication part of :attr:`predicted_seconds`."""
        return predicted_communication_seconds(self.stats, steps_in_flight=self._steps_in_flight)

    @property
    def transfer_rule(self):
        """Which messages are staged through host memory (:class:`~sparsewire.wire.paths.TransferRule`),
        or None where the transport sends every message from the buffers."""
        return self.executor.transfer_rule if self.executor.stages_messages else None

    @property
    def bytes_received(self) -> int:
        """Bytes this rank received in the last multiply, as the transport counted them
        (:attr:`counted_by`; MPI: the receive statuses)."""
        return self.executor.bytes_received

    @property
    def bytes_received_from(self) -> np.ndarray:
        """Not collective. Bytes received from each rank in the last multiply, as :attr:`counted_by` says."""
        return self.executor.bytes_received_from

    @property
    def wire_bytes_received(self) -> int:
        """Not collective. Bytes that crossed the wire to this rank in the last multiply (MPI's receive statuses); equal
        to :attr:`bytes_received` unless a payload codec (``compress``) coded the messages."""
        return int(self.executor.ledger.wire_bytes_from.sum())

    @property
    def codec_passes(self) -> int:
        """Not collective. Most coded messages a term of C crosses: the exchanges if ``compress`` codes any, else 0."""
        return len(self.rank_plan.exchanges) if self.executor.codes_messages else 0

    def traffic(self) -> tuple[TrafficMap, TrafficMap]:
        """Collective. The rank x rank map of the last multiply as the transport counted it, and the plan's."""
        return measured_traffic(self.comm, self.executor.ledger), planned_traffic(self.stats)

    @property
    def delivery_problems(self) -> list[str]:
        """Not collective. The messages of the last multiply whose size differed from what this
        rank's plan expects, one line each (empty when every message was as planned)."""
        return list(self.executor.delivery_problems)

    @property
    def counted_by(self) -> str:
        """What :attr:`bytes_received` comes from (the transport's own knowledge of each receive)."""
        return self.executor.counted_by

    @property
    def bytes_measured(self) -> bool:
        """Whether :attr:`bytes_received` is measured per message independently of the receiving
        plan (MPI's receive statuses), rather than the sizes the receiver posted (torch)."""
        return self.executor.transport.counts_measured

    @collective_errors
    def transpose(self, share_buffers: bool = False) -> SpmmPlan:
        """Collective. The plan of ``A.T @ G`` on the same partitions (G rows under A's row partition, result rows under
        A's column partition), same k, dtype, mode and threads: the adjoint of this plan (:mod:`sparsewire.plan.transpose`),
        every message reversed with the same rows, so its bytes equal this plan's; on the same transport. Made once and
        cached (the first call decides); ``plan.transpose().transpose()`` is ``plan``. ``share_buffers``: its dense buffers
        are this plan's (the adjoint's sizes), for a forward and backward that never multiply at once, as in training."""
        self._check_open()
        if self._transpose is None:
            if self._like is not None:  # (the transpose of the plan of the same rank plan, at this width)
                self._transpose = self._like.transpose(share_buffers).with_width(self.k)
            else:
                plan = transpose_rank_plan(self.rank_plan, send_keys_collective(self.comm, self.rank_plan))
                stats = collective_stats(self.comm, plan, self.k, self.dtype.itemsize, self.topology or Topology.flat())
                self._transpose = SpmmPlan(self.matrix, plan, stats, self.k, self.dtype, self.options, self.choice,
                                           transposed=not self.transposed, memory=self if share_buffers else None)  # fmt: skip
            self._transpose._transpose = self
        return self._transpose

    @collective_errors
    def with_width(self, k: int) -> SpmmPlan:
        """Collective. The plan of the same rank plan (strategy, messages, mode, threads) for blocks of ``k`` columns,
        planned no further (``auto`` chose for this width): its executor shares this one's sparse operands (where
        whole messages make them independent of k) and dense buffers where they fit; the two then multiply one at a
        time. Its :meth:`transpose` is this plan's transpose at ``k``."""
        self._check_open()
        agree_on_error(self.comm, _check_arguments(self.matrix, k, self.dtype, self.options))
        stats = collective_stats(self.comm, self.rank_plan, int(k), self.dtype.itemsize, self.topology or Topology.flat())
        return SpmmPlan(self.matrix, self.rank_plan, stats, int(k), self.dtype, self.options, self.choice,
                        transposed=self.transposed, like=self)  # fmt: skip

    def explain(self) -> str:
        """Not collective (every rank holds the same text; the transfer paths were summed over the
        ranks when the plan was made). The strategy and why, the transport, backend and transfer
        paths (:func:`~sparsewire.wire.paths.describe_paths`), bytes and messages per link
        class, per-rank maxima with the max/mean ratio, and the predicted time."""
        stats, executor, compress = self.stats, self.executor, self.options.compress
        size = self.comm.Get_size()
        lines = [
            f"{'A.T @ G' if self.transposed else 'A @ B'}: A {self.matrix.shape[0]} x {self.matrix.shape[1]}, "
            f"{self.matrix.nnz} nonzeros, P = {size}, k = {self.k}, {self.dtype.name}",
            f"strategy {self.rank_plan.strategy.value}, mode {self.mode}, {self.threads} thread(s) per rank"
            + (", deterministic" if self.deterministic else ""),
            f"transport {self.transport}: bytes counted from {self.counted_by}",
            f"backend {self.backend} on {self.device}: {self.executor.kernels.description}",
            *describe_paths(executor.transfer_rule, executor.stages_messages, self.transport, self.transfer_summary, compress),
            codecs.describe(self.options.codec, self.codec_passes),
            *codec_choice.describe_choice(executor.codec_choice),
            self.choice.reason(),
            *self.choice.candidate_lines(),
        ]
        local = predicted_local_seconds(stats)
        lines += stats.describe_lines() + [
            f"predicted time {self.predicted_seconds * 1e6:.2f} us per multiply under {stats.topology.name}: communication "
            f"{self.predicted_communication_seconds * 1e6:.2f} us"
            + (f", local work {local * 1e6:.2f} us" if local else " (local work unknown: no measured local rates)")
        ]
        return "\n".join(lines)

    @collective_errors
    def save(self, path: str | os.PathLike) -> None:
        """Collective. Write the plan of every rank to one file at ``path`` (written by rank 0; every
        rank passes the same path). The file (NumPy .npz, no pickles) holds the format version, P,
        the checksum of A's pattern, values, partitions and orders (:meth:`DistributedMatrix.checksum`),
        the partitioner's row and column orders when it reordered, the settings and every rank's
        plan arrays."""
        self._check_open()
        topology = self.options.topology
        settings = {
            "k": self.k,
            "dtype": self.dtype.name,
            "transposed": self.transposed,
            "options": self.options.saved(),
            # the topology itself, so that the plan loads where its file goes (MPI's nodes are the loading job's own)
            "topology": None if topology is None or topology.name == "mpi-nodes" else topology_record(topology),
            "choice": {**vars(self.choice), "strategy": self.choice.strategy.value},  # every field, the strategy by name
        }
        write_plan_file(path, self.matrix, self.rank_plan, settings)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        matrix: DistributedMatrix,
        *,
        threads: int | None = None,
        transport: str | None = None,
        backend: str = "numpy",
        device: str = "cpu",
        transfer_calibration: str | os.PathLike | None = None,
    ) -> SpmmPlan:
        """Collective. The plan :meth:`save` wrote, for the same A on the same P (every rank passes
        the same path; rank 0 reads it), with its saved options (strategy, topology, proxy, mode,
        determinism, transport; the topology as saved, links and rates, not re-read) and this run's
        ``threads``, ``backend`` on ``device`` and ``transfer_calibration``; ``transport`` replaces the saved
        one when given.

        Raises:
            PlanMismatchError on every rank, in one line, when the file is for another matrix
            (checksum), another number of ranks or another format version; InputError when it is
            not a plan file.
        """
        run = {"threads": threads, "backend": backend, "device": device, "transfer_calibration": transfer_calibration}
        return load_plan(cls, path, matrix, {**run, **({"transport": transport} if transport is not None else {})})

    def close(self) -> None:
        """Collective. Free the executor's requests and communicator (and the transposed plan's)."""
        partner, self._transpose = self._transpose, None
        self.executor.close()
        if partner is not None and partner._transpose is self:
            partner._transpose = None
            partner.close()

    @property
    def closed(self) -> bool:
        """Not collective. Whether :meth:`close` ran (every entry point then refuses the plan)."""
        return self.executor._closed

    def _check_open(self) -> None:
        """Every rank closed the plan together (close is collective), so every rank raises here alike."""
        if self.executor._closed:
            raise agreed(InputError("this SpmmPlan was closed; make a new one with sparsewire.plan_spmm or A.spmm_plan"))

    def __enter__(self) -> SpmmPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
