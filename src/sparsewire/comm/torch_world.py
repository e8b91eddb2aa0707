"""A communicator over torch.distributed, for jobs that ``torchrun`` starts: the collectives the planner, the
distribution, the error agreement and training use (mpi4py's names and calling conventions), on a Gloo process group,
so that a job plans, runs and reports without MPI between its processes.

Why a second communicator rather than MPI under ``torchrun``: there, each process's MPI world has one rank (MPI's
singleton start; no ``mpiexec`` runs), so only torch.distributed connects the processes. The objects the library
hands to :class:`TorchComm` are those it hands to mpi4py (picklable values for the lower-case collectives, NumPy
buffers for ``Allreduce`` and ``Alltoallv``), so the code above ``comm/`` is the same for both. Non-blocking
collectives complete before they return (``MPI.REQUEST_NULL``: a wait on it returns at once). Numbers and numeric
arrays are reduced as tensors (one ``all_reduce``) and the all-to-alls of buffers move their bytes in one
``all_to_all_single``: a collective costs a time slice on a node with more ranks than cores, and the pickled path
(an all-gather of sizes, then of the pickles) takes two; other values go through that path. The executor's messages
go over the torch transport (``transport="torch"``); graph attention's own messages over Gloo's ``isend``/``irecv``
(:meth:`TorchComm.Isend`, :class:`TorchRequest`); SDDMM and SpGEMM, which send MPI messages of their own, refuse
such a communicator.
"""

from __future__ import annotations

import atexit
import os
import socket
from functools import reduce

import numpy as np
from mpi4py import MPI

__all__ = ["TorchComm", "TorchRequest", "torch_world", "shut_down_at_exit"]

#: The process groups :meth:`TorchComm.Split` made, by their members' global ranks in order.
_GROUPS: dict[tuple[int, ...], object] = {}

#: Whether the exit handler is registered, and whether it destroys the default group too (sparsewire made it).
_EXIT = {"registered": False, "default_group": False}


def torch_world() -> TorchComm:
    """Collective on first use. Every process ``torchrun`` started, as one communicator (the default Gloo process
    group, initialised from the launcher's environment when the caller has not)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
        shut_down_at_exit(default_group=True)
    return TorchComm(None)


def shut_down_at_exit(*, default_group: bool = False) -> None:
    """Not collective. Once per process: at exit, while the interpreter still runs, destroy the process groups
    :meth:`TorchComm.Split` made, and the default group when ``default_group`` (sparsewire initialised it; a group the
    caller made is the caller's to destroy). Gloo's worker and transport threads, left to the interpreter's teardown,
    can end the process with SIGABRT ("terminate called without an active exception", pytorch/pytorch#190489) after
    the job's work is done."""
    _EXIT["default_group"] = _EXIT["default_group"] or default_group
    if not _EXIT["registered"]:
        _EXIT["registered"] = True
        atexit.register(_destroy_groups)


def _destroy_groups() -> None:
    import torch.distributed as dist

    groups = list(_GROUPS.values())
    _GROUPS.clear()
    if dist.is_initialized():
        for group in groups:
            dist.destroy_process_group(group)
        if _EXIT["default_group"]:
            dist.destroy_process_group()


def _either(pick, a, b):
    """``pick`` (NumPy's elementwise function) on arrays; on plain values the builtin, so ints stay ints."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return pick(a, b)
    return {np.maximum: max, np.minimum: min, np.logical_or: lambda x, y: x or y}[pick](a, b)


#: The reductions the library uses, by MPI's name: (how two values combine, torch.distributed's buffer reduction).
_REDUCTIONS = {
    "SUM": (lambda a, b: a + b, "SUM"),
    "PROD": (lambda a, b: a * b, "PRODUCT"),
    "MAX": (lambda a, b: _either(np.maximum, a, b), "MAX"),
    "MIN": (lambda a, b: _either(np.minimum, a, b), "MIN"),
    "LOR": (lambda a, b: _either(np.logical_or, a, b), None),
}


def _reduction(op):
    """(name, combine, buffer reduction or None) of an MPI reduction ``op``."""
    for name, (combine, on_buffers) in _REDUCTIONS.items():
        if op == getattr(MPI, name):
            return name, combine, on_buffers
    raise ValueError(f"TorchComm reduces with {', '.join(_REDUCTIONS)} (the reductions sparsewire uses), not {op}")


#: The dtypes :meth:`TorchComm.allreduce` reduces as tensors (Gloo's reductions on CPU tensors).
_TENSOR_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8))


def _reducible(value, size: int) -> np.ndarray | None:
    """``value`` as a fresh array a tensor reduction takes, or None where it must go the pickled way (booleans, objects,
    dtypes Gloo does not reduce, integers whose sum over ``size`` ranks could leave int64)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, int):
        return np.array(value, np.int64) if abs(value) <= (2**62) // max(size, 1) else None
    if isinstance(value, float):
        return np.array(value, np.float64)
    if isinstance(value, (np.ndarray, np.generic)) and np.dtype(value.dtype) in _TENSOR_DTYPES:
        return np.array(value, copy=True, order="C")
    return None


def _spec(buffer):
    """(array, counts, displacements) of an mpi4py buffer spec ``[array, counts, type]`` or
    ``[array, (counts, displacements), type]``, in elements."""
    array, layout = buffer[0], buffer[1]
    if isinstance(layout, tuple):
        counts, displacements = (np.asarray(v, np.int64) for v in layout)
    else:
        counts = np.asarray(layout, np.int64)
        displacements = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return np.asarray(array), counts, displacements


class TorchRequest:
    """A message in flight over torch.distributed; after :meth:`Wait`, also its status (:meth:`Get_count`: the bytes
    of the buffer, torch.distributed reports no receive status)."""

    def __init__(self, work, buffer: np.ndarray):
        self.work, self.buffer = work, buffer

    def Wait(self, status=None) -> None:
        """Not collective. Until the message is sent or received."""
        self.work.wait()

    def Get_count(self, datatype=None) -> int:
        """Not collective. The buffer's bytes (``datatype`` ignored: only bytes are asked for)."""
        return int(self.buffer.nbytes)


class TorchComm:
    """mpi4py's ``Comm`` over a torch.distributed group (None: the default group): ranks, the lower-case
    collectives on picklable values, ``Allreduce``, ``Alltoall`` and ``Alltoallv`` on NumPy buffers, barriers,
    ``Isend`` and ``Irecv`` on NumPy buffers, ``Split``, ``Split_type`` (nodes from ``torchrun``'s ``GROUP_RANK``,
    else host names), ``Dup`` and ``Abort``."""

    def __init__(self, group):
        import torch.distributed as dist

        self._dist, self.group = dist, group
        self._rank, self._size = dist.get_rank(group), dist.get_world_size(group)

    def __repr__(self) -> str:
        return f"TorchComm(rank {self._rank} of {self._size})"

    # -- ranks
    def Get_rank(self) -> int:
        """Not collective. This rank in the group."""
        return self._rank

    def Get_size(self) -> int:
        """Not collective. The ranks of the group."""
        return self._size

    def _global(self, rank: int) -> int:
        return rank if self.group is None else self._dist.get_global_rank(self.group, rank)

    # -- collectives on picklable values
    def allgather(self, value) -> list:
        """Collective. Every rank's picklable ``value``, in rank order."""
        gathered = [None] * self._size
        self._dist.all_gather_object(gathered, value, group=self.group)
        return gathered

    def bcast(self, value, root: int = 0):
        """Collective. ``root``'s ``value`` on every rank."""
        box = [value if self._rank == root else None]
        self._dist.broadcast_object_list(box, src=self._global(root), group=self.group)
        return box[0]

    def gather(self, value, root: int = 0):
        """Collective. Every rank's ``value`` on ``root`` (None elsewhere)."""
        gathered = self.allgather(value)
        return gathered if self._rank == root else None

    def scatter(self, values, root: int = 0):
        """Collective. Rank r gets ``values[r]`` of ``root``'s list."""
        box = [None]
        self._dist.scatter_object_list(box, values if self._rank == root else None, src=self._global(root), group=self.group)
        return box[0]

    def alltoall(self, values: list) -> list:
        """Collective. Rank r gets every rank's ``values[r]``, in rank order."""
        every = self.allgather(list(values))
        return [every[peer][self._rank] for peer in range(self._size)]

    def allreduce(self, value, op=MPI.SUM):
        """Collective. ``op`` (``MPI.SUM``, ``PROD``, ``MAX``, ``MIN`` or ``LOR``) over every rank's value: a number or
        a numeric array in one ``all_reduce`` of a tensor (the result of the value's own type), anything else (the
        same kind of value on every rank) combined from an all-gather."""
        _, combine, on_buffers = _reduction(op)
        array = _reducible(value, self._size) if on_buffers is not None else None
        if array is None:
            return reduce(combine, self.allgather(value))
        import torch

        tensor = torch.from_numpy(array)
        self._dist.all_reduce(tensor, op=getattr(self._dist.ReduceOp, on_buffers), group=self.group)
        if isinstance(value, np.ndarray):
            return array
        return array[()] if isinstance(value, np.generic) else type(value)(array[()])

    def Barrier(self) -> None:
        """Collective. Returns when every rank has entered."""
        self._dist.barrier(group=self.group)

    def Ibarrier(self):
        """Collective. A barrier, completed before it returns (``MPI.REQUEST_NULL``)."""
        self.Barrier()
        return MPI.REQUEST_NULL

    # -- collectives on NumPy buffers
    def Allreduce(self, send, receive, op=MPI.SUM) -> None:
        """Collective. ``op`` over every rank's buffer into ``receive`` (``send`` may be ``MPI.IN_PLACE``)."""
        import torch

        target = np.asarray(receive[0] if isinstance(receive, (list, tuple)) else receive)
        if send is not MPI.IN_PLACE:
            target[...] = np.asarray(send[0] if isinstance(send, (list, tuple)) else send)
        _, _, on_buffers = _reduction(op)
        if on_buffers is not None and target.dtype != np.bool_:
            tensor = torch.from_numpy(target.reshape(-1)) if target.flags.c_contiguous else torch.from_numpy(target.copy())
            self._dist.all_reduce(tensor, op=getattr(self._dist.ReduceOp, on_buffers), group=self.group)
            if not target.flags.c_contiguous:
                target[...] = tensor.numpy().reshape(target.shape)
        else:
            target[...] = self.allreduce(target.copy(), op)

    def Iallreduce(self, send, receive, op=MPI.SUM):
        """Collective. :meth:`Allreduce`, completed before it returns (``MPI.REQUEST_NULL``)."""
        self.Allreduce(send, receive, op)
        return MPI.REQUEST_NULL

    def Alltoall(self, send, receive) -> None:
        """Collective. Block r of ``send`` to rank r, rank q's block into block q of ``receive``."""
        send_array, receive_array = (
            np.asarray(send[0] if isinstance(send, list) else send),
            np.asarray(receive[0] if isinstance(receive, list) else receive),
        )
        send_counts = np.full(self._size, send_array.size // self._size, np.int64)
        arrived = np.empty(receive_array.size, receive_array.dtype)
        self._all_to_all(send_array.reshape(-1), send_counts, arrived, np.full(self._size, arrived.size // self._size))
        receive_array[...] = arrived.reshape(receive_array.shape)

    def Alltoallv(self, send, receive) -> None:
        """Collective. mpi4py's ``Alltoallv`` on buffer specs ``[array, (counts, displacements), type]``."""
        send_array, send_counts, send_displacements = _spec(send)
        receive_array, receive_counts, receive_displacements = _spec(receive)
        flat_send, flat_receive = send_array.reshape(-1), receive_array.reshape(-1)
        packed = np.concatenate([flat_send[d : d + c] for c, d in zip(send_counts, send_displacements)])
        arrived = np.empty(int(receive_counts.sum()), flat_receive.dtype)
        self._all_to_all(packed, send_counts, arrived, receive_counts)
        starts = np.concatenate([[0], np.cumsum(receive_counts)[:-1]])
        for start, count, displacement in zip(starts, receive_counts, receive_displacements):
            flat_receive[displacement : displacement + count] = arrived[start : start + count]

    def _all_to_all(self, send: np.ndarray, send_counts, receive: np.ndarray, receive_counts) -> None:
        """Collective. ``send_counts[r]`` elements of the contiguous ``send`` to rank r, in rank order, and rank q's
        into ``receive`` at ``sum(receive_counts[:q])``: one ``all_to_all_single`` of the bytes (any dtype moves)."""
        import torch

        outgoing = torch.from_numpy(np.ascontiguousarray(send).view(np.uint8))
        incoming = torch.from_numpy(receive.view(np.uint8))
        self._dist.all_to_all_single(
            incoming,
            outgoing,
            [int(c) * receive.itemsize for c in receive_counts],
            [int(c) * send.itemsize for c in send_counts],
            group=self.group,
        )

    # -- point-to-point, on NumPy buffers (graph attention's messages)
    def Isend(self, buffer, dest: int, tag: int = 0) -> TorchRequest:
        """Not collective. Send a contiguous NumPy array to ``dest`` (Gloo's ``isend``); complete it with
        :func:`~sparsewire.comm.runtime.wait_messages`."""
        import torch

        array = np.ascontiguousarray(buffer)
        return TorchRequest(self._dist.isend(torch.from_numpy(array), self._global(dest), group=self.group, tag=tag), array)

    def Irecv(self, buffer, source: int, tag: int = 0) -> TorchRequest:
        """Not collective. Receive into a contiguous NumPy array from ``source`` (Gloo's ``irecv``: the sender's
        count must be the buffer's, as the plans that use it agree at setup)."""
        import torch

        if not buffer.flags.c_contiguous:
            raise ValueError("a receive buffer over torch.distributed must be contiguous")
        return TorchRequest(self._dist.irecv(torch.from_numpy(buffer), self._global(source), group=self.group, tag=tag), buffer)

    # -- communicators
    def Split(self, color: int, key: int = 0) -> TorchComm:
        """Collective. The ranks of each ``color`` as one communicator, ordered by ``key``."""
        members = self.allgather((int(color), int(key), self._global(self._rank)))
        ranks = tuple(g for _, g in sorted((k, g) for c, k, g in members if c == color))
        if ranks not in _GROUPS:  # made once per member list (every member asks at the same call): Gloo groups are costly
            _GROUPS[ranks] = self._dist.new_group(list(ranks), use_local_synchronization=True)
            shut_down_at_exit()
        return TorchComm(_GROUPS[ranks])

    def Split_type(self, split_type, key: int = 0, info=None) -> TorchComm:
        """Collective. The ranks on this rank's node (``torchrun``'s ``GROUP_RANK``, else the host name)."""
        node = os.environ.get("GROUP_RANK")
        name = f"node {node}" if node is not None else socket.gethostname()
        names = sorted(set(self.allgather(name)))
        return self.Split(names.index(name), self._rank)

    def Dup(self) -> TorchComm:
        """Not collective. The same group (its collectives carry no tags to keep apart)."""
        return TorchComm(self.group)

    def Free(self) -> None:
        """Not collective. Nothing to free: groups live as long as the process group."""
        pass

    def Abort(self, errorcode: int = 1) -> None:
        """Not collective. End this process with ``errorcode`` (torchrun then ends the others)."""
        os._exit(errorcode)
