"""The SpMM executor: runs one rank's :class:`~sparsewire.plan.RankPlan` over MPI.

Per multiply, with B_p the rank's rows of B and C_p its rows of C, for every exchange e of the plan
(in order of steps):

1. pack: ``send_buffer_e = send_matrix_e @ [B_p ; receive_buffer_(input of e)]`` (selected B rows,
   partial C rows, forwarded B rows, summed partial C rows, destination by destination, in one
   sparse product);
2. exchange: every destination gets its slice of ``send_buffer_e``; every source's slice lands in
   ``receive_buffer_e``;
3. compute: ``C_p += receive_matrix_e @ receive_buffer_e``, after ``C_p = diagonal @ B_p``.

Modes:

* ``bulk``: exchange after exchange, each one ``MPI_Neighbor_alltoallv`` on a distributed-graph
  communicator made once per executor.
* ``overlap``: persistent ``MPI_Recv_init``/``MPI_Send_init`` requests made once per executor; the
  exchanges of a step are started together, the diagonal block is multiplied while the first
  step's messages are in flight (PETSc's MatMult ordering; Collom & Bienz sec. 3.1), and a relay
  waits only for the exchange it forwards from (SHIRO Alg. 1: stage II starts when stage I lands).
* ``pipelined``: the same loop on a plan with the ``pipelined`` layout (CoLa Alg. 3): step d starts
  round d+1's inter-group transfer into one of two receive buffers, then distributes and computes
  round d while it is in flight.

Buffers and requests are allocated once per executor (one plan, one k, one dtype). The executor
counts the bytes it hands to MPI, per destination; they equal the plan's volumes.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from sparsewire.comm.runtime import mpi_datatype
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec.kernels import as_compute_matrix, csr_times_dense
from sparsewire.plan.plan import RankPlan

__all__ = ["SpmmExecutor", "MODES", "parse_modes", "layout_for_mode"]

MODES = ("bulk", "overlap", "pipelined")
_TAG = 4242


def parse_modes(text: str) -> list[str]:
    """Parse a comma-separated list of executor modes (``all`` means every mode)."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(MODES)
    for name in names:
        if name not in MODES:
            raise InputError(f"unknown mode {name!r}; choose from {', '.join(MODES)} or all")
    if not names:
        raise InputError(f"no mode given; choose from {', '.join(MODES)}")
    return list(dict.fromkeys(names))


def layout_for_mode(mode: str) -> str:
    """The plan layout a mode runs: ``pipelined`` for the pipelined mode, ``merged`` otherwise."""
    return "pipelined" if mode == "pipelined" else "merged"


class _ExchangeBuffers:
    """Send and receive storage and MPI handles of one exchange."""

    def __init__(self, exchange, k: int, dtype: np.dtype, n_b_rows: int, receive_storage) -> None:
        self.exchange = exchange
        # The send matrix's columns are [B rows | input rows]; split once so packing needs no stacking.
        send_matrix = exchange.send_matrix
        self.send_from_b = as_compute_matrix(send_matrix[:, :n_b_rows], dtype)
        self.send_from_input = as_compute_matrix(send_matrix[:, n_b_rows:], dtype) if exchange.input is not None else None
        self.receive_matrix = as_compute_matrix(exchange.receive_matrix, dtype)
        self.send_buffer = np.zeros((int(exchange.send_counts.sum()), k), dtype)
        self.receive_buffer = receive_storage[: int(exchange.recv_counts.sum())]
        self.send_counts = exchange.send_counts * k
        self.send_displacements = np.cumsum(self.send_counts) - self.send_counts
        self.recv_counts = exchange.recv_counts * k
        self.recv_displacements = np.cumsum(self.recv_counts) - self.recv_counts
        self.graph = None
        self.send_requests: list = []
        self.recv_requests: list = []


class SpmmExecutor:
    """Collective (construction and :meth:`multiply`). Runs ``C = A @ B`` with one plan, many times.

    Args:
        plan: this rank's plan (layout ``pipelined`` for the pipelined mode, ``merged`` otherwise).
        comm: the communicator the plan was built for.
        k: columns of B.
        dtype: float32 or float64 (A's values are cast once).
        mode: ``bulk``, ``overlap`` or ``pipelined``.
    """

    def __init__(self, plan: RankPlan, comm: MPI.Comm, k: int, dtype=np.float64, mode: str = "overlap") -> None:
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
        self.plan, self.comm, self.k, self.mode = plan, comm, int(k), mode
        self.dtype = np.dtype(dtype)
        self._mpi_type = mpi_datatype(self.dtype)
        self._diagonal = as_compute_matrix(plan.diagonal, self.dtype)
        # Exchanges that share a receive slot share one buffer, as large as the largest of them.
        slot_rows: dict[int, int] = {}
        for exchange in plan.exchanges:
            if exchange.receive_slot is not None:
                rows = int(exchange.recv_counts.sum())
                slot_rows[exchange.receive_slot] = max(slot_rows.get(exchange.receive_slot, 0), rows)
        slots = {slot: np.zeros((rows, self.k), self.dtype) for slot, rows in slot_rows.items()}
        self._exchanges: list[_ExchangeBuffers] = []
        for index, exchange in enumerate(plan.exchanges):
            storage = (
                slots[exchange.receive_slot]
                if exchange.receive_slot is not None
                else np.zeros((int(exchange.recv_counts.sum()), self.k), self.dtype)
            )
            buffers = _ExchangeBuffers(exchange, self.k, self.dtype, plan.local_shape[1], storage)
            if mode == "bulk":
                buffers.graph = comm.Create_dist_graph_adjacent(
                    exchange.recv_ranks.tolist(), exchange.send_ranks.tolist(), reorder=False
                )
            else:
                flat_send, flat_recv = buffers.send_buffer.reshape(-1), buffers.receive_buffer.reshape(-1)
                tag = _TAG + index  # exchanges of one step between the same pair must not match each other
                for source, start, count in zip(exchange.recv_ranks, buffers.recv_displacements, buffers.recv_counts):
                    buffers.recv_requests.append(
                        comm.Recv_init([flat_recv[start : start + count], self._mpi_type], int(source), tag)
                    )
                for destination, start, count in zip(exchange.send_ranks, buffers.send_displacements, buffers.send_counts):
                    buffers.send_requests.append(
                        comm.Send_init([flat_send[start : start + count], self._mpi_type], int(destination), tag)
                    )
            self._exchanges.append(buffers)
        steps = sorted({e.step for e in plan.exchanges})
        # Within a step, exchanges that need no input start first, so their transfers are in flight
        # while the others wait for what they relay.
        self._schedule = [
            sorted((i for i, e in enumerate(plan.exchanges) if e.step == step), key=lambda i: plan.exchanges[i].input is not None)
            for step in steps
        ]
        self.bytes_sent_to = np.zeros(plan.n_ranks, np.int64)

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank handed to MPI in the last multiply."""
        return int(self.bytes_sent_to.sum())

    def multiply(self, b_local: np.ndarray) -> np.ndarray:
        """Collective. This rank's rows of ``C = A @ B`` from its rows of B (shape (rows of B owned, k))."""
        expected = (self.plan.local_shape[1], self.k)
        if b_local.shape != expected:
            raise PlanMismatchError(
                f"rank {self.plan.rank}: B block has shape {b_local.shape}, expected {expected} "
                "(this rank's rows of B by k); give each rank its rows under the plan's column partition"
            )
        b_local = np.ascontiguousarray(b_local, dtype=self.dtype)
        self.bytes_sent_to[:] = 0
        if self.mode == "bulk":
            return self._multiply_bulk(b_local)
        return self._multiply_nonblocking(b_local)

    def _pack(self, index: int, b_local: np.ndarray) -> None:
        buffers = self._exchanges[index]
        buffers.send_buffer[...] = csr_times_dense(buffers.send_from_b, b_local)
        if buffers.send_from_input is not None:
            buffers.send_buffer += csr_times_dense(buffers.send_from_input, self._exchanges[buffers.exchange.input].receive_buffer)
        np.add.at(self.bytes_sent_to, buffers.exchange.send_ranks, buffers.send_counts * self.dtype.itemsize)

    def _multiply_bulk(self, b_local: np.ndarray) -> np.ndarray:
        result = csr_times_dense(self._diagonal, b_local)
        for index, buffers in enumerate(self._exchanges):
            self._pack(index, b_local)
            buffers.graph.Neighbor_alltoallv(
                [buffers.send_buffer, (buffers.send_counts, buffers.send_displacements), self._mpi_type],
                [buffers.receive_buffer, (buffers.recv_counts, buffers.recv_displacements), self._mpi_type],
            )
            result += csr_times_dense(buffers.receive_matrix, buffers.receive_buffer)
        return result

    def _multiply_nonblocking(self, b_local: np.ndarray) -> np.ndarray:
        result = np.zeros((self.plan.local_shape[0], self.k), self.dtype)
        finished = [False] * len(self._exchanges)

        def finish(index: int) -> None:
            if not finished[index]:
                buffers = self._exchanges[index]
                MPI.Request.Waitall(buffers.recv_requests)
                result[...] += csr_times_dense(buffers.receive_matrix, buffers.receive_buffer)
                finished[index] = True

        for position, step in enumerate(self._schedule):
            for index in step:
                buffers = self._exchanges[index]
                if buffers.recv_requests:
                    MPI.Prequest.Startall(buffers.recv_requests)
                if buffers.exchange.input is not None:
                    finish(buffers.exchange.input)
                self._pack(index, b_local)
                if buffers.send_requests:
                    MPI.Prequest.Startall(buffers.send_requests)
            if position == 0:
                result += csr_times_dense(self._diagonal, b_local)  # while the first messages are in flight
            else:
                for index in self._schedule[position - 1]:
                    finish(index)
        for index in range(len(self._exchanges)):
            finish(index)
        for buffers in self._exchanges:
            MPI.Request.Waitall(buffers.send_requests)
        return result

    def close(self) -> None:
        """Collective (the graph communicators of ``bulk`` are freed). Free the requests and communicators."""
        for buffers in self._exchanges:
            for request in buffers.send_requests + buffers.recv_requests:
                request.Free()
            buffers.send_requests, buffers.recv_requests = [], []
            if buffers.graph is not None:
                buffers.graph.Free()
                buffers.graph = None

    def __enter__(self) -> SpmmExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
