"""What the command families share: argument types, the matrix and topology arguments, MPI start."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

import numpy as np

from sparsewire._lib.launcher import launched_by_torchrun
from sparsewire.errors import InputError
from sparsewire.exec.transports import transport_help, transport_names
from sparsewire.kernels import BACKENDS
from sparsewire.plan.modes import MODES

__all__ = [
    "MATRIX_HELP",
    "DTYPES",
    "DEFAULT_MODE",
    "Parser",
    "positive_int",
    "add_topology_arguments",
    "topology_from_args",
    "start_mpi",
    "progress_printer",
    "add_partition_arguments",
    "PARTITION_HELP",
    "parse_modes",
    "add_transport_argument",
    "json_text",
    "add_backend_arguments",
    "resolve_backend_arguments",
    "options_from_args",
    "refuse_oversized",
    "check_plot_path",
    "refuse_ranks_beyond_memory",
]

MATRIX_HELP = (
    "a .mtx/.mtx.gz (Matrix Market), .txt/.txt.gz (SNAP edge list), .graph/.graph.gz (METIS) or .npz file, "
    "a matrix that ships with sparsewire (bcsstk25, delaunay_n16), or a generator spec: "
    "rmat:SCALE:EDGE_FACTOR[:SEED], delaunay:N[:SEED], stencil2d:NX[:NY], stencil3d:N[:7|27], "
    "uniform:ROWS[xCOLS]:PER_ROW[:SEED]"
)
DTYPES = {"float32": np.float32, "float64": np.float64}
DEFAULT_MODE = "auto"


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one InputError line instead of its usage dump."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse hook
        raise InputError(f"{message}; see '{self.prog} --help'")


#: The largest count any flag takes (MPI's counts are C ints; a larger width, rank count or repeat is a typo).
LARGEST_COUNT = 2**31 - 1


def positive_int(text: str) -> int:
    """argparse type: a whole number from 1 to :data:`LARGEST_COUNT`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer (got {text!r})") from None
    if not 1 <= value <= LARGEST_COUNT:
        raise argparse.ArgumentTypeError(f"must be from 1 to {LARGEST_COUNT} (got {text})")
    return value


def seed_number(text: str) -> int:
    """argparse type: a random seed, a whole number from 0 to 2**63 - 1 (what NumPy and PyTorch both take)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (got {text!r})") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be from 0 to 2**63 - 1 (got {text})")
    return value


def number(minimum: float | None = None, *, above: bool = False, below: float | None = None):
    """argparse type: a finite number (NaN and infinity refused), at least ``minimum`` (greater than
    it with ``above``) and less than ``below`` where given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number (got {text!r})") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number (got {text!r})")
        if minimum is not None and (value <= minimum if above else value < minimum):
            raise argparse.ArgumentTypeError(f"must be {'greater than' if above else 'at least'} {minimum:g} (got {text})")
        if below is not None and value >= below:
            raise argparse.ArgumentTypeError(f"must be less than {below:g} (got {text})")
        return value

    parse.__name__ = "number"  # argparse names the type in its message
    return parse


def add_topology_arguments(parser: argparse.ArgumentParser, allow_mpi: bool) -> None:
    """--group-size/--topology (one of them) and --proxy."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--group-size", "-G", type=positive_int, help="groups of G consecutive ranks (same as --topology nodes:G)")
    from sparsewire.topology.presets import PRESETS

    presets = ", ".join(["nodes:G", *PRESETS]) + (", mpi (shared-memory nodes)" if allow_mpi else "")
    where.add_argument(
        "--topology",
        help=f"cluster model: {presets}, or a file of 'sparsewire calibrate --network' (this machine's measured links); "
        "adds per-link-class bytes and predicted time",
    )
    parser.add_argument(
        "--proxy",
        choices=["local", "balanced"],
        default="local",
        help="hierarchical strategies: which rank of a group receives a remote rank's B rows: the same local rank "
        "(CoLa) or spread by bytes (default: local)",
    )


def topology_from_args(args: argparse.Namespace, comm=None):
    """The Topology the arguments name (None: flat); ``mpi`` needs the communicator."""
    from sparsewire.topology.model import Topology
    from sparsewire.topology.presets import parse_topology

    if args.group_size is not None:
        return Topology.nodes(args.group_size)
    if args.topology is None:
        return None
    if args.topology.strip().lower() == "mpi":
        if comm is None:
            raise InputError("--topology mpi needs MPI (it groups the ranks of each node); use it with spmm or give nodes:G")
        return Topology.from_mpi(comm)
    return parse_topology(args.topology)


def check_writable(path, flag: str) -> None:
    """InputError, before any work, when ``path`` (given as ``flag``) cannot be written: its
    directory is missing or not writable, or it is a directory (else the whole run would end in
    a traceback at the last step). ``write_output`` still turns a later failure into one line."""
    import os

    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    if os.path.isdir(target):
        raise InputError(f"{flag} {path} is a directory; give a file path")
    if not os.path.isdir(directory):
        raise InputError(f"{flag} {path}: the directory {directory} does not exist; create it or give another path")
    if not os.access(directory, os.W_OK) or (os.path.exists(target) and not os.access(target, os.W_OK)):
        raise InputError(f"{flag} {path} cannot be written (permission denied); give a path in a writable directory")


def check_plot_path(path, flag: str) -> None:
    """InputError, before any work, when ``path`` cannot be written (:func:`check_writable`) or its
    extension is not a format matplotlib writes (one without an extension would get ``.png`` added
    behind the user's back)."""
    import os

    from matplotlib.backend_bases import FigureCanvasBase

    check_writable(path, flag)
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    extension = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if extension not in formats:
        given = f"the extension .{extension} is not an image format matplotlib writes" if extension else "no extension"
        raise InputError(f"{flag} {path}: {given}; end the name in .png, .svg or .pdf")


def write_output(path, flag: str, write) -> None:
    """Call ``write(path)``; an OSError (the disk filled, the directory went away) becomes one
    InputError naming ``flag`` and the path."""
    try:
        write(path)
    except OSError as error:
        raise InputError(
            f"{flag} {path} could not be written: {error.strerror or error}; give a path in a writable directory"
        ) from None


def refuse_oversized(comm, needed: int, what: str, fix: str) -> None:
    """Collective (comm may be None: one process). One InputError on every rank when a rank's ``needed``
    bytes, implied by the arguments, exceed what it may allocate (:func:`~sparsewire._lib.sizes.check_derived_fits`)."""
    from sparsewire._lib.sizes import check_derived_fits

    try:
        check_derived_fits(needed, what, fix)
        problem = None
    except InputError as error:
        problem = error
    if comm is None:
        if problem:
            raise problem
        return
    from sparsewire.comm.runtime import agree_on_error

    agree_on_error(comm, problem)


def refuse_ranks_beyond_memory(ranks: int) -> None:
    """Not collective. ``--ranks`` planned in one process (analyze, advise, simulate): refused before
    anything is loaded when its P^2 boxes would not fit (:func:`~sparsewire._lib.sizes.serial_planning_bytes`)."""
    from sparsewire._lib.sizes import serial_planning_bytes

    what = f"--ranks {ranks}: planning {ranks} ranks in one process"
    refuse_oversized(None, serial_planning_bytes(ranks), what, "use a smaller --ranks")


def agree_on_arguments(comm, args: argparse.Namespace) -> None:
    """Collective. The same PlanMismatchError on every rank when the ranks were started with
    different arguments (an MPMD launch, ``mpiexec -n 1 ... --repeat 3 : -n 1 ... --repeat 5``):
    one rank would run more multiplies than the others and wait for them forever."""
    from sparsewire.comm.runtime import agree_on_values

    values = {f"the argument {name}": value for name, value in sorted(vars(args).items()) if not callable(value)}
    agree_on_values(comm, values, "start every rank with the same command line")


def start_mpi(modes: list[str], threads: int | None):
    """Import mpi4py's MPI at the thread level the modes need: MULTIPLE only for the partitioned
    mode with several threads (every thread calls MPI), FUNNELED otherwise."""
    import mpi4py

    several_threads = threads is None or threads > 1
    mpi4py.rc.thread_level = "multiple" if "partitioned" in modes and several_threads else "funneled"
    from mpi4py import MPI

    return MPI


PARTITION_HELP = (
    "even (equal rows), nnz (balanced nonzeros), metis (METIS k-way, weights = row nonzeros), rcm (reverse "
    "Cuthill-McKee, split by nonzeros), community (Louvain communities laid out contiguously), metis-hier "
    "(METIS into the topology's groups, then into their ranks), auto (even, or METIS where it cuts the B rows "
    "that cross the slowest links, between the topology's groups or else between ranks, by at least 10%%); the "
    "reordering ones are undone on output"
)


def add_partition_arguments(parser: argparse.ArgumentParser, default: str = "even") -> None:
    """--partition (every partitioner of sparsewire.partition, and auto) and --imbalance."""
    from sparsewire.partition import PARTITION_CHOICES

    parser.add_argument("--partition", choices=PARTITION_CHOICES, default=default, help=f"{PARTITION_HELP} (default: {default})")
    parser.add_argument(
        "--imbalance",
        type=number(0.0),
        default=0.03,
        help="metis, metis-hier, auto: allowed excess of nonzeros per rank over the mean (default: 0.03)",
    )


def progress_printer(args: argparse.Namespace):
    """A callable printing progress lines to stderr, or None with --json (stdout holds one object)."""
    return None if getattr(args, "json", False) else (lambda text: print(text, file=sys.stderr, flush=True))


def stage_progress(label: str, every: float = 2.0):
    """A ``progress(stage, done, total)`` for :func:`~sparsewire.plan.plan.build_plan` (and
    :func:`~sparsewire.plan.counted.counted_sends`) that prints a line to stderr when a stage has passed
    another tenth and ``every`` seconds have gone by since the last line (or the start): silent on plans
    that take moments. Each line has a bar and the time the stage's rest will take at its rate so far
    (``planning joint: records [####------] 40% (410/1024 ranks), about 12 s left``), or the stage's
    time once it is done."""
    import time

    last_line = [time.perf_counter()]
    last_event = [last_line[0]]
    started: dict[str, float] = {}
    shown: dict[str, int] = {}

    def report(stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        started.setdefault(stage, last_event[0])  # a stage starts when the one before it last reported
        last_event[0] = now
        tenth = 10 * done // max(total, 1)
        if tenth <= shown.get(stage, 0) or now - last_line[0] < every:
            return
        shown[stage], last_line[0] = tenth, now
        elapsed = now - started[stage]
        when = f"in {elapsed:.1f} s" if done >= total else f"about {elapsed / max(done, 1) * (total - done):.0f} s left"
        bar = "#" * tenth + "-" * (10 - tenth)
        print(f"{label}: {stage} [{bar}] {10 * tenth}% ({done}/{total} ranks), {when}", file=sys.stderr, flush=True)

    return report


def parse_modes(text: str) -> list[str]:
    """Parse a comma-separated list of executor modes (``all`` means every mode; ``auto`` is
    resolved by :func:`sparsewire.plan.modes.choose_mode` once k and the threads are known)."""
    names = [name.strip().lower() for name in text.split(",") if name.strip()]
    if names == ["all"]:
        return list(MODES)
    if names == ["auto"]:
        return names
    for name in names:
        if name not in MODES:
            raise InputError(f"unknown mode {name!r}; choose from {', '.join(MODES)}, auto or all")
    if not names:
        raise InputError(f"no mode given; choose from {', '.join(MODES)}")
    return list(dict.fromkeys(names))


def add_transport_argument(parser: argparse.ArgumentParser) -> None:
    """``--transport``: one of the registered transports (:mod:`sparsewire.exec.transports`), each
    described in ``--help`` from its registration; and ``--wait-timeout``, the bound on a wait."""
    from sparsewire.comm.watchdog import DEFAULT_WAIT_TIMEOUT, MIN_WAIT_TIMEOUT

    parser.add_argument(
        "--transport",
        choices=transport_names(),
        default="torch" if launched_by_torchrun() else "mpi",
        help=f"how messages move: {transport_help()} (default: mpi; torch in a job torchrun started)",
    )
    parser.add_argument(
        "--wait-timeout",
        type=number(MIN_WAIT_TIMEOUT),
        metavar="SECONDS",
        help="end the job, naming the rank, peer, link and bytes outstanding, when a multiply receives nothing for this "
        f"long: a dead link or a stopped peer (at least {MIN_WAIT_TIMEOUT:g}; default: {DEFAULT_WAIT_TIMEOUT:g})",
    )


def add_compress_argument(parser: argparse.ArgumentParser) -> None:
    """``--compress``: the payload codec of every message (:mod:`sparsewire.wire.codecs`)."""
    from sparsewire.wire.codecs import CODECS

    parser.add_argument(
        "--compress",
        default="none",
        metavar="[inter:|auto:]CODEC",
        help=f"payload codec ({', '.join(CODECS)}) of every message; with inter: only of the messages between groups "
        "(the topology's, else MPI's shared-memory nodes); with auto: (auto alone: auto:bf16) only of the links where "
        "the wire time saved exceeds the codec's time, measured at the start, against the --topology's bandwidths "
        "(sparsewire calibrate --network writes them; without, MPI's nodes and assumed constants): none (rows as they "
        "are, bitwise), bf16 (each entry within "
        "max(2^-8 |x|, 2^-134)), fp16 (a power-of-two scale per row, 2^-11 relative) or int8 (an affine map per row, "
        "stochastic rounding, within (max - min) / 255 of the row): about a quarter (bf16, fp16) or an eighth (int8) of "
        "float64's bytes on the wire; explain() states the bound on the product. MPI transport on the CPU, modes bulk, "
        "overlap, pipelined, early (default: none)",
    )


def options_from_args(args: argparse.Namespace, topology=None, *, strategy: str = "auto", mode: str | None = None):
    """Not collective. The :class:`~sparsewire.exec.options.ExecOptions` of the command's arguments
    (``--transport``, ``--backend``, ``--device``, ``--threads``, ``--deterministic``, ``--proxy``,
    ``--transfer-calibration``, those the command has) for one ``strategy`` and ``mode``."""
    from sparsewire.exec.options import ExecOptions

    chosen_here = ("strategy", "topology", "mode")  # the command's own forms of these are lists or names
    fields = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(ExecOptions)
        if field.name not in chosen_here and getattr(args, field.name, None) is not None
    }
    return ExecOptions(strategy=strategy, topology=topology, mode=None if mode == "auto" else mode, **fields)


def add_backend_arguments(parser: argparse.ArgumentParser, default: str = "numpy") -> None:
    """``--backend`` and ``--device``: where the executor's buffers live and what runs its products
    (:func:`resolve_backend_arguments` fills in what was left out)."""
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="local products and buffers: numpy (NumPy arrays, the compiled kernels; every mode; CPU only) or torch (torch "
        "tensors, "
        f"PyTorch's sparse CSR products and gathers; every mode but partitioned) (default: {default}, torch on a cuda device)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the buffers and products live: cpu, cuda (each rank the GPU of its "
        "rank on the node, modulo the node's GPUs) or cuda:N; a cuda device implies --backend torch (default: cpu)",
    )


def resolve_backend_arguments(args: argparse.Namespace, default: str, comm=None) -> None:
    """Collective over ``comm`` when given (otherwise only the backend is filled in). ``--backend``
    left out: ``default`` on the CPU, torch on another device; ``--device cuda``: ``cuda:N`` with N
    this rank's rank on its node modulo the node's GPUs (one GPU per rank where there are enough,
    as NCCL needs), made PyTorch's current device."""
    if args.backend is None:
        args.backend = default if args.device == "cpu" else "torch"
    if comm is not None and args.device == "cuda":
        from sparsewire.kernels.torch_backend import node_device

        args.device = node_device(comm)


def json_text(value, indent: int | None = None) -> str:
    """Strict JSON of a report: NaN and infinite numbers become ``null`` (Python's ``json`` would
    write bare ``NaN`` / ``Infinity`` tokens, which JSON parsers reject), with one warning line on
    stderr saying how many."""
    replaced = 0

    def finite(item):
        nonlocal replaced
        if isinstance(item, float) and not math.isfinite(item):
            replaced += 1
            return None
        if isinstance(item, dict):
            return {key: finite(entry) for key, entry in item.items()}
        if isinstance(item, (list, tuple)):
            return [finite(entry) for entry in item]
        return item

    text = json.dumps(finite(value), indent=indent, allow_nan=False)
    if replaced:
        print(
            f"sparsewire: warning: {replaced} numbers in the JSON are NaN or infinite; written as null",
            file=sys.stderr,
            flush=True,
        )
    return text
