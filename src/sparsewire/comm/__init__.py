"""The communicator layer, the only owner of mpi4py below the MPI API: MPI's runtime (start, errors
agreed on every rank, aborts; :mod:`~sparsewire.comm.runtime`), the watchdog that bounds every wait
(:mod:`~sparsewire.comm.watchdog`), communicator lifetime (:mod:`~sparsewire.comm.lifetime`) and what
the MPI library supports (:mod:`~sparsewire.comm.mpi_library`), and the communicator of a job ``torchrun`` started
(:mod:`~sparsewire.comm.torch_world`; :func:`world` gives this job's, MPI's or that one). Importing
:mod:`sparsewire.comm.runtime` initialises MPI; the names below load it on first use."""

from sparsewire._lib.lazy import lazy_exports

__all__ = ["world", "agree_on_error", "collective_errors", "wait_all", "abort_job", "cuda_aware_mpi", "TorchComm"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "world": "sparsewire.comm.runtime",
        "TorchComm": "sparsewire.comm.torch_world",
        "agree_on_error": "sparsewire.comm.runtime",
        "collective_errors": "sparsewire.comm.runtime",
        "wait_all": "sparsewire.comm.runtime",
        "abort_job": "sparsewire.comm.runtime",
        "cuda_aware_mpi": "sparsewire.comm.mpi_library",
    },
)
