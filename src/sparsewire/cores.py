"""Cores and threads per rank, in a module that loads no compiler (the MPI run-time helpers and
the mode choice ask it before any kernel is needed)."""

from __future__ import annotations

import os

__all__ = ["default_threads"]


def default_threads(ranks_on_node: int) -> int:
    """Not collective. ``cores / ranks on this node``, at least 1 (cores: this process's CPU
    affinity, else the machine's count)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, ranks_on_node))
