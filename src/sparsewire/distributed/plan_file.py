"""The SpMM plan file: every rank's :class:`~sparsewire.plan.plan.RankPlan` in one NumPy ``.npz``
(no pickles), written by :meth:`SpmmPlan.save <sparsewire.distributed.spmm.SpmmPlan.save>` and read
back, checked against the matrix and the ranks, by :meth:`SpmmPlan.load
<sparsewire.distributed.spmm.SpmmPlan.load>`.

Layout: ``meta`` (JSON: format name and version, P, the checksum of A's pattern, values,
partitions and orders, the checksum of the plan's own arrays, and the plan's settings),
``row_order``/``col_order`` (the partitioner's permutation, when it reordered), and per rank r the
arrays ``r{r}/...`` of :func:`plan_arrays`.

A plan file may come from someone else, so reading it trusts nothing: the settings are checked
against their types and ranges, the arrays against the checksum written beside them (an edited value
would otherwise give a wrong product silently), and every array against the dtype, shape and index
range the executor will rely on (an index out of range would otherwise be read by a compiled kernel
without bounds checks). Any failure is one InputError naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from sparsewire._lib.atomic import atomic_write
from sparsewire._lib.distinct import distinct
from sparsewire.comm.runtime import agree_on_error, collective_errors
from sparsewire.distributed.auto import StrategyChoice, collective_stats
from sparsewire.errors import InputError, PlanMismatchError
from sparsewire.exec.options import ExecOptions
from sparsewire.io.archives import open_archive
from sparsewire.partition import RowPartition
from sparsewire.plan.plan import AGGREGATE_C, LAYOUTS, Exchange, RankPlan
from sparsewire.plan.strategies import Strategy
from sparsewire.topology.model import Topology
from sparsewire.topology.presets import parse_topology
from sparsewire.topology.saved import topology_from_record

if TYPE_CHECKING:  # for annotations only: the matrix's class imports this module's users
    from sparsewire.distributed.matrix import DistributedMatrix

__all__ = [
    "PLAN_FORMAT",
    "PLAN_FORMAT_VERSION",
    "plan_arrays",
    "plan_from_arrays",
    "write_plan_file",
    "read_plan_file",
    "load_plan",
]

PLAN_FORMAT = "sparsewire-spmm-plan"
PLAN_FORMAT_VERSION = 3  # 2: the checksum of the plan arrays (plan_checksum); 3: the options as one object


_EXCHANGE_ARRAYS = ("send_ranks", "send_counts", "recv_ranks", "recv_counts", "send_kinds", "receive_kinds", "receive_keys")


def _csr_arrays(prefix: str, matrix: sp.csr_array) -> dict[str, np.ndarray]:
    return {
        f"{prefix}.indptr": matrix.indptr,
        f"{prefix}.indices": matrix.indices,
        f"{prefix}.data": matrix.data,
        f"{prefix}.shape": np.asarray(matrix.shape, np.int64),
    }


def _csr_from(arrays, prefix: str, shape: tuple[int, int]) -> sp.csr_array:
    """The CSR matrix ``prefix`` of a plan file, checked to be a valid CSR of ``shape`` (the shape
    the executor's buffers will have) with float values and indices in range."""
    saved = tuple(int(v) for v in _array(arrays, f"{prefix}.shape", 1, np.integer, length=2))
    if saved != shape:
        raise InputError(f"{prefix} has shape {saved}, but the plan needs {shape}")
    indptr = _array(arrays, f"{prefix}.indptr", 1, np.integer, length=shape[0] + 1)
    indices = _array(arrays, f"{prefix}.indices", 1, np.integer)
    data = _array(arrays, f"{prefix}.data", 1, np.floating, length=indices.size)
    if indptr[0] != 0 or indptr[-1] != indices.size or np.any(np.diff(indptr) < 0):
        raise InputError(f"{prefix} has a row pointer that does not run from 0 to its {indices.size} entries")
    if indices.size and (indices.min() < 0 or indices.max() >= shape[1]):
        raise InputError(f"{prefix} has a column index outside 0..{shape[1] - 1}")
    return sp.csr_array((data, indices, indptr), shape=shape)


def _array(
    arrays, name: str, ndim: int, kind: type, length: int | None = None, bounds: tuple[int, int] | None = None
) -> np.ndarray:
    """Array ``name`` of a plan file, checked: present, ``ndim`` dimensions, of NumPy ``kind``
    (np.integer, np.floating), of ``length`` and with every value in ``bounds`` [lo, hi)."""
    if name not in arrays:
        raise InputError(f"the array {name} is missing")
    value = arrays[name]
    if value.ndim != ndim or not np.issubdtype(value.dtype, kind):
        raise InputError(f"{name} is a {value.ndim}-D {value.dtype} array where a {ndim}-D {kind.__name__} one belongs")
    if length is not None and value.shape[0] != length:
        raise InputError(f"{name} has {value.shape[0]} entries where {length} belong")
    if bounds is not None and value.size and (value.min() < bounds[0] or value.max() >= bounds[1]):
        raise InputError(f"{name} has a value outside {bounds[0]}..{bounds[1] - 1}")
    return value


def plan_arrays(plan: RankPlan) -> dict[str, np.ndarray]:
    """Not collective. A rank plan as named arrays (the .npz layout of :meth:`SpmmPlan.save`)."""
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
            [
                exchange.step,
                -1 if exchange.input is None else exchange.input,
                -1 if exchange.receive_slot is None else exchange.receive_slot,
            ],
            np.int64,
        )
        arrays.update({f"{prefix}.{name}": np.asarray(getattr(exchange, name)) for name in _EXCHANGE_ARRAYS})
        arrays.update(_csr_arrays(f"{prefix}.send_matrix", exchange.send_matrix))
        arrays.update(_csr_arrays(f"{prefix}.receive_matrix", exchange.receive_matrix))
    return arrays


def plan_from_arrays(
    arrays: dict[str, np.ndarray], rank: int, row_partition: RowPartition, col_partition: RowPartition
) -> RankPlan:
    """Not collective. The rank plan :func:`plan_arrays` wrote for ``rank`` of a matrix distributed as
    ``row_partition`` x ``col_partition``, with every array checked against the shape and index
    range the executor relies on (:class:`InputError` naming the array otherwise)."""
    size = row_partition.n_parts
    header = _array(arrays, "header", 1, np.integer, length=3)
    saved_rank, setup_entries, n_exchanges = (int(v) for v in header)
    if saved_rank != rank or setup_entries < 0 or not 0 <= n_exchanges <= 4 * size + 8:
        raise InputError(
            f"the header of rank {rank}'s plan ({saved_rank}, {setup_entries}, {n_exchanges}) is not a plan header for rank "
            f"{rank}"
        )
    for name, partition in (("row_offsets", row_partition), ("col_offsets", col_partition)):
        if not np.array_equal(_array(arrays, name, 1, np.integer), partition.offsets):
            raise InputError(f"{name} differs from the matrix's partition")
    names = {}
    for name, allowed in (("strategy", [s.value for s in Strategy]), ("layout", list(LAYOUTS))):
        value = arrays.get(name)
        if value is None or value.ndim != 0 or value.dtype.kind != "U" or str(value) not in allowed:
            raise InputError(f"{name} is not one of {', '.join(allowed)}")
        names[name] = str(value)
    n_rows, n_b = row_partition.counts()[rank], col_partition.counts()[rank]
    n_keys = max(row_partition.n, col_partition.n)
    exchanges: list[Exchange] = []
    for index in range(n_exchanges):
        prefix = f"e{index}"
        step, source, slot = (int(v) for v in _array(arrays, f"{prefix}.header", 1, np.integer, length=3))
        if step < 0 or not -1 <= source < index or slot < -1:
            raise InputError(f"{prefix}.header ({step}, {source}, {slot}) is not a step, an earlier exchange and a buffer slot")
        fields = {}
        for side in ("send", "recv"):
            ranks = _array(arrays, f"{prefix}.{side}_ranks", 1, np.integer, bounds=(0, size))
            fields[f"{side}_ranks"] = ranks
            fields[f"{side}_counts"] = _array(
                arrays, f"{prefix}.{side}_counts", 1, np.integer, length=ranks.size, bounds=(0, 2**40)
            )
            if distinct(ranks).size != ranks.size:
                raise InputError(f"{prefix}.{side}_ranks names a rank twice")
        n_sent, n_received = int(fields["send_counts"].sum()), int(fields["recv_counts"].sum())
        fields["send_kinds"] = _array(arrays, f"{prefix}.send_kinds", 1, np.integer, length=n_sent, bounds=(0, AGGREGATE_C + 1))
        fields["receive_kinds"] = _array(
            arrays, f"{prefix}.receive_kinds", 1, np.integer, length=n_received, bounds=(0, AGGREGATE_C + 1)
        )
        fields["receive_keys"] = _array(
            arrays, f"{prefix}.receive_keys", 1, np.integer, length=n_received, bounds=(0, max(n_keys, 1))
        )
        input_rows = 0 if source < 0 else int(exchanges[source].recv_counts.sum())
        exchanges.append(
            Exchange(
                step=step,
                input=None if source < 0 else source,
                receive_slot=None if slot < 0 else slot,
                send_matrix=_csr_from(arrays, f"{prefix}.send_matrix", (n_sent, n_b + input_rows)),
                receive_matrix=_csr_from(arrays, f"{prefix}.receive_matrix", (n_rows, n_received)),
                **fields,
            )
        )
    return RankPlan(
        rank=rank,
        strategy=Strategy(names["strategy"]),
        layout=names["layout"],
        row_partition=row_partition,
        col_partition=col_partition,
        groups=_array(arrays, "groups", 1, np.integer, length=size, bounds=(0, size)),
        diagonal=_csr_from(arrays, "diagonal", (n_rows, n_b)),
        exchanges=tuple(exchanges),
        setup_entries=setup_entries,
    )


def arrays_checksum(flat: dict[str, np.ndarray]) -> str:
    """SHA-256 (hex) over the plan arrays of a plan file (every entry but ``meta``), by name,
    dtype, shape and bytes, so that any edit of any array is seen on loading."""
    digest = hashlib.sha256()
    for name in sorted(flat):
        if name != "meta":
            value = np.ascontiguousarray(flat[name])
            digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
            digest.update(value.tobytes())
    return digest.hexdigest()


_SETTINGS = {"k": int, "dtype": str, "transposed": bool, "options": dict, "choice": dict}


def _check_meta(meta, path) -> None:
    """The settings of a plan file, checked for type and range (InputError naming the entry)."""
    if not isinstance(meta, dict) or meta.get("format") != PLAN_FORMAT:
        raise InputError(f"{path} is not a sparsewire SpMM plan file")
    if meta.get("version") != PLAN_FORMAT_VERSION:
        raise PlanMismatchError(
            f"{path} is plan format version {meta.get('version')!r} but this sparsewire reads version "
            f"{PLAN_FORMAT_VERSION}; plan again and save"
        )
    for name, kind in _SETTINGS.items():
        value = meta.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InputError(f"{path} has a damaged plan setting {name!r} ({value!r}); plan again and save")
    saved = meta["options"]
    problems = [
        f"{name} {saved[name]!r} is not a name"
        for name in ("topology", "mode")
        if not isinstance(saved.get(name), (str, type(None)))
    ]
    if not problems:
        try:
            # The strategy is checked with the choice below, and against the topology at load.
            options = ExecOptions(**{name: value for name, value in saved.items() if name not in ("topology", "strategy")})
            problems = [] if options.mode is not None else ["no mode"]
        except InputError as error:
            problems = [str(error)]
        except TypeError as error:
            problems = [str(error)]
    if not problems and meta.get("topology") is not None:
        try:
            topology_from_record(meta["topology"], "its topology")
        except InputError as error:
            problems = [str(error)]
    if problems:
        raise InputError(f"{path} has damaged plan options ({'; '.join(problems)}); plan again and save")
    checks = {
        "k": 1 <= meta["k"] <= 2**31,
        "dtype": meta["dtype"] in ("float32", "float64"),
        "ranks": isinstance(meta.get("ranks"), int) and meta["ranks"] >= 1,
        "checksum": isinstance(meta.get("checksum"), str),
        "plan_checksum": isinstance(meta.get("plan_checksum"), str),
    }
    choice = meta["choice"]
    try:
        checks["choice"] = (
            Strategy(choice["strategy"]).value in choice["candidates"]
            and isinstance(choice["requested"], str)
            and isinstance(choice["model"], str)
            and all(
                isinstance(name, str) and float(seconds) >= 0 and int(volume) >= 0
                for name, (seconds, volume) in choice["candidates"].items()
            )
            and all(name in choice["candidates"] and int(count) >= 0 for name, count in choice.get("steps", {}).items())
            and all(name in choice["candidates"] and float(s) > 0 for name, s in choice.get("measured", {}).items())
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        checks["choice"] = False
    for name, good in checks.items():
        if not good:
            raise InputError(f"{path} has a damaged plan setting {name!r} ({meta.get(name)!r}); plan again and save")


def write_plan_file(path: str | os.PathLike, matrix: DistributedMatrix, plan: RankPlan, settings: dict) -> None:
    """Collective. Write every rank's ``plan`` and ``settings`` (JSON-able) for ``matrix`` to one
    file at ``path`` (rank 0 writes; every rank passes the same path). An unwritable path raises
    the same InputError on every rank."""
    comm = matrix.comm
    checksum = matrix.checksum()
    gathered = comm.gather(plan_arrays(plan), root=0)
    problem = None
    if comm.Get_rank() == 0:
        flat = {}
        for name in ("row_order", "col_order"):  # the partitioner's permutation travels with the plan
            order = getattr(matrix, name)
            if order is not None:
                flat[name] = np.asarray(order, np.int64)
        for rank, rank_arrays in enumerate(gathered):
            flat.update({f"r{rank}/{name}": value for name, value in rank_arrays.items()})
        meta = {
            "format": PLAN_FORMAT,
            "version": PLAN_FORMAT_VERSION,
            "ranks": comm.Get_size(),
            "checksum": checksum,
            "plan_checksum": arrays_checksum(flat),
            **settings,
        }
        flat["meta"] = np.array(json.dumps(meta))
        try:
            with atomic_write(path) as handle:
                np.savez(handle, **flat)
        except OSError as error:
            problem = f"cannot write the plan to {path}: {error.strerror}; check the directory exists and is writable"
    agree_on_error(comm, problem)


def read_plan_file(path: str | os.PathLike, matrix: DistributedMatrix) -> tuple[dict, RankPlan]:
    """Collective. The settings (``meta``) and this rank's plan from the file at ``path`` (rank 0
    reads it), after checking it is a plan file of this format version for this matrix, its
    orders and this number of ranks, with undamaged settings and arrays (see the module
    docstring); else the same PlanMismatchError or InputError on every rank, in one line."""
    comm = matrix.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    checksum = matrix.checksum()
    problem, meta, pieces = None, None, None
    if rank == 0:
        try:
            meta, pieces = _read_archive(path, matrix, size, checksum)
        except (InputError, PlanMismatchError) as error:
            problem = error
    agree_on_error(comm, problem)
    meta = comm.bcast(meta, root=0)
    plan = None
    try:
        plan = plan_from_arrays(comm.scatter(pieces, root=0), rank, matrix.row_partition, matrix.col_partition)
    except InputError as error:
        problem = InputError(f"{path} holds a damaged plan (rank {rank}'s {error}); plan again and save")
    agree_on_error(comm, problem)
    return meta, plan


def _read_archive(path, matrix: DistributedMatrix, size: int, checksum: str) -> tuple[dict, list[dict]]:
    """Rank 0's part of :func:`read_plan_file`: the settings and every rank's arrays, checked."""
    try:
        with open_archive(path, "a plan file written by SpmmPlan.save") as archive:
            if "meta" not in archive.files:
                raise InputError(f"{path} is not a sparsewire SpMM plan file")
            meta = json.loads(str(archive["meta"]))
            _check_meta(meta, path)
            if meta["ranks"] != size:
                raise PlanMismatchError(
                    f"{path} holds a plan for P = {meta['ranks']} ranks, not {size}; load it on {meta['ranks']} ranks or plan "
                    "again"
                )
            if meta["checksum"] != checksum:
                raise PlanMismatchError(
                    f"{path} was saved for another matrix or partition (checksum {meta['checksum'][:12]!r} != "
                    f"{checksum[:12]!r}); plan this matrix with matrix.spmm_plan(...)"
                )
            flat = {name: archive[name] for name in archive.files if name != "meta"}
    except (InputError, PlanMismatchError):
        raise
    except (OSError, ValueError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile, zlib.error) as error:
        # What a damaged archive raises: zipfile (BadZipFile; RuntimeError for encryption and, through
        # a subclass of it, for unknown compression methods), zlib, NumPy, json (ValueError).
        raise InputError(
            f"cannot read a plan from {path}: {error or type(error).__name__}; give a file written by SpmmPlan.save"
        ) from None
    if arrays_checksum(flat) != meta["plan_checksum"]:
        raise InputError(
            f"{path} was changed after it was saved: its plan arrays do not match their checksum; plan again and save"
        )
    for name in ("row_order", "col_order"):
        saved, current = flat.get(name), getattr(matrix, name)
        if (saved is None) != (current is None) or (saved is not None and not np.array_equal(saved, current)):
            raise PlanMismatchError(
                f"{path} was saved for another ordering of the matrix ({name}); distribute it with the same partitioner"
            )
    pieces: list[dict] = [{} for _ in range(size)]
    for name, value in flat.items():
        owner, slash, field = name.partition("/")
        if name in ("row_order", "col_order"):
            continue
        if not slash or not owner[1:].isdigit() or not 0 <= int(owner[1:]) < size:
            raise InputError(
                f"{path} holds an array {name!r} that belongs to no rank of {size}; give a file written by SpmmPlan.save"
            )
        pieces[int(owner[1:])][field] = value
    return meta, pieces


@collective_errors
def load_plan(cls, path: str | os.PathLike, matrix: DistributedMatrix, run: dict):
    """Collective. The :class:`~sparsewire.distributed.spmm.SpmmPlan` (``cls``) saved at ``path`` for
    ``matrix``, with its saved :class:`~sparsewire.exec.options.ExecOptions` and ``run``'s fields (this
    run's threads, backend, device, transfer calibration; a transport when given) replacing theirs."""
    comm = matrix.comm
    meta, plan = read_plan_file(path, matrix)
    saved = meta["options"]
    record = meta.get("topology")
    topology = topology_named(saved["topology"], comm) if record is None else topology_from_record(record, str(path))
    problem = options = None
    try:
        options = ExecOptions(**{**saved, "topology": topology, **run})
    except InputError as error:
        problem = error
    agree_on_error(comm, problem)
    stats = collective_stats(comm, plan, meta["k"], np.dtype(meta["dtype"]).itemsize, topology or Topology.flat())
    choice_meta = meta["choice"]
    choice = StrategyChoice(
        Strategy(choice_meta["strategy"]),
        choice_meta["requested"],
        choice_meta["model"],
        {name: (float(s), int(b)) for name, (s, b) in choice_meta["candidates"].items()},
        {name: int(count) for name, count in choice_meta.get("steps", {}).items()},
        {name: float(seconds) for name, seconds in choice_meta.get("measured", {}).items()},
    )
    return cls(matrix, plan, stats, meta["k"], np.dtype(meta["dtype"]), options, choice, transposed=meta["transposed"])


def topology_named(name: str | None, comm: MPI.Comm) -> Topology | None:
    """Collective for ``mpi-nodes``. The topology a plan file names (None: flat)."""
    if name is None:
        return None
    if name == "mpi-nodes":
        return Topology.from_mpi(comm)
    return parse_topology(name)
