"""comm/runtime: agreeing on errors across ranks (under mpiexec, with a timeout)."""

from __future__ import annotations

from conftest import run_mpi

AGREE = r"""
from mpi4py import MPI
from sparsewire.comm.runtime import agree_on_error, problem_from
from sparsewire.errors import InputError, PlanMismatchError
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
cases = [
    ("memory", problem_from(MemoryError()) if rank == 1 else None),
    ("empty", "" if rank == 1 else None),
    ("typed", problem_from(PlanMismatchError("plans differ")) if rank == 1 else None),
    ("none", None),
]
outcomes = []
for name, problem in cases:
    try:
        agree_on_error(comm, problem)
        outcomes.append(f"{name} {rank} no error")
    except (InputError, PlanMismatchError) as error:
        outcomes.append(f"{name} {rank} {type(error).__name__}: {error}")
everyone = comm.gather(outcomes)  # one printer: the ranks' lines must not interleave
if rank == 0:
    print("\n".join(line for lines in everyone for line in lines), flush=True)
"""


def test_an_exception_without_a_message_is_an_error_on_every_rank():
    completed = run_mpi(2, ["-c", AGREE], timeout=60)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = sorted(completed.stdout.splitlines())
    assert lines == [
        "empty 0 InputError: an error without a message",
        "empty 1 InputError: an error without a message",
        "memory 0 InputError: MemoryError (without a message)",
        "memory 1 InputError: MemoryError (without a message)",
        "none 0 no error",
        "none 1 no error",
        "typed 0 PlanMismatchError: plans differ",
        "typed 1 PlanMismatchError: plans differ",
    ]
