"""Schedules: the order of packing, moving and combining, one per mode
(:mod:`~sparsewire.plan.modes`).

* :mod:`~sparsewire.exec.schedules.messages`: ``bulk``, ``overlap`` (and ``pipelined``, the overlap
  loop on the pipelined layout's steps) and ``early`` (each message multiplied as it arrives);
* :mod:`~sparsewire.exec.schedules.partitioned`: ``partitioned`` (MPI-4 partitioned messages, one
  partition per thread).

Every schedule packs through the buffers' :class:`~sparsewire.exec.pack.Packer`, moves through a
transport and adds through a combine, so one layer can wrap pack, post, arrive, unpack and combine.
"""

from __future__ import annotations

from sparsewire.exec.schedules.messages import BulkSchedule, EarlySchedule, OverlapSchedule
from sparsewire.exec.schedules.partitioned import PartitionedSchedule
from sparsewire.plan.modes import Mode

__all__ = ["SCHEDULES"]

#: The schedule class of every mode.
SCHEDULES = {
    Mode.BULK: BulkSchedule,
    Mode.OVERLAP: OverlapSchedule,
    Mode.PIPELINED: OverlapSchedule,  # the overlap loop on the pipelined layout's steps
    Mode.EARLY: EarlySchedule,
    Mode.PARTITIONED: PartitionedSchedule,
}
