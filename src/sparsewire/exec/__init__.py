"""Execute: the SpMM executor (:class:`~sparsewire.exec.executor.SpmmExecutor`, which runs a plan's
exchanges over a transport) and its options (:class:`~sparsewire.exec.options.ExecOptions`).

This package's ``__all__`` is the executor's public entry, the only one the SpGEMM and GNN folders
use. The executor itself is loaded on first use: importing it initialises MPI, importing the
options does not.
"""

from sparsewire._lib.lazy import lazy_exports
from sparsewire.exec.options import ExecOptions, exec_options

__all__ = ["ExecOptions", "exec_options", "SpmmExecutor", "process_group_ranks"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "SpmmExecutor": "sparsewire.exec.executor",
        "process_group_ranks": "sparsewire.exec.transports.torch_distributed",
    },
)
