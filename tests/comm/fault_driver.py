"""Programs in which one rank fails, run by tests/comm/test_faults.py under ``mpiexec -n P`` with plain
``python`` (no ``-m mpi4py``). Usage: ``python tests/comm/fault_driver.py CASE``. The last rank fails;
every rank multiplies in a loop, so the others are waiting in MPI for it when it does.

- ``raise_in_multiply``: its local product raises in the middle of the third multiply.
- ``raise_between``: the program raises its own exception between two multiplies.
- ``sigint`` / ``sigkill``: it is sent SIGINT / SIGKILL between two multiplies.
- ``disagree_k`` / ``disagree_dtype``: it plans with another k / dtype than the others.
- ``cli_raise_in_multiply``: ``sparsewire spmm`` with the local product of the last rank raising.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import sparsewire
from sparsewire.kernels.numpy_backend import NumpyBackend

comm = MPI.COMM_WORLD
failing = comm.Get_rank() == comm.Get_size() - 1


def plant_kernel_fault(after_calls: int) -> None:
    """Make this rank's local product (the NumPy backend's, every executor's choke point) raise on
    call ``after_calls`` + 1."""
    original, calls = NumpyBackend.multiply, [0]

    def faulty(*args, **kwargs):
        calls[0] += 1
        if calls[0] > after_calls:
            raise RuntimeError(f"planted fault in the local product of rank {comm.Get_rank()}")
        return original(*args, **kwargs)

    NumpyBackend.multiply = staticmethod(faulty)


def multiply_loop(case: str) -> None:
    matrix = sparsewire.distribute(comm, "stencil2d:40")
    k, dtype = 4, np.float64
    if failing and case == "disagree_k":
        k = 5
    if failing and case == "disagree_dtype":
        dtype = np.float32
    with matrix.spmm_plan(k, dtype=dtype, mode="bulk") as plan:
        b = np.ones((plan.input_rows, k), dtype)
        if failing and case == "raise_in_multiply":
            plant_kernel_fault(after_calls=2 * 1)  # the diagonal product is one call per multiply
        for step in range(1000):
            if failing and step == 3:
                if case == "raise_between":
                    raise RuntimeError(f"planted fault of the program on rank {comm.Get_rank()}")
                if case == "sigint":
                    os.kill(os.getpid(), signal.SIGINT)
                if case == "sigkill":
                    print(f"rank {comm.Get_rank()} kills itself", file=sys.stderr, flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
            plan.multiply(b)
    raise AssertionError("the loop ended: the fault did not stop the job")


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "cli_raise_in_multiply":
        from sparsewire.cli import main

        if failing:
            plant_kernel_fault(after_calls=2)
        sys.exit(main(["spmm", "stencil2d:40", "--k", "4", "--repeat", "1000", "--mode", "bulk"]))
    multiply_loop(case)
