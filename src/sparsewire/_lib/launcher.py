"""Which launcher started this process, read from the environment alone (no MPI, no torch imported)."""

from __future__ import annotations

import os

__all__ = ["launched_by_torchrun", "launcher_rank"]


def launched_by_torchrun() -> bool:
    """Not collective. Whether ``torchrun`` (torch.distributed.elastic) started this process: its processes share no
    MPI world, only torch.distributed."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "WORLD_SIZE" in os.environ


def launcher_rank() -> int:
    """Not collective. This process's rank as its launcher set it (torchrun: ``RANK``; MPICH's Hydra: ``PMI_RANK``;
    Open MPI: ``OMPI_COMM_WORLD_RANK``), 0 when none did."""
    if launched_by_torchrun():
        return int(os.environ["RANK"])
    return int(os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0")
