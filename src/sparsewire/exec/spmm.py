"""The SpMM executor: runs one rank's :class:`~sparsewire.plan.RankPlan` over MPI.

Per multiply, with B_p the rank's rows of B and C_p its rows of C:

1. pack: ``send_buffer = send_matrix @ B_p`` (selected B rows for column-based transfers and
   partial C rows for row-based ones, destination by destination, in one sparse product);
2. exchange: every destination gets its slice of ``send_buffer``; every source's slice lands in
   ``receive_buffer``;
3. compute: ``C_p = diagonal @ B_p + receive_matrix @ receive_buffer``.

Modes:

* ``bulk``: pack, one ``MPI_Neighbor_alltoallv`` on a distributed-graph communicator made once per
  executor, compute.
* ``overlap``: persistent ``MPI_Recv_init``/``MPI_Send_init`` requests made once per executor;
  receives are started first, sends right after packing, and the diagonal block is multiplied
  while messages are in flight (PETSc's MatMult ordering; Collom & Bienz sec. 3.1).

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

__all__ = ["SpmmExecutor", "MODES", "parse_modes"]

MODES = ("bulk", "overlap")
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


class SpmmExecutor:
    """Collective (construction and :meth:`multiply`). Runs ``C = A @ B`` with one plan, many times.

    Args:
        plan: this rank's plan.
        comm: the communicator the plan was built for.
        k: columns of B.
        dtype: float32 or float64 (A's values are cast once).
        mode: ``bulk`` or ``overlap``.
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
        self.plan, self.comm, self.k, self.mode = plan, comm, int(k), mode
        self.dtype = np.dtype(dtype)
        self._mpi_type = mpi_datatype(self.dtype)
        self._diagonal = as_compute_matrix(plan.diagonal, self.dtype)
        self._send_matrix = as_compute_matrix(plan.send_matrix, self.dtype)
        self._receive_matrix = as_compute_matrix(plan.receive_matrix, self.dtype)
        send_rows, recv_rows = plan.send_rows(), plan.recv_rows()
        self._send_buffer = np.zeros((int(send_rows.sum()), self.k), self.dtype)
        self._receive_buffer = np.zeros((int(recv_rows.sum()), self.k), self.dtype)
        self._send_counts = send_rows * self.k
        self._send_displacements = np.cumsum(self._send_counts) - self._send_counts
        self._recv_counts = recv_rows * self.k
        self._recv_displacements = np.cumsum(self._recv_counts) - self._recv_counts
        self.bytes_sent_to = np.zeros(plan.n_ranks, np.int64)
        self._graph = None
        self._send_requests: list[MPI.Prequest] = []
        self._recv_requests: list[MPI.Prequest] = []
        if mode == "bulk":
            self._graph = comm.Create_dist_graph_adjacent(
                plan.recv_ranks.tolist(), plan.send_ranks.tolist(), reorder=False
            )
        else:
            flat_send, flat_recv = self._send_buffer.reshape(-1), self._receive_buffer.reshape(-1)
            for source, start, count in zip(plan.recv_ranks, self._recv_displacements, self._recv_counts):
                self._recv_requests.append(
                    comm.Recv_init([flat_recv[start : start + count], self._mpi_type], int(source), _TAG)
                )
            for destination, start, count in zip(plan.send_ranks, self._send_displacements, self._send_counts):
                self._send_requests.append(
                    comm.Send_init([flat_send[start : start + count], self._mpi_type], int(destination), _TAG)
                )

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
        return self._multiply_overlap(b_local)

    def _count_sends(self) -> None:
        np.add.at(self.bytes_sent_to, self.plan.send_ranks, self._send_counts * self.dtype.itemsize)

    def _multiply_bulk(self, b_local: np.ndarray) -> np.ndarray:
        self._send_buffer[...] = csr_times_dense(self._send_matrix, b_local)
        self._graph.Neighbor_alltoallv(
            [self._send_buffer, (self._send_counts, self._send_displacements), self._mpi_type],
            [self._receive_buffer, (self._recv_counts, self._recv_displacements), self._mpi_type],
        )
        self._count_sends()
        result = csr_times_dense(self._diagonal, b_local)
        result += csr_times_dense(self._receive_matrix, self._receive_buffer)
        return result

    def _multiply_overlap(self, b_local: np.ndarray) -> np.ndarray:
        if self._recv_requests:
            MPI.Prequest.Startall(self._recv_requests)
        self._send_buffer[...] = csr_times_dense(self._send_matrix, b_local)
        if self._send_requests:
            MPI.Prequest.Startall(self._send_requests)
        self._count_sends()
        result = csr_times_dense(self._diagonal, b_local)  # while messages are in flight
        MPI.Request.Waitall(self._recv_requests)
        result += csr_times_dense(self._receive_matrix, self._receive_buffer)
        MPI.Request.Waitall(self._send_requests)
        return result

    def close(self) -> None:
        """Collective (the graph communicator of ``bulk`` is freed). Free the requests and communicator."""
        for request in self._send_requests + self._recv_requests:
            request.Free()
        self._send_requests, self._recv_requests = [], []
        if self._graph is not None:
            self._graph.Free()
            self._graph = None

    def __enter__(self) -> SpmmExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
