"""How a plan is made and run, as one object: :class:`ExecOptions`.

One frozen dataclass carries every choice that says how an SpMM plan runs (strategy, topology,
proxy, mode, threads, determinism, transport, kernel backend, device, transfer calibration, wait
timeout). It is validated once, when it is made (every problem in one
:class:`~sparsewire.errors.InputError`, one line each), passed whole from the public API to the
planner, the executor and the plan file, saved in the plan file (:meth:`saved`) and reported in
the JSON (:meth:`as_dict`). The public functions
(:func:`~sparsewire.distributed.spmm.plan_spmm`, ``DistributedMatrix.spmm_plan``, ``SpmmPlan.load``) keep
their keyword arguments as the friendly surface and build one of these.

No MPI and no compiler are imported here: the transports and backends are checked against their
registries (:mod:`sparsewire.exec.transports`, :mod:`sparsewire.kernels`).
"""

from __future__ import annotations

import dataclasses
import enum
import os
from pathlib import Path

import numpy as np

from sparsewire._lib.given import UNSET, with_given
from sparsewire.comm.watchdog import DEFAULT_WAIT_TIMEOUT, MIN_WAIT_TIMEOUT
from sparsewire.errors import InputError
from sparsewire.exec.transports import transport_names, transport_problem
from sparsewire.kernels import backend_problem
from sparsewire.plan.modes import MODES, Mode
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy
from sparsewire.topology.model import Topology
from sparsewire.wire.codecs import parse_compress

__all__ = ["ExecOptions", "Proxy", "AUTO", "UNSET", "exec_options", "cuts_messages"]

#: The value of ``strategy`` and ``mode`` that leaves the choice to the planner.
AUTO = "auto"


class Proxy(enum.StrEnum):
    """Which rank of a group receives a remote rank's B rows in the hierarchical strategies."""

    LOCAL = "local"  # the same local rank (CoLa)
    BALANCED = "balanced"  # spread by bytes


@dataclasses.dataclass(frozen=True)
class ExecOptions:
    """Not collective. How a plan is made and run (see the module docstring).

    Attributes:
        strategy: ``auto`` or an executable :class:`~sparsewire.plan.strategies.Strategy`
            (hierarchical ones need a topology with groups).
        topology: the cluster model; None = flat.
        proxy: :class:`Proxy` (hierarchical strategies).
        mode: a :class:`~sparsewire.plan.modes.Mode`, or None for ``auto`` (chosen at planning,
            :func:`~sparsewire.plan.modes.choose_mode`).
        threads: threads per rank; None = cores / ranks on the node.
        deterministic: a fixed summation order (C bitwise identical across runs, modes, threads).
        transport: a registered transport's name (:func:`~sparsewire.exec.transports.transport_names`).
        backend: ``numpy`` or ``torch`` (:data:`~sparsewire.kernels.BACKENDS`).
        device: the backend's device (``cpu``, ``cuda``, ``cuda:N``).
        transfer_calibration: a file of ``sparsewire calibrate --device`` (which messages are staged
            through host memory); None = the stored one of the device's type, if any.
        wait_timeout: seconds a multiply may go without any message arriving before it ends the
            job with a message naming what it waits for (:mod:`sparsewire.comm.watchdog`).
        compress: the payload codec of every message (:data:`~sparsewire.wire.codecs.CODECS`): ``none``
            (the default: rows sent as they are, bitwise), ``bf16``, ``fp16`` (a power-of-two scale per
            row) or ``int8`` (an affine map per row, stochastic rounding), each within the bound
            :mod:`sparsewire.wire.codecs` states; ``inter:CODEC`` codes only the messages between groups
            (the topology's, else MPI's shared-memory nodes). The MPI transport's whole-message modes on
            the CPU.
        trial: ``auto`` strategy under a topology measured by ``calibrate --network``, on more than one rank:
            time the candidate plans predicted within 25% of the least (and beside a hierarchical choice the least
            predicted flat plan) on the job itself, and keep one faster than the model's choice in every turn
            (:mod:`sparsewire.distributed.trial`); False: the model's choice.
    """

    strategy: str | Strategy = AUTO
    topology: Topology | None = None
    proxy: Proxy | str = Proxy.LOCAL
    mode: Mode | str | None = None
    threads: int | None = None
    deterministic: bool = False
    transport: str = "mpi"
    backend: str = "numpy"
    device: str = "cpu"
    transfer_calibration: Path | str | os.PathLike | None = None
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT
    compress: str = "none"
    trial: bool = True

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise InputError("; ".join(problems) if len(problems) == 1 else "invalid options:\n  " + "\n  ".join(problems))
        normal = {
            "strategy": self.strategy if self.strategy == AUTO else Strategy(self.strategy),
            "proxy": Proxy(self.proxy),
            "mode": None if self.mode in (None, AUTO) else Mode(self.mode),
            "threads": None if self.threads is None else int(self.threads),
            "deterministic": bool(self.deterministic),
            "device": str(self.device),
            "transfer_calibration": None if self.transfer_calibration is None else Path(self.transfer_calibration),
            "wait_timeout": float(self.wait_timeout),
            "trial": bool(self.trial),
        }
        for name, value in normal.items():
            object.__setattr__(self, name, value)

    def problems(self) -> list[str]:
        """Not collective. Every problem with these options, one line each (empty: none)."""
        problems = []
        strategy = None
        if self.strategy != AUTO:
            try:
                strategy = Strategy(self.strategy)
            except ValueError:
                problems.append(
                    f"unknown strategy {self.strategy!r}; choose auto or one of "
                    f"{', '.join(s.value for s in EXECUTABLE_STRATEGIES)}"
                )
            else:
                if not strategy.executable:
                    problems.append(
                        f"strategy {strategy.value!r} is accounting only and cannot run; choose auto or an executable strategy"
                    )
        if self.topology is not None and not isinstance(self.topology, Topology):
            problems.append(
                f"topology must be a sparsewire.Topology or None (got {type(self.topology).__name__}); see "
                "sparsewire.parse_topology"
            )
        elif strategy is not None and strategy.hierarchical and (self.topology is None or len(self.topology.levels) < 2):
            problems.append(
                f"strategy {strategy.value!r} routes through groups; pass a topology with groups (e.g. Topology.nodes(2))"
            )
        if self.proxy not in tuple(Proxy):
            problems.append(f"unknown proxy {self.proxy!r}; choose local or balanced")
        mode = None if self.mode in (None, AUTO) else self.mode
        if mode is not None and mode not in MODES:
            problems.append(f"unknown mode {self.mode!r}; choose from {', '.join(MODES)}, auto or None")
            mode = None
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, (int, np.integer)) or self.threads < 1
        ):
            problems.append(f"threads must be a positive integer or None (got {self.threads!r})")
        if not isinstance(self.deterministic, (bool, np.bool_)):
            problems.append(f"deterministic must be True or False (got {self.deterministic!r})")
        if not isinstance(self.trial, (bool, np.bool_)):
            problems.append(f"trial must be True or False (got {self.trial!r})")
        if self.transport not in transport_names():
            problems.append(f"unknown transport {self.transport!r}; choose {' or '.join(transport_names())}")
        elif mode is not None:
            problem = transport_problem(self.transport, mode, str(self.device))
            if problem:
                problems.append(problem)
        problem = backend_problem(self.backend, str(self.device), mode)
        if problem:
            problems.append(problem)
        if self.transfer_calibration is not None and not isinstance(self.transfer_calibration, (str, os.PathLike)):
            problems.append(f"transfer_calibration must be a path or None (got {type(self.transfer_calibration).__name__})")
        if (
            isinstance(self.wait_timeout, bool)
            or not isinstance(self.wait_timeout, (int, float, np.integer, np.floating))
            or not np.isfinite(self.wait_timeout)
            or self.wait_timeout < MIN_WAIT_TIMEOUT
        ):
            problems.append(
                f"wait_timeout must be a number of seconds of at least {MIN_WAIT_TIMEOUT:g} (got {self.wait_timeout!r}): "
                "below that a healthy multiply's first messages (connections being set up) can take longer"
            )
        problems.extend(self._compress_problems(mode))
        return problems

    def _compress_problems(self, mode) -> list[str]:
        parsed = parse_compress(self.compress)
        if isinstance(parsed, str):
            return [parsed]
        if parsed[0] == "none":
            return []
        where = []
        if self.transport != "mpi":
            where.append(f"the {self.transport} transport")
        if mode is not None and Mode(mode).partitions_per_thread:
            where.append("the partitioned mode")
        if self.device_type != "cpu":
            where.append(f"device {self.device}")
        if where:
            return [
                f"compress {self.compress!r} is built for the MPI transport's whole-message modes (bulk, overlap, pipelined, "
                f"early) on the CPU, not {' or '.join(where)}; use compress='none' there"
            ]
        return []

    @property
    def codec(self) -> str:
        """The payload codec of :attr:`compress` (``none``, ``bf16``, ``fp16``, ``int8``), whatever its scope."""
        return parse_compress(self.compress)[0]

    @property
    def layout(self) -> str:
        """The plan layout the mode runs (``merged`` while the mode is not chosen)."""
        return "merged" if self.mode is None else Mode(self.mode).layout

    @property
    def device_type(self) -> str:
        """``cpu`` or ``cuda``: what every rank shares (ranks may own different GPUs)."""
        return self.device.split(":", 1)[0]

    def replace(self, **changes) -> ExecOptions:
        """Not collective. A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    def transfer_rule(self):
        """Not collective. Which messages are staged through host memory
        (:func:`sparsewire.wire.transfer_records.transfer_rule` of the device and the calibration file)."""
        from sparsewire.wire.transfer_records import transfer_rule

        return transfer_rule(self.device, self.transfer_calibration)

    def agreed(self) -> dict:
        """Not collective. What every rank of a job must have alike (the device by type only)."""
        per_rank = ("threads", "device", "transfer_calibration", "wait_timeout")
        agreed = {name: value for name, value in self.as_dict().items() if name not in per_rank}
        return {**agreed, "device type": self.device_type}

    def as_dict(self) -> dict:
        """Not collective. The options as JSON values (the topology by name)."""
        return {
            "strategy": str(self.strategy if self.strategy == AUTO else self.strategy.value),
            "topology": None if self.topology is None else self.topology.name,
            "proxy": self.proxy.value,
            "mode": None if self.mode is None else self.mode.value,
            "threads": self.threads,
            "deterministic": self.deterministic,
            "transport": self.transport,
            "backend": self.backend,
            "device": self.device,
            "transfer_calibration": None if self.transfer_calibration is None else str(self.transfer_calibration),
            "wait_timeout": self.wait_timeout,
            "compress": self.compress,
            "trial": self.trial,
        }

    def saved(self) -> dict:
        """Not collective. What a plan file keeps (the choices of the plan itself; threads,
        backend, device and calibration are choices of each run)."""
        return {
            name: value
            for name, value in self.as_dict().items()
            if name in ("strategy", "topology", "proxy", "mode", "deterministic", "transport")
        }


def cuts_messages(options: ExecOptions, mode: Mode | str) -> bool:
    """Not collective. Whether the executor cuts the messages to and from another group into pieces in ``mode``
    (:mod:`~sparsewire.exec.message_rows`), where no rank's plan relays or stages a message: the overlap schedule's
    modes (overlap, pipelined) over the ``mpi`` transport on the CPU, without a codec or the ordered combine of
    ``deterministic``. Where a plan relays, the same schedule sends whole messages and applies a step's while the next
    step's cross. Either way the cost model prices the work on the messages between groups beside the stream from
    it (``beside_stream`` of :func:`~sparsewire.plan.cost.predicted_seconds`)."""
    plain = options.codec == "none" and not options.deterministic and options.device_type == "cpu"
    return plain and options.transport == "mpi" and Mode(mode) in (Mode.OVERLAP, Mode.PIPELINED)


def exec_options(options: ExecOptions | None = None, **keywords) -> ExecOptions | str:
    """Not collective. ``options`` (None: the defaults) with the keyword arguments that were given
    (not :data:`UNSET`) replacing their fields, or the text of what is wrong with them (so that a
    collective caller can agree on the error before raising it everywhere)."""
    return with_given(options, ExecOptions, keywords, "a plan")
