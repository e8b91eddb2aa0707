"""What executors of one family share: the sparse operands of one rank plan built for several widths
(:meth:`~sparsewire.distributed.spmm.SpmmPlan.with_width`), and dense memory lent between executors that never
multiply at once (a plan and its transpose in training). Lending is safe because a multiply completes every send
and receive before it returns, and the executors that share memory share one lock."""

from __future__ import annotations

import math

import numpy as np

from sparsewire.plan.plan import RankPlan

__all__ = ["MemoryPool", "same_operands"]


def _backend_kind(dtype: np.dtype, backend) -> tuple:
    """What arrays of one element type on one backend's device have in common (what may be lent or shared)."""
    return np.dtype(dtype), type(backend), getattr(backend, "device", None)


def same_operands(shared, plan: RankPlan, dtype: np.dtype, threads: int, needs, backend) -> bool:
    """Not collective. Whether the operands of the buffers ``shared`` serve ``plan`` at another k: nothing they hold
    depends on k where every message is whole (padding for partitions moves rows by k)."""
    same = (shared.threads, shared.needs, _backend_kind(shared.dtype, shared.kernels))
    return shared.plan is plan and needs.partitions == 1 and same == (threads, needs, _backend_kind(dtype, backend))


class MemoryPool:
    """The distinct dense arrays of other buffers of the same dtype and backend (the ordered stack, or every receive slot
    and receive buffer; every send buffer), each lent at most once: :meth:`zeros` gives the smallest that holds the
    asked size, viewed as (rows, k), else new memory."""

    def __init__(self, memory, dtype: np.dtype, backend) -> None:
        """Not collective. ``memory``: the other executor's buffers (None: nothing to lend)."""
        self.backend, self.dtype, self.free = backend, dtype, []
        if memory is None or _backend_kind(memory.dtype, memory.kernels) != _backend_kind(dtype, backend):
            return
        if memory.stack is not None:  # (the ordered combine's receive buffers lie inside it)
            self.free = [memory.stack, *(ex.send_buffer for ex in memory.exchanges)]
            return
        slots: dict = {}  # each receive slot's memory: its largest receive buffer
        for ex in memory.exchanges:
            self.free.append(ex.send_buffer)
            slot = ex.exchange.receive_slot
            key = ("slot", slot) if slot is not None else ("own", ex.index)
            if key not in slots or ex.receive_buffer.shape[0] > slots[key].shape[0]:
                slots[key] = ex.receive_buffer
        self.free += list(slots.values())

    def zeros(self, rows: int, k: int):
        """Not collective. A zeroed (rows, k) buffer: lent memory where some fits, else new."""
        size = rows * k
        fits = [array for array in self.free if size > 0 and math.prod(array.shape) >= size]
        if not fits:
            return self.backend.zeros((rows, k), self.dtype)
        array = min(fits, key=lambda a: math.prod(a.shape))
        self.free = [a for a in self.free if a is not array]
        view = array.reshape(-1)[:size].reshape(rows, k)
        view[...] = 0
        return view
