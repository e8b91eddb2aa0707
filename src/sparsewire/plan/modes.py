"""Executor modes: which schedule runs a plan, and what each needs from the buffers and transport.

A mode names one schedule (:mod:`sparsewire.exec.schedules.messages`) and the plan layout it runs:

===============  ==========  ================  =================================================
mode             layout      unpack            what it needs besides
===============  ==========  ================  =================================================
``bulk``         merged      per exchange      which input messages each relayed message needs
``overlap``      merged      per exchange      which input messages each relayed message needs
                             (per piece of a message cut over the slower link, where no plan relays)
``pipelined``    pipelined   per exchange      a plan of the pipelined layout (CoLa Alg. 3), and
                             (as overlap)      which input messages each relayed message needs
``early``        merged      per message       which input messages each relayed message needs
``partitioned``  merged      per partition     T partitions per message (padded), thread-level MPI
===============  ==========  ================  =================================================

``choose_mode`` is the ``auto`` rule.
"""

from __future__ import annotations

import enum

__all__ = ["Mode", "MODES", "choose_mode", "layout_for_mode"]


class Mode(enum.StrEnum):
    """An executor mode (equal to its name as a string: ``Mode.BULK == "bulk"``)."""

    BULK = "bulk"
    OVERLAP = "overlap"
    PIPELINED = "pipelined"
    EARLY = "early"
    PARTITIONED = "partitioned"

    @property
    def layout(self) -> str:
        """The plan layout the mode runs: ``pipelined`` for the pipelined mode, ``merged`` otherwise."""
        return "pipelined" if self is Mode.PIPELINED else "merged"

    @property
    def per_message(self) -> bool:
        """Received rows are added to C message by message (or partition by partition), through
        a CSC operand per receive matrix, instead of one CSR product per exchange."""
        return self in (Mode.EARLY, Mode.PARTITIONED)

    @property
    def relays_per_message(self) -> bool:
        """A relayed message is packed and sent as soon as the input messages it reads have
        arrived, so the buffers list which input messages each relayed message needs (used where the
        transport sends message by message: a hierarchical plan's aggregated C rows then leave while
        its B rows are still crossing the slow link). Every mode but ``partitioned``, whose threads
        pack and send whole exchanges."""
        return self is not Mode.PARTITIONED

    @property
    def steps_in_flight(self) -> int | None:
        """How many of a plan's steps may be on the links at once, on a transport that sends message by message
        (the cost model's form, :func:`~sparsewire.plan.cost.predicted_communication_seconds`): None (every step)
        for ``bulk``, which posts every step before it waits for any; 2 for ``overlap``, ``pipelined`` and
        ``early``, which post step s before they wait for step s - 1, so a plan of at most two steps (a merged
        plan, whose two-level strategies hop twice, or a pipelined plan on two nodes, CoLa Alg. 3) has all of them
        in flight; 1 for ``partitioned``, whose threads relay whole steps. A relayed message leaves as soon as its
        inputs arrive in every mode but ``partitioned``."""
        if self is Mode.BULK:
            return None
        return 1 if self is Mode.PARTITIONED else 2

    @property
    def overlaps_diagonal(self) -> bool:
        """The diagonal block is multiplied while the first messages are in flight (every mode but ``bulk``, which
        multiplies it before it sends), so the cost model hides it behind the communication
        (:func:`~sparsewire.plan.cost.predicted_seconds`)."""
        return self is not Mode.BULK

    @property
    def partitions_per_thread(self) -> bool:
        """Every message is cut into T partitions (one per thread, padded to whole rows with
        ``rows * k`` divisible by T) that the T threads pack, send and apply themselves, so every
        thread calls the transport (MPI_THREAD_MULTIPLE) and every rank must run T threads."""
        return self is Mode.PARTITIONED


#: Every mode's name, in the order tables list them.
MODES = tuple(mode.value for mode in Mode)


def layout_for_mode(mode: str) -> str:
    """Not collective. The plan layout a mode runs: ``pipelined`` for the pipelined mode, ``merged``
    otherwise."""
    return Mode(mode).layout


def choose_mode(k: int, node_ranks: int, threads: int) -> str:
    """Not collective. The default mode, from ``bench/kernels/async_modes.py`` on the 2-core reference machine (8 matrices,
    k = 1 ... 256, geometric mean of the time ratio to ``bulk``): with ranks x threads within the
    cores, ``early`` 0.87 and ``overlap`` 0.94 for k <= 16, ``overlap`` 1.03 and ``early`` 1.08
    above; oversubscribed (4 ranks on 2 cores), ``overlap`` 0.99 and ``early`` 1.77 (its
    ``MPI_Waitany`` polling takes the cores other ranks need). So ``early`` for k <= 16 when the
    cores suffice, else ``overlap``."""
    from sparsewire._lib.cores import oversubscribed

    return Mode.EARLY.value if not oversubscribed(node_ranks, threads) and k <= 16 else Mode.OVERLAP.value
