"""Numba, as every module of the package imports it: with a thread pool large enough for the
executor's ``threads=T``.

Numba sizes its thread pool from ``NUMBA_NUM_THREADS`` when it is first imported, and refuses
another size afterwards; its default is the core count, but a rank may ask for more threads than
cores (up to 64, to measure oversubscription). So the first import of Numba through this module
sets the variable when the user has not (the threads themselves start only when asked for). Where
Numba was imported before, its pool stays as it is and :func:`~sparsewire.kernels.compiled.check_threads`
names the limit. Importing ``sparsewire`` alone does not import this module.

:func:`njit` is Numba's, with one process at a time compiling a cached kernel: the ranks of a job on one node
start together and each would compile the same kernels, P times the work on the node's cores, where one
compiling while the others wait and then load its result from Numba's cache costs the time of one.
"""

import contextlib
import fcntl
import functools
import os
import sys

if "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(64, os.cpu_count() or 1)))

import numba  # noqa: E402
from numba import literally, prange  # noqa: E402
from numba.core import cgutils, types  # noqa: E402
from numba.core.compiler_lock import global_compiler_lock  # noqa: E402
from numba.extending import intrinsic, models, register_model  # noqa: E402

__all__ = ["numba", "njit", "prange", "literally", "cgutils", "types", "intrinsic", "models", "register_model"]


def njit(*args, **options):
    """Not collective. ``numba.njit`` (bare or with options); a kernel cached on disk (``cache=True``) compiles
    under :func:`_one_process_compiles`."""
    if len(args) == 1 and callable(args[0]) and not options:
        return _one_process_compiles(numba.njit(args[0]))
    decorate = numba.njit(*args, **options)
    return lambda function: _one_process_compiles(decorate(function))


def _one_process_compiles(dispatcher):
    """``dispatcher`` whose ``compile`` (each new signature, and each kernel it calls) holds an exclusive
    ``flock`` on a file beside the kernel's cache index. Numba's ``compile`` first looks in the cache, so a process
    that waited loads what the one before it saved instead of compiling it again. Kernels call kernels only down
    their call graph, which has no cycle, so two processes never wait for each other; the kernel releases the lock
    on its process's exit, a killed one too. Without a disk cache, or where the file cannot be opened or locked,
    Numba's own ``compile`` runs as it is."""
    try:
        path = dispatcher._cache._cache_file._index_path + ".lock"
    except AttributeError:  # no disk cache (cache=False): nothing another process could load
        return dispatcher
    compile_here = dispatcher.compile
    holding = False  # (one thread at a time reads it: Numba's compiler lock is held)

    @functools.wraps(compile_here)
    def compile_once(signature):
        nonlocal holding
        with global_compiler_lock:  # (Numba's own, taken first: one thread of this process at a time waits)
            if holding:  # a compile of this kernel inside its own compile: the lock is already held
                return compile_here(signature)
            try:
                lock = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)  # (nothing is written: the file is the lock)
            except OSError:
                return compile_here(signature)
            try:
                with contextlib.suppress(OSError):  # a file system without locks: compile as Numba would
                    fcntl.flock(lock, fcntl.LOCK_EX)
                holding = True
                return compile_here(signature)
            finally:
                holding = False
                os.close(lock)  # (closing releases the lock)

    dispatcher.compile = compile_once
    return dispatcher
