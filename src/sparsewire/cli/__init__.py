"""The ``sparsewire`` command line, one module per command family, each a thin layer over the
library: :mod:`~sparsewire.cli.analyze` (``analyze``, no MPI), :mod:`~sparsewire.cli.spmm`
(``spmm``, ``eigs``, under mpiexec), :mod:`~sparsewire.cli.spgemm` (``spgemm``, ``bfs``, ``sssp``,
``triangles``, ``reach``, under mpiexec), :mod:`~sparsewire.cli.gnn` (``gcn``, under mpiexec) and
:mod:`~sparsewire.cli.sim` (``simulate``, ``calibrate``, ``netsparse``, no MPI; ``calibrate
--device`` under mpiexec).

Every user error prints one line ``sparsewire: error: <problem>; <fix>`` on rank 0 and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from sparsewire import __version__
from sparsewire.cli import analyze, calibrate, emulate, gnn, graphs, netsparse, sim, spgemm, spmm
from sparsewire.cli.common import Parser
from sparsewire.errors import SparsewireError, SparsewireWarning

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = Parser(
        prog="sparsewire",
        description="Distributed sparse x dense (SpMM) and sparse x sparse semiring (SpGEMM) matrix multiplication "
        "that moves as few bytes as the sparsity allows.",
    )
    parser.add_argument("--version", action="version", version=f"sparsewire {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for family in (analyze, spmm, spgemm, graphs, gnn, sim, calibrate, netsparse, emulate):
        family.add_commands(commands)
    return parser


def _is_root() -> bool:
    """Rank 0 of the job, also before MPI is initialised (argument errors): then the launcher's
    rank variable tells (MPICH/Hydra: PMI_RANK, Open MPI: OMPI_COMM_WORLD_RANK)."""
    from sparsewire._lib.launcher import launched_by_torchrun, launcher_rank

    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and not launched_by_torchrun():
        return mpi.COMM_WORLD.Get_rank() == 0
    return launcher_rank() == 0


def show_warnings_on_one_line() -> None:
    """Not collective. Show sparsewire's warnings as one line, ``sparsewire: notice: <message>``, the
    form of the command line's other messages (the file and line of the library's code would tell a
    user of the command line nothing); every other warning as before. Filters apply first, as for any
    warning. Only the command line does this: a library must not change how a program shows warnings."""
    show_others = warnings.showwarning
    if getattr(show_others, "one_line", False):  # installed already (main called again in one process)
        return

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, SparsewireWarning):
            print(f"sparsewire: notice: {message}", file=sys.stderr if file is None else file, flush=True)
        else:
            show_others(message, category, filename, lineno, file, line)

    show.one_line = True
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sparsewire`` console script and ``python -m sparsewire``."""
    show_warnings_on_one_line()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return args.handler(args)
    except SparsewireError as error:
        if _is_root():
            print(f"sparsewire: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _abort_if_several_ranks("interrupted (SIGINT)", 130)
        return 130
    except BrokenPipeError:  # stdout closed early (``sparsewire ... | head -1``): end as a shell tool does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit does not raise again
        return 141  # 128 + SIGPIPE
    except Exception as error:
        if _abort_if_several_ranks(f"{type(error).__name__}: {error}", 1, traceback=True):
            return 1  # not reached: MPI_Abort ends the process
        raise


def _abort_if_several_ranks(message: str, status: int, traceback: bool = False) -> bool:
    """If MPI runs a job of several ranks, abort all of them (after the traceback if asked): one
    rank failing or interrupted would leave the others waiting forever in a collective, and its
    own exit would block in MPI_Finalize (mpi4py.run does the same)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized() or mpi.COMM_WORLD.Get_size() == 1:
        return False
    if traceback:
        import traceback as tracebacks

        tracebacks.print_exc()
    from sparsewire.comm.runtime import abort_job

    abort_job(mpi.COMM_WORLD, message, status)
    return True
