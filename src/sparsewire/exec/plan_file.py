"""The SpMM plan file: every rank's :class:`~sparsewire.plan.plan.RankPlan` in one NumPy ``.npz``
(no pickles), written by :meth:`SpmmPlan.save <sparsewire.exec.spmm_plan.SpmmPlan.save>` and read
back, checked against the matrix and the ranks, by :meth:`SpmmPlan.load
<sparsewire.exec.spmm_plan.SpmmPlan.load>`.

Layout: ``meta`` (JSON: format name and version, P, the checksum of A's pattern, values,
partitions and orders, and the plan's settings), ``row_order``/``col_order`` (the partitioner's
permutation, when it reordered), and per rank r the arrays ``r{r}/...`` of :func:`plan_arrays`.
"""

from __future__ import annotations

import json
import os

import numpy as np
import scipy.sparse as sp

from mpi4py import MPI

from sparsewire.comm.runtime import agree_on_error, collective_errors
from sparsewire.exec.auto_strategy import StrategyChoice, collective_stats
from sparsewire.exec.spmm import transport_problem
from sparsewire.distributed import DistributedMatrix
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.partition import RowPartition
from sparsewire.plan.plan import Exchange, RankPlan
from sparsewire.plan.strategies import Strategy
from sparsewire.topology import Topology, parse_topology

__all__ = ["PLAN_FORMAT", "PLAN_FORMAT_VERSION", "plan_arrays", "plan_from_arrays", "write_plan_file", "read_plan_file", "load_plan"]

PLAN_FORMAT = "sparsewire-spmm-plan"
PLAN_FORMAT_VERSION = 1


_EXCHANGE_ARRAYS = ("send_ranks", "send_counts", "recv_ranks", "recv_counts", "send_kinds", "receive_kinds", "receive_keys")


def _csr_arrays(prefix: str, matrix: sp.csr_array) -> dict[str, np.ndarray]:
    return {f"{prefix}.indptr": matrix.indptr, f"{prefix}.indices": matrix.indices, f"{prefix}.data": matrix.data,
            f"{prefix}.shape": np.asarray(matrix.shape, np.int64)}


def _csr_from(arrays, prefix: str) -> sp.csr_array:
    shape = tuple(int(v) for v in arrays[f"{prefix}.shape"])
    return sp.csr_array((arrays[f"{prefix}.data"], arrays[f"{prefix}.indices"], arrays[f"{prefix}.indptr"]), shape=shape)


def plan_arrays(plan: RankPlan) -> dict[str, np.ndarray]:
    """A rank plan as named arrays (the .npz layout of :meth:`SpmmPlan.save`)."""
    arrays = {
        "header": np.array([plan.rank, plan.setup_entries, len(plan.exchanges)], np.int64),
        "strategy": np.array(plan.strategy.value),
        "layout": np.array(plan.layout),
        "row_offsets": plan.row_partition.offsets,
        "col_offsets": plan.col_partition.offsets,
        "groups": np.asarray(plan.groups, np.int64),
        **_csr_arrays("diagonal", plan.diagonal),
    }
    for index, exchange in enumerate(plan.exchanges):
        prefix = f"e{index}"
        arrays[f"{prefix}.header"] = np.array(
            [exchange.step, -1 if exchange.input is None else exchange.input, -1 if exchange.receive_slot is None else exchange.receive_slot],
            np.int64,
        )
        arrays.update({f"{prefix}.{name}": np.asarray(getattr(exchange, name)) for name in _EXCHANGE_ARRAYS})
        arrays.update(_csr_arrays(f"{prefix}.send_matrix", exchange.send_matrix))
        arrays.update(_csr_arrays(f"{prefix}.receive_matrix", exchange.receive_matrix))
    return arrays


def plan_from_arrays(arrays: dict[str, np.ndarray]) -> RankPlan:
    """The rank plan :func:`plan_arrays` wrote."""
    rank, setup_entries, n_exchanges = (int(v) for v in arrays["header"])
    exchanges = []
    for index in range(n_exchanges):
        prefix = f"e{index}"
        step, source, slot = (int(v) for v in arrays[f"{prefix}.header"])
        exchanges.append(
            Exchange(
                step=step,
                input=None if source < 0 else source,
                receive_slot=None if slot < 0 else slot,
                send_matrix=_csr_from(arrays, f"{prefix}.send_matrix"),
                receive_matrix=_csr_from(arrays, f"{prefix}.receive_matrix"),
                **{name: arrays[f"{prefix}.{name}"] for name in _EXCHANGE_ARRAYS},
            )
        )
    return RankPlan(
        rank=rank,
        strategy=Strategy(str(arrays["strategy"])),
        layout=str(arrays["layout"]),
        row_partition=RowPartition(arrays["row_offsets"]),
        col_partition=RowPartition(arrays["col_offsets"]),
        groups=arrays["groups"],
        diagonal=_csr_from(arrays, "diagonal"),
        exchanges=tuple(exchanges),
        setup_entries=setup_entries,
    )


def write_plan_file(path: str | os.PathLike, matrix: DistributedMatrix, plan: RankPlan, settings: dict) -> None:
    """Collective. Write every rank's ``plan`` and ``settings`` (JSON-able) for ``matrix`` to one
    file at ``path`` (rank 0 writes; every rank passes the same path). An unwritable path raises
    the same InputError on every rank."""
    comm = matrix.comm
    checksum = matrix.checksum()
    gathered = comm.gather(plan_arrays(plan), root=0)
    problem = None
    if comm.Get_rank() == 0:
        meta = {"format": PLAN_FORMAT, "version": PLAN_FORMAT_VERSION, "ranks": comm.Get_size(), "checksum": checksum, **settings}
        flat = {"meta": np.array(json.dumps(meta))}
        for name in ("row_order", "col_order"):  # the partitioner's permutation travels with the plan
            order = getattr(matrix, name)
            if order is not None:
                flat[name] = np.asarray(order, np.int64)
        for rank, rank_arrays in enumerate(gathered):
            flat.update({f"r{rank}/{name}": value for name, value in rank_arrays.items()})
        try:
            with open(path, "wb") as handle:
                np.savez(handle, **flat)
        except OSError as error:
            problem = f"cannot write the plan to {path}: {error.strerror}; check the directory exists and is writable"
    agree_on_error(comm, problem)


def read_plan_file(path: str | os.PathLike, matrix: DistributedMatrix) -> tuple[dict, RankPlan]:
    """Collective. The settings (``meta``) and this rank's plan from the file at ``path`` (rank 0
    reads it), after checking it is a plan file of this format version for this matrix, its
    orders and this number of ranks (else the same PlanMismatchError or InputError on every rank,
    in one line)."""
    comm = matrix.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    checksum = matrix.checksum()
    problem, meta, pieces = None, None, None
    if rank == 0:
        try:
            with np.load(path, allow_pickle=False) as archive:
                meta = json.loads(str(archive["meta"]))
                if meta.get("format") != PLAN_FORMAT:
                    raise InputError(f"{path} is not a sparsewire SpMM plan file")
                if meta["version"] != PLAN_FORMAT_VERSION:
                    raise PlanMismatchError(
                        f"{path} is plan format version {meta['version']} but this sparsewire reads version "
                        f"{PLAN_FORMAT_VERSION}; plan again and save"
                    )
                if meta["ranks"] != size:
                    raise PlanMismatchError(f"{path} holds a plan for P = {meta['ranks']} ranks, not {size}; load it on {meta['ranks']} ranks or plan again")
                if meta["checksum"] != checksum:
                    raise PlanMismatchError(
                        f"{path} was saved for another matrix or partition (checksum {meta['checksum'][:12]} != "
                        f"{checksum[:12]}); plan this matrix with matrix.spmm_plan(...)"
                    )
                for name in ("row_order", "col_order"):
                    saved, current = (archive[name] if name in archive.files else None), getattr(matrix, name)
                    if (saved is None) != (current is None) or (saved is not None and not np.array_equal(saved, current)):
                        raise PlanMismatchError(f"{path} was saved for another ordering of the matrix ({name}); distribute it with the same partitioner")
                pieces = [{} for _ in range(size)]
                for name in archive.files:
                    if name not in ("meta", "row_order", "col_order"):
                        owner, _, field = name.partition("/")
                        pieces[int(owner[1:])][field] = archive[name]
        except (OSError, ValueError, KeyError) as error:
            if isinstance(error, (InputError, PlanMismatchError)):
                problem = error
            else:
                problem = InputError(f"cannot read a plan from {path}: {error}; give a file written by SpmmPlan.save")
    agree_on_error(comm, problem)
    meta = comm.bcast(meta, root=0)
    return meta, plan_from_arrays(comm.scatter(pieces, root=0))


@collective_errors
def load_plan(cls, path: str | os.PathLike, matrix: DistributedMatrix, threads: int | None, transport: str | None):
    """Collective. The :class:`~sparsewire.exec.spmm_plan.SpmmPlan` (``cls``) saved at ``path`` for
    ``matrix``, with its executor on ``threads`` threads and ``transport`` (None: as saved)."""
    comm = matrix.comm
    meta, plan = read_plan_file(path, matrix)
    transport = transport or meta.get("transport", "mpi")  # files saved before transports ran on MPI
    agree_on_error(comm, transport_problem(transport, meta["mode"]))
    topology = topology_named(meta["topology"], comm)
    model = topology or Topology.flat()
    stats = collective_stats(comm, plan, meta["k"], np.dtype(meta["dtype"]).itemsize, model)
    choice_meta = meta["choice"]
    choice = StrategyChoice(
        Strategy(choice_meta["strategy"]), choice_meta["requested"], choice_meta["model"],
        {name: (float(s), int(b)) for name, (s, b) in choice_meta["candidates"].items()},
    )
    return cls(
        matrix, plan, stats, meta["k"], np.dtype(meta["dtype"]), meta["mode"], threads, meta["deterministic"],
        topology, choice, transposed=meta["transposed"], transport=transport,
    )


def topology_named(name: str | None, comm: MPI.Comm) -> Topology | None:
    """Collective for ``mpi-nodes``. The topology a plan file names (None: flat)."""
    if name is None:
        return None
    if name == "mpi-nodes":
        return Topology.from_mpi(comm)
    return parse_topology(name)
