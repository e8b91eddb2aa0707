"""Reusable SpMM plans: :class:`SpmmPlan` (plan once, multiply many times, transpose, explain,
save and load), the ``auto`` strategy, and the one-line :func:`spmm`.

A plan fixes A's pattern and values, the partitions, k, the element type, the executor mode and
the threads; its executor (:class:`~sparsewire.exec.spmm.SpmmExecutor`) holds every buffer and
persistent request, so ``plan.multiply(b_local, out=c_local)`` allocates nothing after the first
call (the model is PETSc's ``PetscSF``: set up once, run many times, invert for the transpose).
"""

from __future__ import annotations

import json
import os
import weakref
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.comm.runtime import abort_job, agree_on_error, collective_errors, ranks_on_node
from sparsewire.distributed import DistributedMatrix
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec.spmm import MODES, TRANSPORTS, SpmmExecutor, choose_mode, layout_for_mode, transport_problem
from sparsewire.partition import RowPartition
from sparsewire.plan.plan import Exchange, RankPlan, build_rank_plan_collective
from sparsewire.plan.stats import PlanStats, plan_stats, predicted_seconds, rank_send_summary
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy
from sparsewire.plan.transpose import transpose_rank_plan
from sparsewire.report import format_bytes
from sparsewire.topology import Topology, parse_topology

__all__ = ["SpmmPlan", "StrategyChoice", "plan_spmm", "candidate_strategies", "spmm", "PLAN_FORMAT", "PLAN_FORMAT_VERSION"]

PLAN_FORMAT = "sparsewire-spmm-plan"
PLAN_FORMAT_VERSION = 1


@dataclass(frozen=True)
class StrategyChoice:
    """Why a plan has its strategy: every candidate's predicted seconds and bytes per multiply
    under ``model`` (the topology's cost model, :func:`~sparsewire.plan.stats.predicted_seconds`)."""

    strategy: Strategy
    requested: str
    model: str
    candidates: dict[str, tuple[float, int]]

    def reason(self) -> str:
        """Not collective. One sentence: the chosen strategy and why."""
        if self.requested != "auto":
            return f"strategy {self.strategy.value} was requested"
        seconds, nbytes = self.candidates[self.strategy.value]
        others = sorted((s, b, name) for name, (s, b) in self.candidates.items() if name != self.strategy.value)
        text = f"auto chose {self.strategy.value}: least predicted time under {self.model} ({seconds * 1e6:.2f} us, {format_bytes(nbytes)})"
        if others:
            s, b, name = others[0]
            tie = " (a tie, broken by fewer bytes)" if s == seconds else ""
            text += f"; next {name} ({s * 1e6:.2f} us, {format_bytes(b)}){tie}"
        return text


def candidate_strategies(topology: Topology | None) -> list[Strategy]:
    """The strategies ``auto`` compares: the executable flat ones, and the hierarchical ones when
    the topology has groups (more than one level)."""
    grouped = topology is not None and len(topology.levels) > 1
    return [s for s in EXECUTABLE_STRATEGIES if grouped or not s.hierarchical]


def _stats(comm: MPI.Comm, plan: RankPlan, k: int, itemsize: int, model: Topology) -> PlanStats:
    summaries = comm.allgather(rank_send_summary(plan))
    return plan_stats(summaries, k, itemsize, plan.strategy, comm.Get_size(), model)


def _check_arguments(matrix: DistributedMatrix, k, dtype, strategy, topology, mode, threads, proxy, transport) -> str | None:
    if not isinstance(matrix, DistributedMatrix):
        return f"expected a DistributedMatrix from sparsewire.distribute (got {type(matrix).__name__})"
    if not isinstance(k, (int, np.integer)) or k < 1:
        return f"k must be a positive integer (got {k!r})"
    if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        return f"dtype {np.dtype(dtype)} is not supported; use numpy.float32 or numpy.float64"
    if mode is not None and mode != "auto" and mode not in MODES:
        return f"unknown mode {mode!r}; choose from {', '.join(MODES)}, auto or None"
    if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
        return f"threads must be a positive integer or None (got {threads!r})"
    if topology is not None and not isinstance(topology, Topology):
        return f"topology must be a sparsewire.Topology or None (got {type(topology).__name__}); see sparsewire.parse_topology"
    if transport not in TRANSPORTS:
        return f"unknown transport {transport!r}; choose {' or '.join(TRANSPORTS)}"
    if proxy not in ("local", "balanced"):
        return f"unknown proxy {proxy!r}; choose local or balanced"
    if strategy != "auto":
        try:
            chosen = Strategy(strategy)
        except ValueError:
            return f"unknown strategy {strategy!r}; choose auto or one of {', '.join(s.value for s in EXECUTABLE_STRATEGIES)}"
        if not chosen.executable:
            return f"strategy {chosen.value!r} is accounting only and cannot run; choose auto or an executable strategy"
        if chosen.hierarchical and (topology is None or len(topology.levels) < 2):
            return f"strategy {chosen.value!r} routes through groups; pass a topology with groups (e.g. Topology.nodes(2))"
    return None


@collective_errors
def plan_spmm(
    matrix: DistributedMatrix,
    k: int,
    dtype=np.float64,
    *,
    strategy: str = "auto",
    topology: Topology | None = None,
    mode: str | None = None,
    threads: int | None = None,
    deterministic: bool = False,
    proxy: str = "local",
    transport: str = "mpi",
) -> SpmmPlan:
    """Collective. Plan ``C = A @ B`` for the distributed A and a B of ``k`` columns.

    Args:
        matrix: A, from :func:`sparsewire.distribute`.
        k: columns of B.
        dtype: numpy.float32 or numpy.float64.
        strategy: ``auto`` or one of block, column, row, joint (and with a grouped topology
            column-hier, joint-hier, joint-group). ``auto`` plans every candidate
            (:func:`candidate_strategies`) and keeps the least predicted communication time
            ``T = sum_steps max_(class, rank) (messages * (latency + overhead) + bytes / bandwidth)``
            under ``topology`` (flat, one link class, when None); ties go to fewer bytes.
        topology: the cluster model (:class:`~sparsewire.topology.Topology`); None = flat.
        mode: executor mode (bulk, overlap, pipelined, early, partitioned) or None/``auto``
            (:func:`~sparsewire.exec.spmm.choose_mode`).
        threads: threads per rank (default: cores / ranks on the node).
        deterministic: fixed summation order (C bitwise identical across runs, modes, threads).
        proxy: hierarchical strategies: which rank of a group receives a remote rank's B rows,
            ``local`` (the same local rank, CoLa) or ``balanced`` (spread by bytes).
        transport: how messages move: ``mpi`` (default) or ``torch`` (torch.distributed on the
            default process group, set up from MPI when there is none; every mode but
            partitioned; see :mod:`sparsewire.exec.torch_transport`).

    Returns:
        :class:`SpmmPlan`, ready to multiply.
    """
    comm = matrix.comm if isinstance(matrix, DistributedMatrix) else MPI.COMM_SELF
    agree_on_error(comm, _check_arguments(matrix, k, dtype, strategy, topology, mode, threads, proxy, transport))
    k, dtype = int(k), np.dtype(dtype)
    if mode in (None, "auto"):
        from sparsewire.exec.kernels import default_threads

        sharing = ranks_on_node(comm)
        mode = choose_mode(k, sharing, threads or default_threads(sharing))
    agree_on_error(comm, transport_problem(transport, mode))
    if topology is not None and topology.rank_groups is not None:
        topology.groups(comm.Get_size())  # the same answer on every rank: raises everywhere
    layout = layout_for_mode(mode)
    model = topology or Topology.flat()
    names = candidate_strategies(topology) if strategy == "auto" else [Strategy(strategy)]
    best = None
    candidates = {}
    for candidate in names:
        plan = build_rank_plan_collective(
            comm, matrix.local_rows, matrix.row_partition, matrix.col_partition, candidate, topology, layout=layout, proxy=proxy
        )
        stats = _stats(comm, plan, k, dtype.itemsize, model)
        seconds = predicted_seconds(stats)
        candidates[candidate.value] = (seconds, stats.total_bytes)
        if best is None or (seconds, stats.total_bytes) < (best[2], best[1].total_bytes):
            best = (plan, stats, seconds)
    plan, stats, _ = best
    choice = StrategyChoice(plan.strategy, strategy if strategy == "auto" else Strategy(strategy).value, model.name, candidates)
    return SpmmPlan(matrix, plan, stats, k, dtype, mode, threads, deterministic, topology, choice, transport=transport)


class SpmmPlan:
    """A plan of ``C = A @ B`` (or of ``A.T @ G`` after :meth:`transpose`) with its executor.

    Attributes:
        matrix: the :class:`~sparsewire.distributed.DistributedMatrix` A.
        rank_plan: this rank's :class:`~sparsewire.plan.plan.RankPlan`.
        stats: the :class:`~sparsewire.plan.stats.PlanStats` (bytes, messages, per-rank maxima,
            per link class and predicted time under the topology, flat when none was given).
        k, dtype, mode, threads, deterministic, transport: what the executor runs.
        transposed: True for the plan of ``A.T @ G``.
        choice: the :class:`StrategyChoice` (why this strategy).
    """

    def __init__(
        self,
        matrix: DistributedMatrix,
        rank_plan: RankPlan,
        stats: PlanStats,
        k: int,
        dtype,
        mode: str,
        threads: int | None,
        deterministic: bool,
        topology: Topology | None,
        choice: StrategyChoice,
        *,
        transposed: bool = False,
        transport: str = "mpi",
    ) -> None:
        """Collective (makes the executor). Use :func:`plan_spmm` or ``matrix.spmm_plan``."""
        self.matrix, self.comm = matrix, matrix.comm
        self.rank_plan, self.stats = rank_plan, stats
        self.k, self.dtype, self.mode = int(k), np.dtype(dtype), mode
        self.deterministic, self.topology, self.choice = bool(deterministic), topology, choice
        self.transposed, self.transport = transposed, transport
        self.executor = SpmmExecutor(
            rank_plan, self.comm, self.k, self.dtype, mode, threads=threads, deterministic=deterministic, transport=transport
        )
        self.threads = self.executor.threads
        self._transpose: SpmmPlan | None = None

    def __repr__(self) -> str:
        what = "A.T @ G" if self.transposed else "A @ B"
        return (
            f"<SpmmPlan {what}: {self.rank_plan.strategy.value}/{self.mode}, k = {self.k}, {self.dtype.name}, "
            f"{self.comm.Get_size()} ranks, {self.transport} transport>"
        )

    @property
    def input_rows(self) -> int:
        """Rows of the input block this rank passes to :meth:`multiply`."""
        return self.rank_plan.local_shape[1]

    @property
    def output_rows(self) -> int:
        """Rows of the result block this rank gets from :meth:`multiply`."""
        return self.rank_plan.local_shape[0]

    def multiply(self, b_local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Collective. This rank's rows of ``C = A @ B`` (``A.T @ G`` for a transposed plan).

        Args:
            b_local: this rank's rows of B, shape (``input_rows``, k): the rows
                ``matrix.col_partition.range(rank)`` (``row_partition`` when transposed). The
                product is fastest when B's rows start on cache lines (``sparsewire.empty_aligned``
                allocates such an array; :mod:`sparsewire.aligned` has the measurements).
            out: optional C-contiguous array of shape (``output_rows``, k) and the plan's dtype to
                write C into (then nothing is allocated). A large C is streamed to memory when its
                rows start on cache lines: ``sparsewire.empty_aligned`` allocates such an array, as
                the plan does when ``out`` is not given.

        Returns:
            ``C_p = sum_j A[rows_p, j] B[j, :]`` for this rank's rows p.

        Raises:
            PlanMismatchError for a wrong shape, dtype or a closed plan. On a job of several ranks
            the other ranks may already wait for this rank's messages, so there the error
            aborts the job with its message instead (it never hangs).
        """
        try:
            return self.executor.multiply(b_local, out)
        except PlanMismatchError as error:  # raised before any message left this rank
            if self.comm.Get_size() > 1:
                abort_job(self.comm, str(error))
            raise

    @property
    def bytes_received(self) -> int:
        """Bytes this rank received in the last multiply, as the transport counted them
        (:attr:`counted_by`; MPI: the receive statuses)."""
        return self.executor.bytes_received

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
    def transpose(self) -> SpmmPlan:
        """Collective. The plan of ``A.T @ G`` on the same partitions (G rows under A's row
        partition, result rows under A's column partition), with the same k, dtype, mode and
        threads. It is the adjoint of this plan (:mod:`sparsewire.plan.transpose`): every message
        reversed with the same rows, so its bytes equal this plan's; on the same transport. Made once and cached;
        ``plan.transpose().transpose()`` is ``plan``."""
        if self._transpose is None:
            send_keys = _send_keys(self.comm, self.rank_plan)
            plan = transpose_rank_plan(self.rank_plan, send_keys)
            model = self.topology or Topology.flat()
            stats = _stats(self.comm, plan, self.k, self.dtype.itemsize, model)
            self._transpose = SpmmPlan(
                self.matrix, plan, stats, self.k, self.dtype, self.mode, self.threads, self.deterministic,
                self.topology, self.choice, transposed=not self.transposed, transport=self.transport,
            )
            self._transpose._transpose = self
        return self._transpose

    def explain(self) -> str:
        """Not collective (every rank holds the same text). The strategy and why, bytes and
        messages per link class, per-rank maxima with the max/mean ratio, and the predicted time."""
        stats = self.stats
        size = self.comm.Get_size()
        lines = [
            f"{'A.T @ G' if self.transposed else 'A @ B'}: A {self.matrix.shape[0]} x {self.matrix.shape[1]}, "
            f"{self.matrix.nnz} nonzeros, P = {size}, k = {self.k}, {self.dtype.name}",
            f"strategy {self.rank_plan.strategy.value}, mode {self.mode}, {self.threads} thread(s) per rank"
            + (", deterministic" if self.deterministic else ""),
            f"transport {self.transport}: bytes counted from {self.counted_by}",
            self.choice.reason(),
        ]
        if self.choice.requested == "auto" and len(self.choice.candidates) > 1:
            parts = ", ".join(f"{name} {s * 1e6:.2f} us / {format_bytes(b)}" for name, (s, b) in sorted(self.choice.candidates.items(), key=lambda x: x[1]))
            lines.append(f"candidates (predicted time / bytes): {parts}")
        lines.append(f"per multiply: {format_bytes(stats.total_bytes)} in {stats.messages} messages; setup {format_bytes(int(stats.setup_bytes))}")
        classes = stats.class_totals()
        for name in ("intra_group", "inter_group"):
            if classes[f"{name}_messages"]:
                lines.append(f"  {name.replace('_', '-')}: {format_bytes(classes[f'{name}_bytes'])} in {classes[f'{name}_messages']} messages")
        for label, per_rank in (("send", stats.send_bytes_per_rank), ("receive", stats.recv_bytes_per_rank)):
            mean = float(per_rank.mean()) if per_rank.size else 0.0
            ratio = f"{per_rank.max() / mean:.2f}" if mean > 0 else "-"
            lines.append(f"busiest rank {label}s {format_bytes(int(per_rank.max(initial=0)))} (max/mean {ratio})")
        lines.append(f"predicted communication time {predicted_seconds(stats) * 1e6:.2f} us per multiply under {stats.topology.name}")
        return "\n".join(lines)

    @collective_errors
    def save(self, path: str | os.PathLike) -> None:
        """Collective. Write the plan of every rank to one file at ``path`` (written by rank 0; every
        rank passes the same path). The file (NumPy .npz, no pickles) holds the format version, P,
        the checksum of A's pattern, values, partitions and orders (:meth:`DistributedMatrix.checksum`),
        the partitioner's row and column orders when it reordered, the settings and every rank's
        plan arrays."""
        checksum = self.matrix.checksum()
        arrays = _plan_arrays(self.rank_plan)
        gathered = self.comm.gather(arrays, root=0)
        problem = None
        if self.comm.Get_rank() == 0:
            meta = {
                "format": PLAN_FORMAT,
                "version": PLAN_FORMAT_VERSION,
                "ranks": self.comm.Get_size(),
                "checksum": checksum,
                "k": self.k,
                "dtype": self.dtype.name,
                "mode": self.mode,
                "deterministic": self.deterministic,
                "transposed": self.transposed,
                "transport": self.transport,
                "topology": None if self.topology is None else self.topology.name,
                "choice": {"strategy": self.choice.strategy.value, "requested": self.choice.requested,
                           "model": self.choice.model, "candidates": self.choice.candidates},
            }
            flat = {"meta": np.array(json.dumps(meta))}
            for name in ("row_order", "col_order"):  # the partitioner's permutation travels with the plan
                order = getattr(self.matrix, name)
                if order is not None:
                    flat[name] = np.asarray(order, np.int64)
            for rank, rank_arrays in enumerate(gathered):
                flat.update({f"r{rank}/{name}": value for name, value in rank_arrays.items()})
            try:
                with open(path, "wb") as handle:
                    np.savez(handle, **flat)
            except OSError as error:
                problem = f"cannot write the plan to {path}: {error.strerror}; check the directory exists and is writable"
        agree_on_error(self.comm, problem)

    @classmethod
    def load(cls, path: str | os.PathLike, matrix: DistributedMatrix, *, threads: int | None = None, transport: str | None = None) -> SpmmPlan:
        """Collective. The plan :meth:`save` wrote, for the same A on the same P (every rank passes
        the same path; rank 0 reads it), on ``transport`` (None: the one it was saved with).

        Raises:
            PlanMismatchError on every rank, in one line, when the file is for another matrix
            (checksum), another number of ranks or another format version; InputError when it is
            not a plan file.
        """
        return _load(matrix, cls, path, threads, transport)

    def close(self) -> None:
        """Collective. Free the executor's requests and communicator (and the transposed plan's)."""
        partner, self._transpose = self._transpose, None
        self.executor.close()
        if partner is not None and partner._transpose is self:
            partner._transpose = None
            partner.close()

    def __enter__(self) -> SpmmPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _send_keys(comm: MPI.Comm, plan: RankPlan) -> list[np.ndarray]:
    """Collective. The global key of every row this rank sends, per exchange: each receiver hands
    every sender the keys of the rows it receives from it."""
    keys = []
    size = comm.Get_size()
    for exchange in plan.exchanges:
        outgoing = [np.zeros(0, np.int64) for _ in range(size)]
        bounds = np.concatenate(([0], np.cumsum(exchange.recv_counts)))
        for position, source in enumerate(exchange.recv_ranks):
            outgoing[int(source)] = exchange.receive_keys[bounds[position] : bounds[position + 1]]
        incoming = comm.alltoall(outgoing)
        keys.append(np.concatenate([incoming[int(d)] for d in exchange.send_ranks] + [np.zeros(0, np.int64)]))
    return keys


_EXCHANGE_ARRAYS = ("send_ranks", "send_counts", "recv_ranks", "recv_counts", "send_kinds", "receive_kinds", "receive_keys")


def _csr_arrays(prefix: str, matrix: sp.csr_array) -> dict[str, np.ndarray]:
    return {f"{prefix}.indptr": matrix.indptr, f"{prefix}.indices": matrix.indices, f"{prefix}.data": matrix.data,
            f"{prefix}.shape": np.asarray(matrix.shape, np.int64)}


def _csr_from(arrays, prefix: str) -> sp.csr_array:
    shape = tuple(int(v) for v in arrays[f"{prefix}.shape"])
    return sp.csr_array((arrays[f"{prefix}.data"], arrays[f"{prefix}.indices"], arrays[f"{prefix}.indptr"]), shape=shape)


def _plan_arrays(plan: RankPlan) -> dict[str, np.ndarray]:
    """A rank plan as named arrays (the .npz layout of :meth:`SpmmPlan.save`)."""
    arrays = {
        "header": np.array([plan.rank, plan.setup_entries, len(plan.exchanges)], np.int64),
        "strategy": np.array(plan.strategy.value),
        "layout": np.array(plan.layout),
        "row_offsets": plan.row_partition.offsets,
        "col_offsets": plan.col_partition.offsets,
        "groups": np.asarray(plan.groups, np.int64),
        **_csr_arrays("diagonal", plan.diagonal),
    }
    for index, exchange in enumerate(plan.exchanges):
        prefix = f"e{index}"
        arrays[f"{prefix}.header"] = np.array(
            [exchange.step, -1 if exchange.input is None else exchange.input, -1 if exchange.receive_slot is None else exchange.receive_slot],
            np.int64,
        )
        arrays.update({f"{prefix}.{name}": np.asarray(getattr(exchange, name)) for name in _EXCHANGE_ARRAYS})
        arrays.update(_csr_arrays(f"{prefix}.send_matrix", exchange.send_matrix))
        arrays.update(_csr_arrays(f"{prefix}.receive_matrix", exchange.receive_matrix))
    return arrays


def _plan_from_arrays(arrays: dict[str, np.ndarray]) -> RankPlan:
    rank, setup_entries, n_exchanges = (int(v) for v in arrays["header"])
    exchanges = []
    for index in range(n_exchanges):
        prefix = f"e{index}"
        step, source, slot = (int(v) for v in arrays[f"{prefix}.header"])
        exchanges.append(
            Exchange(
                step=step,
                input=None if source < 0 else source,
                receive_slot=None if slot < 0 else slot,
                send_matrix=_csr_from(arrays, f"{prefix}.send_matrix"),
                receive_matrix=_csr_from(arrays, f"{prefix}.receive_matrix"),
                **{name: arrays[f"{prefix}.{name}"] for name in _EXCHANGE_ARRAYS},
            )
        )
    return RankPlan(
        rank=rank,
        strategy=Strategy(str(arrays["strategy"])),
        layout=str(arrays["layout"]),
        row_partition=RowPartition(arrays["row_offsets"]),
        col_partition=RowPartition(arrays["col_offsets"]),
        groups=arrays["groups"],
        diagonal=_csr_from(arrays, "diagonal"),
        exchanges=tuple(exchanges),
        setup_entries=setup_entries,
    )


@collective_errors
def _load(matrix: DistributedMatrix, cls, path, threads: int | None, transport: str | None) -> SpmmPlan:
    comm = matrix.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    checksum = matrix.checksum()
    problem, meta, pieces = None, None, None
    if rank == 0:
        try:
            with np.load(path, allow_pickle=False) as archive:
                meta = json.loads(str(archive["meta"]))
                if meta.get("format") != PLAN_FORMAT:
                    raise InputError(f"{path} is not a sparsewire SpMM plan file")
                if meta["version"] != PLAN_FORMAT_VERSION:
                    raise PlanMismatchError(
                        f"{path} is plan format version {meta['version']} but this sparsewire reads version "
                        f"{PLAN_FORMAT_VERSION}; plan again and save"
                    )
                if meta["ranks"] != size:
                    raise PlanMismatchError(f"{path} holds a plan for P = {meta['ranks']} ranks, not {size}; load it on {meta['ranks']} ranks or plan again")
                if meta["checksum"] != checksum:
                    raise PlanMismatchError(
                        f"{path} was saved for another matrix or partition (checksum {meta['checksum'][:12]} != "
                        f"{checksum[:12]}); plan this matrix with matrix.spmm_plan(...)"
                    )
                for name in ("row_order", "col_order"):
                    saved, current = (archive[name] if name in archive.files else None), getattr(matrix, name)
                    if (saved is None) != (current is None) or (saved is not None and not np.array_equal(saved, current)):
                        raise PlanMismatchError(f"{path} was saved for another ordering of the matrix ({name}); distribute it with the same partitioner")
                pieces = [{} for _ in range(size)]
                for name in archive.files:
                    if name not in ("meta", "row_order", "col_order"):
                        owner, _, field = name.partition("/")
                        pieces[int(owner[1:])][field] = archive[name]
        except (OSError, ValueError, KeyError) as error:
            if isinstance(error, (InputError, PlanMismatchError)):
                problem = error
            else:
                problem = InputError(f"cannot read a plan from {path}: {error}; give a file written by SpmmPlan.save")
    agree_on_error(comm, problem)
    meta = comm.bcast(meta, root=0)
    transport = transport or meta.get("transport", "mpi")  # files saved before transports ran on MPI
    agree_on_error(comm, transport_problem(transport, meta["mode"]))
    plan = _plan_from_arrays(comm.scatter(pieces, root=0))
    topology = _topology_named(meta["topology"], comm)
    model = topology or Topology.flat()
    stats = _stats(comm, plan, meta["k"], np.dtype(meta["dtype"]).itemsize, model)
    choice_meta = meta["choice"]
    choice = StrategyChoice(
        Strategy(choice_meta["strategy"]), choice_meta["requested"], choice_meta["model"],
        {name: (float(s), int(b)) for name, (s, b) in choice_meta["candidates"].items()},
    )
    return cls(
        matrix, plan, stats, meta["k"], np.dtype(meta["dtype"]), meta["mode"], threads, meta["deterministic"],
        topology, choice, transposed=meta["transposed"], transport=transport,
    )


def _topology_named(name: str | None, comm: MPI.Comm) -> Topology | None:
    if name is None:
        return None
    if name == "mpi-nodes":
        return Topology.from_mpi(comm)
    return parse_topology(name)


_PLAN_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@collective_errors
def spmm(matrix: DistributedMatrix, b_local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Collective. This rank's rows of ``C = A @ B`` in one line.

    The first call for a given A, k and dtype plans (strategy and mode ``auto``) and keeps the plan
    with A; later calls with the same A, k and dtype reuse it. ``b_local``: this rank's rows of B
    (``matrix.col_partition.range(rank)``), float32 or float64 (anything else is converted to
    float64). Every rank must pass the same k and dtype.
    """
    b_local = np.asarray(b_local)
    dtype = b_local.dtype if b_local.dtype in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(np.float64)
    key = (b_local.shape[1] if b_local.ndim == 2 else -1, dtype.name)
    # One small allgather per call: a rank with another k or dtype would otherwise plan while the
    # others multiply (a hang). Code that needs every microsecond keeps a plan from spmm_plan.
    keys = matrix.comm.allgather(key)
    problem = None
    if key[0] < 1:
        problem = f"rank {matrix.comm.Get_rank()}: b_local must be a 2-D array (rows, k); got shape {b_local.shape}"
    elif len(set(keys)) != 1:
        problem = f"the ranks passed B blocks of different widths or types {sorted(set(keys))}; every rank passes the same k and dtype"
    agree_on_error(matrix.comm, problem)
    plans = _PLAN_CACHE.setdefault(matrix, {})
    if key not in plans:
        plans[key] = plan_spmm(matrix, key[0], dtype)
    return plans[key].multiply(np.ascontiguousarray(b_local, dtype=dtype), out)
