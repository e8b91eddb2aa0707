"""Programs against the public API only (``import sparsewire``) that must end their job, run by tests/test_api.py
under ``mpiexec -n P``. Usage: ``python tests/api_driver.py CASE [MODE/BACKEND]``; prints ``OK ...`` on rank 0 only
where the job was not ended, which the tests count as a failure.

- ``wrong_shape``: rank 1 passes a B block with one row too few (the job must abort, not hang).
- ``complex_b``: a complex B in the mode and backend named is refused: the job ends with the one-line error.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import sparsewire


def wrong_shape() -> str:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    matrix = sparsewire.distribute(comm, "stencil2d:20")
    with matrix.spmm_plan(4) as plan:
        rows = plan.input_rows - (1 if rank == 1 else 0)
        plan.multiply(np.ones((rows, 4)))
        plan.multiply(np.ones((rows, 4)))
    return "OK wrong_shape ran (it should not have)"


def complex_b(combination: str) -> str:
    """A complex B in the mode and backend ``combination`` (MODE/BACKEND): the job must end with the error."""
    mode, backend = combination.split("/")
    matrix = sparsewire.distribute(MPI.COMM_WORLD, "stencil2d:12")
    with matrix.spmm_plan(2, mode=mode, backend=backend) as plan:
        plan.multiply(np.ones((plan.input_rows, 2)) * (1 + 2j))
    return f"OK complex_b ran {combination} (it should not have)"


if __name__ == "__main__":
    case = sys.argv[1]
    result = wrong_shape() if case == "wrong_shape" else complex_b(sys.argv[2])
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(result, flush=True)
