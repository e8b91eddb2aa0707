"""What executors of one family share: the sparse operands of one rank plan built for several widths
(:meth:`~sparsewire.distributed.spmm.SpmmPlan.with_width`), and dense memory lent between executors that never
multiply at once (a plan and its transpose in training). Lending is safe because a multiply completes every send
and receive before it returns, and the executors that share memory share one lock."""

from __future__ import annotations

import math

import numpy as np

from sparsewire.plan.plan import RankPlan

__all__ = ["MemoryPool", "same_operands"]


def same_operands(shared, plan: RankPlan, dtype: np.dtype, threads: int, needs, backend) -> bool:
    """Not collective. Whether the operands of the buffers ``shared`` serve ``plan`` at another k: nothing they hold
    depends on k where every message is whole (padding for partitions moves rows by k)."""
    same = (shared.dtype, shared.threads, shared.needs, type(shared.kernels), getattr(shared.kernels, "device", 0))
    kind = (dtype, threads, needs, type(backend), getattr(backend, "device", 0))
    return shared.plan is plan and needs.partitions == 1 and same == kind


class MemoryPool:
    """The distinct dense arrays of other buffers of the same dtype and backend (the ordered stack, or every receive slot
    and receive buffer; every send buffer), each lent at most once: :meth:`zeros` gives the smallest that holds the
    asked size, viewed as (rows, k), else new memory."""

    def __init__(self, memory, dtype: np.dtype, backend) -> None:
        """Not collective. ``memory``: the other executor's buffers (None: nothing to lend)."""
        self.backend, self.dtype, self.free = backend, dtype, []
        kind = (dtype, type(backend), getattr(backend, "device", 0))
        if memory is None or (memory.dtype, type(memory.kernels), getattr(memory.kernels, "device", 0)) != kind:
            return
        slots: dict = {}
        for ex, exchange in zip(memory.exchanges, memory.plan.exchanges):
            self.free.append(ex.send_buffer)
            if memory.stack is None:
                key = ("slot", exchange.receive_slot) if exchange.receive_slot is not None else ("own", ex.index)
                if key not in slots or ex.receive_buffer.shape[0] > slots[key].shape[0]:
                    slots[key] = ex.receive_buffer
        self.free += [memory.stack] if memory.stack is not None else list(slots.values())

    def zeros(self, rows: int, k: int):
        """Not collective. A zeroed (rows, k) buffer: lent memory where some fits, else new."""
        fits = [array for array in self.free if rows * k > 0 and math.prod(array.shape) >= rows * k]
        if not fits:
            return self.backend.zeros((rows, k), self.dtype)
        array = min(fits, key=lambda a: math.prod(a.shape))
        self.free = [a for a in self.free if a is not array]
        view = array.reshape(-1)[: rows * k].reshape(rows, k)
        view[...] = 0
        return view
