"""Transports the tests register beside the built-in ones (:mod:`sparsewire.exec.transports`):
each is one class or selector here and one ``register_transport`` call, which is all a new
transport takes. Importing this module registers them (again harmlessly: ``replace=True``).

* ``recording``: MPI's transport with every call of the schedules recorded (and forwarded);
* ``mpi-p2p-partitions``: the partitioned mode always on point-to-point requests, one per
  partition (as where MPI has no partitioned messages);
* ``torch-grouped``: torch.distributed with each exchange in one group (NCCL's protocol) on Gloo.
"""

from __future__ import annotations

from collections import Counter

from sparsewire.exec.transports import mpi as mpi_transports
from sparsewire.exec.transports import mpi_partitioned, register_transport
from sparsewire.plan.modes import Mode

#: Calls of every RecordingTransport in this process, by method name.
CALLS: Counter = Counter()
#: (exchange, message, source) of every receive a RecordingTransport completed, in order.
ARRIVALS: list[tuple[int, int, int]] = []


class RecordingTransport(mpi_transports.MpiTransport):
    """MPI's persistent point-to-point transport, recording each call before forwarding it."""

    name = "recording"

    def post_receives(self, ex):
        CALLS["post_receives"] += 1
        super().post_receives(ex)

    def start_sends(self, ex):
        CALLS["start_sends"] += 1
        super().start_sends(ex)

    def start_send(self, ex, message):
        CALLS["start_send"] += 1
        super().start_send(ex, message)

    def wait_receives(self, ex):
        CALLS["wait_receives"] += 1
        super().wait_receives(ex)
        ARRIVALS.extend((ex.index, message, source) for message, source in enumerate(ex.recv_ranks))

    def wait_any(self):
        CALLS["wait_any"] += 1
        exchange, message = super().wait_any()
        ARRIVALS.append((exchange, message, self.buffers.exchanges[exchange].recv_ranks[message]))
        return exchange, message

    def wait_sends(self, ex):
        CALLS["wait_sends"] += 1
        super().wait_sends(ex)


def _grouped_torch(mode, comm, device):
    from sparsewire.exec.transports.torch_distributed import TorchTransport

    class GroupedTorchTransport(TorchTransport):
        grouped = True

    return GroupedTorchTransport


def _grouped_problem(mode, device):
    from sparsewire.exec.transports.torch_distributed import GROUPED_MODES

    if Mode(mode) not in GROUPED_MODES:
        return f"the torch-grouped transport runs whole exchanges (bulk, overlap, pipelined), not {mode}"
    return None


register_transport(
    "recording",
    modes=(Mode.BULK, Mode.OVERLAP, Mode.PIPELINED, Mode.EARLY),
    summary="MPI, every call recorded (tests)",
    select=lambda mode, comm, device: RecordingTransport,
    replace=True,
)
register_transport(
    "mpi-p2p-partitions",
    modes=(Mode.PARTITIONED,),  # (the only mode it changes: the others are MPI's transport, run by the collective cases)
    summary="MPI, partitions on point-to-point requests (tests)",
    select=lambda mode, comm, device: mpi_partitioned.select(mode, comm, device, partitioned=False),
    replace=True,
)
register_transport(
    "torch-grouped",
    modes=(Mode.BULK, Mode.OVERLAP, Mode.PIPELINED, Mode.EARLY),
    summary="torch.distributed, each exchange in one group (tests)",
    select=_grouped_torch,
    problem=_grouped_problem,
    replace=True,
)
