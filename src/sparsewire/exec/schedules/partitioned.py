"""The partitioned schedule (Collom & Bienz sec. 3.3, Algs. 3-5): T threads, each packing, sending
and combining its own share of every message.

Every message is cut into T partitions (the buffers pad it to whole rows with ``rows * k``
divisible by T; the padding is not visible in C and not counted as payload). Thread t packs
partition t of every message of a step and marks it ready, multiplies its rows of the diagonal
block, then polls the transport for arrived partitions and applies every one (whole B rows and
row fragments) to its own rows of C. A relay first waits for every partition of its input.

The T - 1 helper threads, their barriers and the error slots are made with the schedule; the
calling thread is thread 0. An exception on any thread is raised by ``run`` once all have stopped.
"""

from __future__ import annotations

import threading

import numpy as np

from sparsewire.exec.buffers import Buffers
from sparsewire.exec.pack import Packer
from sparsewire.exec.transports.base import PartitionedTransport

__all__ = ["PartitionedSchedule"]


class PartitionedSchedule:
    """T threads per rank, one partition of every message each (see the module docstring)."""

    def __init__(self, buffers: Buffers, transport: PartitionedTransport, combine, packer: Packer | None = None) -> None:
        self.buffers, self.transport, self.combine = buffers, transport, combine
        self.packer = packer or Packer(buffers)
        threads = buffers.threads
        # Per thread, per exchange: the received partitions it has applied this multiply.
        self._applied = [[np.zeros((len(ex.recv_ranks), threads), bool) for ex in buffers.exchanges] for _ in range(threads)]
        self._errors: list[BaseException] = []
        self._job: tuple[np.ndarray, np.ndarray] | None = None
        self._closed = False
        self._workers: list[threading.Thread] = []
        if threads > 1:
            self._start = threading.Barrier(threads)
            self._stop = threading.Barrier(threads)
            for thread in range(1, threads):
                worker = threading.Thread(target=self._worker_loop, args=(thread,), daemon=True)
                worker.start()
                self._workers.append(worker)

    def run(self, b: np.ndarray, out: np.ndarray) -> None:
        """Collective (every rank runs its schedule in the same multiply). C into ``out``."""
        transport = self.transport
        for ex in self.buffers.exchanges:
            transport.post_receives(ex)
            transport.start_sends(ex)
        self._job = (b, out)
        self._errors.clear()
        if not self._workers:
            self._thread_share(0)
        else:
            self._start.wait()
            try:
                self._thread_share(0)
            except BaseException as error:  # noqa: BLE001 - re-raised after the others stop
                self._errors.append(error)
            self._stop.wait()
        self._job = None
        if self._errors:
            raise self._errors[0]
        for ex in self.buffers.exchanges:
            transport.wait_receives(ex)
            transport.wait_sends(ex)
        self.combine.finish(b, out)

    def _worker_loop(self, thread: int) -> None:
        while True:
            self._start.wait()
            if self._closed:
                return
            try:
                self._thread_share(thread)
            except BaseException as error:  # noqa: BLE001 - handed to the calling thread
                self._errors.append(error)
            self._stop.wait()

    def _apply_arrivals(self, thread: int, indices, out: np.ndarray, block: bool) -> None:
        """Apply every arrived, not yet applied partition of the exchanges ``indices`` to thread
        ``thread``'s rows of C; with ``block``, until all of them have arrived."""
        T, k = self.buffers.threads, self.buffers.k
        applied = self._applied[thread]
        while True:
            missing = False
            for index in indices:
                ex = self.buffers.exchanges[index]
                for message in range(len(ex.recv_ranks)):
                    size = ex.recv_elements[message] // T
                    base = int(ex.recv_offsets[message]) * k
                    for partition in range(T):
                        if applied[index][message, partition]:
                            continue
                        if not self.transport.partition_arrived(ex, message, partition):
                            missing = True
                            continue
                        applied[index][message, partition] = True
                        start = base + partition * size
                        self.combine.partition_arrived(ex, thread, start, start + size, out)
            if not missing or not block:
                return

    def _thread_share(self, thread: int) -> None:
        """Algs. 3 and 4 for one thread."""
        b, out = self._job
        T, k = self.buffers.threads, self.buffers.k
        steps, exchanges = self.buffers.steps, self.buffers.exchanges
        for flags in self._applied[thread]:
            flags[:] = False
        for position, step in enumerate(steps):
            for index in step:
                ex = exchanges[index]
                if ex.input is not None:
                    self._apply_arrivals(thread, (ex.input,), out, block=True)  # a relay forwards complete inputs
                for message in range(len(ex.send_ranks)):
                    start_row, stop_row = int(ex.send_offsets[message]), int(ex.send_offsets[message + 1])
                    size = (stop_row - start_row) * k // T
                    start = start_row * k + thread * size
                    self.packer.elements(ex, b, start, start + size)
                    self.transport.mark_ready(ex, message, thread)
            if position == 0:
                self.combine.diagonal_rows(b, out, thread)
            else:
                self._apply_arrivals(thread, steps[position - 1], out, block=False)
        self._apply_arrivals(thread, range(len(exchanges)), out, block=True)

    def close(self) -> None:
        """Not collective. Stop the helper threads."""
        if self._closed:
            return
        self._closed = True
        if self._workers:
            self._start.wait()  # wakes the workers, which see _closed and return
            for worker in self._workers:
                worker.join()
            self._workers = []
