"""What the MPI library under mpi4py can do beyond the standard: whether it reads CUDA memory.

Not collective; asks the library mpi4py loaded, without side effects.
"""

from __future__ import annotations

import ctypes

__all__ = ["cuda_aware_mpi"]


def _mpi_library() -> ctypes.CDLL | None:
    """The MPI library mpi4py loaded (mpi4py opens it with local symbols, so look it up by path)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "/libmpi.so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def cuda_aware_mpi() -> tuple[bool, str]:
    """Not collective. Whether the MPI library can read CUDA device memory, and how that was found
    out. Asks ``MPIX_Query_cuda_support`` (MPICH 4 and later, Open MPI), which answers without
    side effects; MPICH's ``MPIX_GPU_query_support`` is not called, since MPICH before 4.1 asserts
    in it when built without GPU support. The MPICH wheel from PyPI is built without CUDA: no."""
    from mpi4py import MPI

    version = " ".join(MPI.Get_library_version().split()[:3])  # "MPICH Version: 5.0.2", "Open MPI v5.0.5, ..."
    library = _mpi_library()
    query = getattr(library, "MPIX_Query_cuda_support", None) if library is not None else None
    if query is None:
        return False, f"{version} offers no MPIX_Query_cuda_support, so it is taken as not CUDA-aware"
    query.restype, query.argtypes = ctypes.c_int, []
    answer = bool(query())
    return answer, f"{version}: MPIX_Query_cuda_support() = {int(answer)}"
