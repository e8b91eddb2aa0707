"""The SpMM executor: runs one rank's :class:`~sparsewire.plan.RankPlan` over MPI.

Per multiply, with B_p the rank's rows of B and C_p its rows of C, for every exchange e of the plan
(in order of steps):

1. pack: ``send_buffer_e = send_matrix_e @ [B_p ; receive_buffer_(input of e)]`` (selected B rows
   by a gather, partial C rows, forwarded B rows and summed partial C rows by a CSR product);
2. exchange: every destination gets its rows of ``send_buffer_e``; every source's rows land in
   ``receive_buffer_e``;
3. compute: ``C_p += receive_matrix_e @ receive_buffer_e``, after ``C_p = diagonal @ B_p``.

Modes:

* ``bulk``: exchange after exchange, all messages of one completed before its product.
* ``overlap``: the exchanges of a step are started together, the diagonal block is multiplied
  while the first step's messages are in flight (PETSc's MatMult ordering), and a relay waits only
  for the exchange it forwards from (SHIRO Alg. 1).
* ``pipelined``: the same loop on a plan with the ``pipelined`` layout (CoLa Alg. 3): step d starts
  round d+1's inter-group transfer into one of two receive buffers while round d is computed.
* ``early`` (Collom & Bienz sec. 3.2, Alg. 1): receives are completed one at a time with
  ``MPI_Waitany``; each arriving message is multiplied at once with the CSC columns it feeds, and a
  relayed message is packed and sent as soon as the messages it forwards from have arrived.
* ``partitioned`` (sec. 3.3, Algs. 3-5): MPI-4 ``MPI_Psend_init``/``MPI_Precv_init`` with T
  partitions per message; T threads each pack their partition and call ``MPI_Pready``, then poll
  ``MPI_Parrived`` and apply every arrived partition (whole B rows and row fragments) to their own
  rows of C. Messages are padded to whole rows with ``rows * k`` divisible by T; the padding is
  not visible in C and not counted as payload. Without partitioned communication the same loop runs
  on T persistent point-to-point requests per message (one notice line).

``deterministic=True`` fixes the summation order: the communication runs as in the mode, but C is
computed after every message has arrived, each row in one pass over one CSR whose entries are
ordered by global column (B rows: local or received) followed by received partial C rows in plan
order. So C is bitwise identical across runs, modes and thread counts, and for the column-based
strategies across P too (the serial CSR product in ascending column order).

Bytes are counted by MPI: after each multiply ``bytes_received_from[q]`` holds the bytes the
receive statuses report from rank q, and ``delivery_problems`` names every message, over all of the
executor's multiplies, whose count differed from what this rank's plan expects (the plans of two
ranks disagree).

Buffers, operands and requests are made once per executor (one plan, one k, one dtype, T threads);
``multiply(b, out=c)`` then allocates nothing that grows with the problem.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire.aligned import empty_aligned, zeros_aligned
from sparsewire.comm.runtime import mpi_datatype, ranks_on_node
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec import kernels
from sparsewire.plan.plan import AGGREGATE_C, DIRECT_C, RankPlan

__all__ = ["SpmmExecutor", "MODES", "parse_modes", "layout_for_mode", "partitioned_available", "choose_mode"]

MODES = ("bulk", "overlap", "pipelined", "early", "partitioned")
_TAG = 4242
_FALLBACK_TAG = 8000
_FALLBACK_NOTICE_GIVEN = False  # one notice line per process


def choose_mode(k: int, node_ranks: int, threads: int) -> str:
    """The default mode, from ``bench/async_modes.py`` on the 2-core reference machine (8 matrices,
    k = 1 ... 256, geometric mean of the time ratio to ``bulk``): with ranks x threads within the
    cores, ``early`` 0.87 and ``overlap`` 0.94 for k <= 16, ``overlap`` 1.03 and ``early`` 1.08
    above; oversubscribed (4 ranks on 2 cores), ``overlap`` 0.99 and ``early`` 1.77 (its
    ``MPI_Waitany`` polling takes the cores other ranks need). So ``early`` for k <= 16 when the
    cores suffice, else ``overlap``."""
    from sparsewire.exec.kernels import default_threads

    within_cores = node_ranks * threads <= default_threads(1)
    return "early" if within_cores and k <= 16 else "overlap"


def parse_modes(text: str) -> list[str]:
    """Parse a comma-separated list of executor modes (``all`` means every mode; ``auto`` is
    resolved by :func:`choose_mode` once k and the threads are known)."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(MODES)
    if names == ["auto"]:
        return names
    for name in names:
        if name not in MODES:
            raise InputError(f"unknown mode {name!r}; choose from {', '.join(MODES)}, auto or all")
    if not names:
        raise InputError(f"no mode given; choose from {', '.join(MODES)}")
    return list(dict.fromkeys(names))


def layout_for_mode(mode: str) -> str:
    """The plan layout a mode runs: ``pipelined`` for the pipelined mode, ``merged`` otherwise."""
    return "pipelined" if mode == "pipelined" else "merged"


def partitioned_available(comm: MPI.Comm) -> bool:
    """Whether the MPI library offers MPI-4 partitioned communication (``MPI_Psend_init``).

    ``SPARSEWIRE_PARTITIONED=off`` in the environment answers no (to exercise the fallback)."""
    import os

    if os.environ.get("SPARSEWIRE_PARTITIONED", "").lower() in ("off", "0", "no"):
        return False
    # MPI-4 libraries have it (probing with MPI_PROC_NULL crashes MPICH 5.0, so ask the version).
    return hasattr(comm, "Psend_init") and MPI.Get_version() >= (4, 0)


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _padded_rows(rows: np.ndarray, k: int, threads: int) -> np.ndarray:
    """Fewest rows >= ``rows`` whose ``rows * k`` elements split into ``threads`` equal partitions."""
    padded = rows.astype(np.int64).copy()
    for position, count in enumerate(padded):
        while (count * k) % threads:
            count += 1
        padded[position] = count
    return padded


def _row_map(offsets: np.ndarray, padded_offsets: np.ndarray) -> np.ndarray:
    """New position of every row when each message's rows move to its padded offset."""
    counts = np.diff(offsets)
    shift = np.repeat(padded_offsets[:-1] - offsets[:-1], counts)
    return np.arange(offsets[-1], dtype=np.int64) + shift


def _is_selection(matrix: sp.csr_array) -> bool:
    return bool(np.all(np.diff(matrix.indptr) == 1) and np.all(matrix.data == 1))


class _Exchange:
    """Buffers, operands and requests of one exchange of one rank."""

    def __init__(self, index: int, exchange, executor: SpmmExecutor, receive_storage: np.ndarray | None) -> None:
        k, dtype, threads = executor.k, executor.dtype, executor.threads
        n_b = executor.plan.local_shape[1]
        self.index, self.exchange, self.input = index, exchange, exchange.input
        self.send_ranks = exchange.send_ranks.tolist()
        self.recv_ranks = exchange.recv_ranks.tolist()
        send_offsets, recv_offsets = _offsets(exchange.send_counts), _offsets(exchange.recv_counts)
        partitioned = executor.mode == "partitioned"
        if partitioned:
            # Whole padding rows so every message splits into T equal partitions.
            self.send_offsets = _offsets(_padded_rows(exchange.send_counts, k, threads))
            self.recv_offsets = _offsets(_padded_rows(exchange.recv_counts, k, threads))
        else:
            self.send_offsets, self.recv_offsets = send_offsets, recv_offsets
        self.expected_elements = (np.diff(recv_offsets) * k).tolist()
        self.recv_elements = (np.diff(self.recv_offsets) * k).tolist()
        send_rows_map = _row_map(send_offsets, self.send_offsets)
        recv_rows_map = _row_map(recv_offsets, self.recv_offsets)

        # Send side: a gather where every row is one B row, else a CSR product (+ the input part).
        send = sp.csr_array(exchange.send_matrix)
        n_send = int(self.send_offsets[-1])
        from_b = sp.csr_array(send[:, :n_b])
        self.send_buffer = zeros_aligned((n_send, k), dtype)
        self.pack_gather = self.pack_b = self.pack_input = None
        if exchange.input is None and _is_selection(from_b):
            index_rows = np.zeros(n_send, np.int64)
            index_rows[send_rows_map] = from_b.indices
            self.pack_gather = kernels.GatherOperand.from_index(index_rows, threads)
        else:
            self.pack_b = kernels.CsrOperand.from_matrix(self._move_rows(from_b, send_rows_map, n_send), dtype, threads)
            if exchange.input is not None:
                source = executor._exchanges[exchange.input]
                from_input = sp.csr_array(send[:, n_b:])
                from_input = self._move_columns(from_input, source.recv_rows_map, int(source.recv_offsets[-1]))
                self.pack_input = kernels.CsrOperand.from_matrix(
                    self._move_rows(from_input, send_rows_map, n_send), dtype, threads
                )
        self.recv_rows_map = recv_rows_map

        # Receive side.
        n_recv = int(self.recv_offsets[-1])
        if receive_storage is None:
            receive_storage = zeros_aligned((n_recv, k), dtype)
        self.receive_buffer = receive_storage[:n_recv]
        receive = self._move_columns(sp.csr_array(exchange.receive_matrix), recv_rows_map, n_recv)
        self.receive_matrix = receive  # in padded buffer positions (the deterministic product reads it)
        self.unpack = self.unpack_columns = None
        if not executor.deterministic:
            if executor.mode in ("early", "partitioned"):
                self.unpack_columns = kernels.CscOperand.from_matrix(receive, dtype, executor.row_bounds)
            else:
                self.unpack = kernels.CsrOperand.from_matrix(receive, dtype, threads)

        # Early mode: which of the input's messages each send message needs.
        self.dependencies: list[list[int]] = [[] for _ in self.send_ranks]
        self.dependents: list[list[tuple[int, int]]] = [[] for _ in self.recv_ranks]
        if exchange.input is not None and executor.mode == "early":
            source = executor._exchanges[exchange.input]
            operand = self.pack_input
            rows = np.repeat(np.arange(operand.shape[0]), np.diff(operand.indptr))
            message_of_row = np.searchsorted(self.send_offsets, rows, side="right") - 1
            message_of_col = np.searchsorted(source.recv_offsets, operand.indices, side="right") - 1
            pairs = np.unique(np.stack([message_of_row, message_of_col]), axis=1)
            for message, needed in pairs.T.tolist():
                self.dependencies[message].append(needed)
        self.waiting = np.zeros(len(self.send_ranks), np.int64)
        self.arrived = np.zeros(len(self.recv_ranks), bool)

        # Requests.
        self.send_requests: list = []
        self.recv_requests: list = []
        self.recv_statuses = [MPI.Status() for _ in self.recv_ranks]
        self.fallback_statuses = [[MPI.Status() for _ in range(threads)] for _ in self.recv_ranks] if partitioned else []
        self.partition_requests_send: list[list] = []
        self.partition_requests_recv: list[list] = []
        comm, mpi_type = executor.comm, executor._mpi_type
        flat_send, flat_recv = self.send_buffer.reshape(-1), self.receive_buffer.reshape(-1)
        tag = _TAG + index  # exchanges of one step between the same pair must not match each other
        send_elements = np.diff(self.send_offsets) * k
        if partitioned and executor.use_partitioned:
            for source, start, count in zip(self.recv_ranks, self.recv_offsets[:-1] * k, self.recv_elements):
                view = flat_recv[start : start + count]
                self.recv_requests.append(comm.Precv_init([view, count // threads, mpi_type], threads, source, tag))
            for destination, start, count in zip(self.send_ranks, self.send_offsets[:-1] * k, send_elements):
                view = flat_send[start : start + count]
                self.send_requests.append(comm.Psend_init([view, int(count) // threads, mpi_type], threads, destination, tag))
        elif partitioned:
            # Fallback: one persistent point-to-point request per partition.
            for source, start, count in zip(self.recv_ranks, self.recv_offsets[:-1] * k, self.recv_elements):
                size = count // threads
                self.partition_requests_recv.append(
                    [
                        comm.Recv_init([flat_recv[start + t * size : start + (t + 1) * size], mpi_type], source, _FALLBACK_TAG + index * threads + t)
                        for t in range(threads)
                    ]
                )
            for destination, start, count in zip(self.send_ranks, self.send_offsets[:-1] * k, send_elements):
                size = int(count) // threads
                self.partition_requests_send.append(
                    [
                        comm.Send_init([flat_send[start + t * size : start + (t + 1) * size], mpi_type], destination, _FALLBACK_TAG + index * threads + t)
                        for t in range(threads)
                    ]
                )
        else:
            for source, start, count in zip(self.recv_ranks, self.recv_offsets[:-1] * k, self.recv_elements):
                self.recv_requests.append(comm.Recv_init([flat_recv[start : start + count], mpi_type], source, tag))
            for destination, start, count in zip(self.send_ranks, self.send_offsets[:-1] * k, send_elements):
                self.send_requests.append(comm.Send_init([flat_send[start : start + int(count)], mpi_type], destination, tag))
        self.send_flat = flat_send
        self.recv_flat = flat_recv

    @staticmethod
    def _move_rows(matrix: sp.csr_array, rows_map: np.ndarray, n_rows: int) -> sp.csr_array:
        coo = sp.coo_array(matrix)
        return sp.csr_array((coo.data, (rows_map[coo.row], coo.col)), shape=(n_rows, matrix.shape[1]))

    @staticmethod
    def _move_columns(matrix: sp.csr_array, columns_map: np.ndarray, n_cols: int) -> sp.csr_array:
        coo = sp.coo_array(matrix)
        return sp.csr_array((coo.data, (coo.row, columns_map[coo.col])), shape=(matrix.shape[0], n_cols))


class SpmmExecutor:
    """Collective (construction and :meth:`multiply`). Runs ``C = A @ B`` with one plan, many times.

    Args:
        plan: this rank's plan (layout ``pipelined`` for the pipelined mode, ``merged`` otherwise).
        comm: the communicator the plan was built for.
        k: columns of B.
        dtype: float32 or float64 (A's values are cast once).
        mode: one of :data:`MODES`.
        threads: threads per rank for the local kernels (and partitions per message in the
            partitioned mode); default ``cores / ranks on this node``.
        deterministic: fixed summation order (see the module docstring).
    """

    def __init__(
        self,
        plan: RankPlan,
        comm: MPI.Comm,
        k: int,
        dtype=np.float64,
        mode: str = "overlap",
        *,
        threads: int | None = None,
        deterministic: bool = False,
    ) -> None:
        if mode not in MODES:
            raise InputError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        if k < 1:
            raise InputError(f"k must be at least 1 (got {k})")
        if comm.Get_size() != plan.n_ranks or comm.Get_rank() != plan.rank:
            raise PlanMismatchError(
                f"plan for rank {plan.rank} of {plan.n_ranks} used on rank {comm.Get_rank()} of {comm.Get_size()}; "
                "build the plan on the communicator that runs it"
            )
        if plan.layout != layout_for_mode(mode):
            raise PlanMismatchError(
                f"mode {mode!r} runs plans with the {layout_for_mode(mode)!r} layout but this plan is {plan.layout!r}; "
                f"build it with layout={layout_for_mode(mode)!r}"
            )
        sharing = ranks_on_node(comm)
        if threads is None:
            threads = kernels.default_threads(sharing)
        if threads < 1:
            raise InputError(f"threads must be at least 1 (got {threads})")
        if mode == "partitioned" and threads > 1 and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise InputError(
                f"the partitioned mode with {threads} threads calls MPI from every thread and needs MPI_THREAD_MULTIPLE, "
                f"but MPI was initialised at level {MPI.Query_thread()}; set mpi4py.rc.thread_level = 'multiple' before "
                "importing mpi4py.MPI, or use threads=1"
            )
        if mode == "partitioned":
            # Both ends of a message must cut it into the same partitions (and the same padding).
            fewest, most = comm.allreduce(threads, op=MPI.MIN), comm.allreduce(threads, op=MPI.MAX)
            if fewest != most:
                raise InputError(
                    f"the partitioned mode needs the same number of threads on every rank (got {fewest} to {most}); "
                    "pass threads explicitly"
                )
        kernels.set_threads(threads, sharing)
        # A communicator of its own: the executor's tags cannot match the caller's messages.
        comm = comm.Dup()
        self.plan, self.comm, self.k, self.mode = plan, comm, int(k), mode
        self.threads, self.deterministic = int(threads), bool(deterministic)
        self.dtype = np.dtype(dtype)
        self._mpi_type = mpi_datatype(self.dtype)
        self.use_partitioned = mode == "partitioned" and partitioned_available(comm)
        global _FALLBACK_NOTICE_GIVEN
        if mode == "partitioned" and not self.use_partitioned and comm.Get_rank() == 0 and not _FALLBACK_NOTICE_GIVEN:
            _FALLBACK_NOTICE_GIVEN = True
            print(
                "sparsewire: notice: MPI partitioned communication is not available; the partitioned mode runs on "
                "persistent point-to-point requests, one per partition",
                file=sys.stderr,
                flush=True,
            )
        self._diagonal = kernels.CsrOperand.from_matrix(plan.diagonal, self.dtype, self.threads)
        self.row_bounds = self._diagonal.bounds
        self._exchanges: list[_Exchange] = []
        if self.deterministic or mode == "partitioned":
            # One buffer per exchange (no slot sharing), all in one array; in the deterministic mode
            # it starts with a copy of B_p, so one CSR product over it reads B rows and received rows.
            rows = [
                int(_padded_rows(e.recv_counts, self.k, self.threads).sum()) if mode == "partitioned" else int(e.recv_counts.sum())
                for e in plan.exchanges
            ]
            head = plan.local_shape[1] if self.deterministic else 0
            self._stack = zeros_aligned((head + sum(rows), self.k), self.dtype)
            offsets = head + _offsets(np.array(rows, np.int64))
            for index, exchange in enumerate(plan.exchanges):
                storage = self._stack[offsets[index] : offsets[index + 1]]
                self._exchanges.append(_Exchange(index, exchange, self, storage))
        else:
            slot_rows: dict[int, int] = {}
            for exchange in plan.exchanges:
                if exchange.receive_slot is not None:
                    rows = int(exchange.recv_counts.sum())
                    slot_rows[exchange.receive_slot] = max(slot_rows.get(exchange.receive_slot, 0), rows)
            slots = {slot: zeros_aligned((rows, self.k), self.dtype) for slot, rows in slot_rows.items()}
            for index, exchange in enumerate(plan.exchanges):
                storage = slots[exchange.receive_slot] if exchange.receive_slot is not None else None
                self._exchanges.append(_Exchange(index, exchange, self, storage))
        for ex in self._exchanges:
            if ex.input is not None:
                source = self._exchanges[ex.input]
                for message, needed in enumerate(ex.dependencies):
                    for input_message in needed:
                        source.dependents[input_message].append((ex.index, message))
        steps = sorted({e.step for e in plan.exchanges})
        # Within a step, exchanges that need no input start first, so their transfers are in flight
        # while the others wait for what they relay.
        self._schedule = [
            sorted((i for i, e in enumerate(plan.exchanges) if e.step == step), key=lambda i: plan.exchanges[i].input is not None)
            for step in steps
        ]
        self._all_recv = [r for ex in self._exchanges for r in ex.recv_requests]
        self._recv_owner = [(ex.index, m) for ex in self._exchanges for m in range(len(ex.recv_requests))]
        self._any_status = MPI.Status()
        if self.deterministic:
            self._merged = self._merged_operand()
        self.bytes_received_from = np.zeros(plan.n_ranks, np.int64)
        self.delivery_problems: list[str] = []
        self._workers: list[threading.Thread] = []
        self._closed = False

    # ------------------------------------------------------------------------------------------

    def _merged_operand(self):
        """The deterministic product: one CSR over the stack [B_p ; every receive buffer], each row
        ordered by global column (B rows) and then by buffer position (received partial C rows)."""
        plan = self.plan
        n_b = plan.local_shape[1]
        col_start = int(plan.col_partition.offsets[plan.rank])
        n_cols = plan.col_partition.n
        diagonal = sp.coo_array(plan.diagonal)
        rows, cols, values, keys = [diagonal.row], [diagonal.col], [diagonal.data], [diagonal.col + col_start]
        offset = 0
        for ex in self._exchanges:
            rows_here = int(ex.recv_offsets[-1])
            coo = sp.coo_array(ex.receive_matrix)
            # Buffer position -> the received row's kind and global key (padding rows have none).
            original = np.full(rows_here, -1, np.int64)
            original[ex.recv_rows_map] = np.arange(ex.recv_rows_map.size)
            kinds = ex.exchange.receive_kinds[original[coo.col]]
            global_keys = ex.exchange.receive_keys[original[coo.col]]
            is_c = np.isin(kinds, (DIRECT_C, AGGREGATE_C))
            keys.append(np.where(is_c, n_cols + offset + coo.col, global_keys))
            rows.append(coo.row)
            cols.append(n_b + offset + coo.col)
            values.append(coo.data)
            offset += rows_here
        rows, cols, values, keys = map(np.concatenate, (rows, cols, values, keys))
        order = np.lexsort((keys, rows))
        shape = (plan.local_shape[0], self._stack.shape[0])
        indptr = np.searchsorted(rows[order], np.arange(shape[0] + 1)).astype(np.int64)
        matrix = sp.csr_array((values[order], cols[order], indptr), shape=shape)
        return kernels.CsrOperand.from_matrix(matrix, self.dtype, self.threads, keep_order=True)

    @property
    def bytes_received(self) -> int:
        """Bytes MPI delivered to this rank in the last multiply (receive statuses, no padding)."""
        return int(self.bytes_received_from.sum())

    def multiply(self, b_local: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Collective. This rank's rows of ``C = A @ B`` from its rows of B (shape (rows of B
        owned, k)), written into ``out`` when given (shape (rows of A owned, k), C-contiguous, the
        executor's dtype). Arguments are checked before any message is sent (PlanMismatchError)."""
        expected = (self.plan.local_shape[1], self.k)
        if getattr(b_local, "shape", None) != expected:
            raise PlanMismatchError(
                f"rank {self.plan.rank}: the B block has shape {getattr(b_local, 'shape', type(b_local).__name__)}, expected {expected} "
                "(this rank's rows of B by k); give each rank its rows under the plan's column partition"
            )
        if self._closed:
            raise PlanMismatchError("this executor was closed; make a new one")
        if b_local.dtype != self.dtype or not b_local.flags.c_contiguous:
            b_local = np.ascontiguousarray(b_local, dtype=self.dtype)
        if out is None:
            out = empty_aligned((self.plan.local_shape[0], self.k), self.dtype)
        elif out.shape != (self.plan.local_shape[0], self.k) or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise PlanMismatchError(
                f"rank {self.plan.rank}: out must be a C-contiguous {self.dtype} array of shape {(self.plan.local_shape[0], self.k)} "
                f"(got {out.dtype} {out.shape})"
            )
        self.bytes_received_from[:] = 0
        if self.mode == "bulk":
            self._multiply_bulk(b_local, out)
        elif self.mode == "early":
            self._multiply_early(b_local, out)
        elif self.mode == "partitioned":
            self._multiply_partitioned(b_local, out)
        else:
            self._multiply_nonblocking(b_local, out)
        if self.deterministic:
            self._stack[: self.plan.local_shape[1]] = b_local
            kernels.multiply(self._merged, self._stack, out)
        return out

    # ------------------------------------------------------------------------------------------
    # Pieces shared by the modes

    def _pack(self, ex: _Exchange, b_local: np.ndarray) -> None:
        if ex.pack_gather is not None:
            kernels.gather(ex.pack_gather, b_local, ex.send_buffer)
            return
        kernels.multiply(ex.pack_b, b_local, ex.send_buffer)
        if ex.pack_input is not None:
            kernels.multiply(ex.pack_input, self._exchanges[ex.input].receive_buffer, ex.send_buffer, accumulate=True)

    def _pack_message(self, ex: _Exchange, message: int, b_local: np.ndarray) -> None:
        """Rows of one destination only (early relays); serial, small."""
        start, stop = int(ex.send_offsets[message]), int(ex.send_offsets[message + 1])
        kernels.multiply_rows(ex.pack_b, b_local, ex.send_buffer, start, stop)
        kernels.multiply_rows(ex.pack_input, self._exchanges[ex.input].receive_buffer, ex.send_buffer, start, stop, accumulate=True)

    def _count(self, ex: _Exchange, message: int, received: int) -> None:
        """Bytes from one receive's element count (its MPI status); a count other than the plan's
        is a delivery problem."""
        payload = received - (ex.recv_elements[message] - ex.expected_elements[message])
        source = ex.recv_ranks[message]
        self.bytes_received_from[source] += payload * self.dtype.itemsize
        if payload != ex.expected_elements[message]:
            self.delivery_problems.append(
                f"rank {self.plan.rank} received {payload} elements from rank {source} in exchange {ex.index} but its "
                f"plan expects {ex.expected_elements[message]}; the ranks' plans disagree, so build them together "
                "with build_rank_plan_collective"
            )

    def _finish(self, ex: _Exchange, out: np.ndarray) -> None:
        """Wait for every message of one exchange, count it, and add its product to C."""
        if ex.recv_requests:
            MPI.Request.Waitall(ex.recv_requests, ex.recv_statuses)
            for message, status in enumerate(ex.recv_statuses):
                self._count(ex, message, status.Get_count(self._mpi_type))
        if not self.deterministic:
            kernels.multiply(ex.unpack, ex.receive_buffer, out, accumulate=True)

    def _diagonal_product(self, b_local: np.ndarray, out: np.ndarray) -> None:
        if not self.deterministic:
            kernels.multiply(self._diagonal, b_local, out)

    # ------------------------------------------------------------------------------------------
    # Modes

    def _multiply_bulk(self, b_local: np.ndarray, out: np.ndarray) -> None:
        self._diagonal_product(b_local, out)
        for ex in self._exchanges:
            if ex.recv_requests:
                MPI.Prequest.Startall(ex.recv_requests)
            self._pack(ex, b_local)
            if ex.send_requests:
                MPI.Prequest.Startall(ex.send_requests)
            self._finish(ex, out)
            MPI.Request.Waitall(ex.send_requests)

    def _multiply_nonblocking(self, b_local: np.ndarray, out: np.ndarray) -> None:
        finished = [False] * len(self._exchanges)

        def finish(index: int) -> None:
            if not finished[index]:
                self._finish(self._exchanges[index], out)
                finished[index] = True

        for position, step in enumerate(self._schedule):
            for index in step:
                ex = self._exchanges[index]
                if ex.recv_requests:
                    MPI.Prequest.Startall(ex.recv_requests)
                if ex.input is not None:
                    finish(ex.input)
                self._pack(ex, b_local)
                if ex.send_requests:
                    MPI.Prequest.Startall(ex.send_requests)
            if position == 0:
                self._diagonal_product(b_local, out)  # while the first messages are in flight
            else:
                for index in self._schedule[position - 1]:
                    finish(index)
        for index in range(len(self._exchanges)):
            finish(index)
        for ex in self._exchanges:
            MPI.Request.Waitall(ex.send_requests)

    def _multiply_early(self, b_local: np.ndarray, out: np.ndarray) -> None:
        for ex in self._exchanges:
            ex.arrived[:] = False
        for position, step in enumerate(self._schedule):
            for index in step:
                ex = self._exchanges[index]
                if ex.recv_requests:
                    MPI.Prequest.Startall(ex.recv_requests)
                if ex.input is None:
                    self._pack(ex, b_local)
                    if ex.send_requests:
                        MPI.Prequest.Startall(ex.send_requests)
                    continue
                arrived = self._exchanges[ex.input].arrived
                for message, needed in enumerate(ex.dependencies):
                    ex.waiting[message] = sum(1 for m in needed if not arrived[m])
                    if ex.waiting[message] == 0:
                        self._pack_message(ex, message, b_local)
                        ex.send_requests[message].Start()
            if position == 0:
                self._diagonal_product(b_local, out)  # while the first messages are in flight
            else:
                self._arrivals_until(self._schedule[position - 1], b_local, out)
        self._arrivals_until(range(len(self._exchanges)), b_local, out)
        for ex in self._exchanges:
            MPI.Request.Waitall(ex.send_requests)

    def _arrivals_until(self, indices, b_local: np.ndarray, out: np.ndarray) -> None:
        """Complete receives in arrival order (``MPI_Waitany``) until every message of the
        exchanges ``indices`` has been used."""
        targets = [self._exchanges[i] for i in indices]
        while not all(ex.arrived.all() for ex in targets):
            position = MPI.Request.Waitany(self._all_recv, self._any_status)
            if position == MPI.UNDEFINED:
                raise RuntimeError("no receive is active but messages are missing; the executor's schedule is broken")
            index, message = self._recv_owner[position]
            ex = self._exchanges[index]
            self._count(ex, message, self._any_status.Get_count(self._mpi_type))
            ex.arrived[message] = True
            if not self.deterministic:
                start, stop = int(ex.recv_offsets[message]), int(ex.recv_offsets[message + 1])
                kernels.apply_columns(ex.unpack_columns, ex.receive_buffer, out, start, stop)
            for dependent_index, send_message in ex.dependents[message]:
                dependent = self._exchanges[dependent_index]
                dependent.waiting[send_message] -= 1
                if dependent.waiting[send_message] == 0:
                    self._pack_message(dependent, send_message, b_local)
                    dependent.send_requests[send_message].Start()

    # ------------------------------------------------------------------------------------------
    # Partitioned mode: T threads, each packing, sending and computing its own share

    def _multiply_partitioned(self, b_local: np.ndarray, out: np.ndarray) -> None:
        for ex in self._exchanges:
            if self.use_partitioned:
                if ex.recv_requests:
                    MPI.Prequest.Startall(ex.recv_requests)
                if ex.send_requests:
                    MPI.Prequest.Startall(ex.send_requests)
            else:
                for requests in ex.partition_requests_recv:
                    MPI.Prequest.Startall(requests)
        self._arrived_flags = [np.zeros((len(ex.recv_ranks), self.threads), bool) for ex in self._exchanges]
        self._job = (b_local, out)
        self._errors: list[BaseException] = []
        if self.threads == 1:
            self._partition_worker(0)
        else:
            if not self._workers:
                self._start = threading.Barrier(self.threads)
                self._done = threading.Barrier(self.threads)
                self._lock = threading.Lock()
                for thread in range(1, self.threads):
                    worker = threading.Thread(target=self._worker_loop, args=(thread,), daemon=True)
                    worker.start()
                    self._workers.append(worker)
            self._start.wait()
            try:
                self._partition_worker(0)
            except BaseException as error:  # noqa: BLE001 - re-raised after the others stop
                self._errors.append(error)
            self._done.wait()
        if self._errors:
            raise self._errors[0]
        for ex in self._exchanges:
            if self.use_partitioned:
                if ex.recv_requests:
                    MPI.Request.Waitall(ex.recv_requests, ex.recv_statuses)
                    for message, status in enumerate(ex.recv_statuses):
                        self._count(ex, message, status.Get_count(self._mpi_type))
                MPI.Request.Waitall(ex.send_requests)
            else:
                for message in range(len(ex.recv_ranks)):
                    self._count_fallback(ex, message)
                for requests in ex.partition_requests_send:
                    MPI.Request.Waitall(requests)
        self._job = None

    def _worker_loop(self, thread: int) -> None:
        while True:
            self._start.wait()
            if self._closed:
                return
            try:
                self._partition_worker(thread)
            except BaseException as error:  # noqa: BLE001 - handed to the main thread
                self._errors.append(error)
            self._done.wait()

    def _partition_arrived(self, ex: _Exchange, message: int, partition: int) -> bool:
        flags = self._arrived_flags[ex.index]
        if flags[message, partition]:
            return True
        if self.use_partitioned:
            arrived = ex.recv_requests[message].Parrived(partition)
        else:
            request = ex.partition_requests_recv[message][partition]
            if self.threads > 1:
                with self._lock:
                    arrived = bool(flags[message, partition]) or request.Test(ex.fallback_statuses[message][partition])
            else:
                arrived = request.Test(ex.fallback_statuses[message][partition])
        if arrived:
            flags[message, partition] = True
        return arrived

    def _count_fallback(self, ex: _Exchange, message: int) -> None:
        elements = sum(status.Get_count(self._mpi_type) for status in ex.fallback_statuses[message])
        status = MPI.Status()
        status.Set_elements(self._mpi_type, elements)
        self._count(ex, message, status.Get_count(self._mpi_type))

    def _partition_worker(self, thread: int) -> None:
        """Algs. 3 and 4 for one thread: pack partition ``thread`` of every message and mark it
        ready, compute this thread's rows of the diagonal product, then apply every arrived
        partition of every message to this thread's rows of C."""
        b_local, out = self._job
        T, k = self.threads, self.k
        done = [np.zeros((len(ex.recv_ranks), T), bool) for ex in self._exchanges]

        def apply_arrivals(indices, block: bool) -> None:
            while True:
                missing = False
                for index in indices:
                    ex = self._exchanges[index]
                    for message in range(len(ex.recv_ranks)):
                        size = ex.recv_elements[message] // T
                        base = int(ex.recv_offsets[message]) * k
                        for partition in range(T):
                            if done[index][message, partition]:
                                continue
                            if not self._partition_arrived(ex, message, partition):
                                missing = True
                                continue
                            done[index][message, partition] = True
                            if not self.deterministic:
                                start = base + partition * size
                                kernels.apply_elements(ex.unpack_columns, thread, ex.recv_flat, k, out, start, start + size)
                if not missing or not block:
                    return

        for position, step in enumerate(self._schedule):
            for index in step:
                ex = self._exchanges[index]
                if ex.input is not None:
                    apply_arrivals([ex.input], block=True)  # a relay forwards complete inputs
                for message in range(len(ex.send_ranks)):
                    start_row, stop_row = int(ex.send_offsets[message]), int(ex.send_offsets[message + 1])
                    size = (stop_row - start_row) * k // T
                    start = start_row * k + thread * size
                    if ex.pack_gather is not None:
                        kernels.gather_elements(ex.pack_gather, b_local, ex.send_flat, start, start + size)
                    else:
                        kernels.multiply_elements(ex.pack_b, b_local, ex.send_flat, start, start + size, False)
                        if ex.pack_input is not None:
                            source = self._exchanges[ex.input].receive_buffer
                            kernels.multiply_elements(ex.pack_input, source, ex.send_flat, start, start + size, True)
                    if self.use_partitioned:
                        ex.send_requests[message].Pready(thread)
                    else:
                        ex.partition_requests_send[message][thread].Start()
            if position == 0 and not self.deterministic:
                lo, hi = int(self.row_bounds[thread]), int(self.row_bounds[thread + 1])
                kernels.multiply_rows(self._diagonal, b_local, out, lo, hi)
            if position > 0:
                apply_arrivals(self._schedule[position - 1], block=False)
        apply_arrivals(range(len(self._exchanges)), block=True)

    # ------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Collective. Free the requests and the executor's communicator, stop the worker threads."""
        if self._closed:
            return
        self._closed = True
        if self._workers:
            self._start.wait()  # wakes the workers, which see _closed and return
            for worker in self._workers:
                worker.join()
            self._workers = []
        for ex in self._exchanges:
            requests = ex.send_requests + ex.recv_requests
            requests += [r for group in ex.partition_requests_send + ex.partition_requests_recv for r in group]
            for request in requests:
                request.Free()
            ex.send_requests, ex.recv_requests = [], []
            ex.partition_requests_send, ex.partition_requests_recv = [], []
        self.comm.Free()

    def __enter__(self) -> SpmmExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
