"""Local kernels: the one place the executor's arithmetic happens (a GPU backend plugs in here).

Operands are prepared once per executor (one plan, one k, one dtype, T threads): index arrays in
the kernels' types, values cast to the dtype, and the row ranges of the T threads balanced by
``nonzeros + rows`` (a row costs its nonzeros and one store of its C row), each cut into chunks
that a thread done with its own range takes from the others. The products then write
into preallocated outputs and allocate nothing per call.

CPU backend: :mod:`sparsewire.kernels.numba_csr` (Numba; OpenMP threads where Numba has them),
imported at the first product: a process that only plans, or runs the torch backend
(:mod:`sparsewire.kernels.torch_backend`), never loads Numba and LLVM (about 100 MiB resident once a
compiled kernel has run).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import types
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.cores import (  # default_threads re-exported: the kernels size their pools by it
    default_threads,
    oversubscribed,
)
from sparsewire.errors import InputError

__all__ = [
    "run_threaded",
    "CsrOperand",
    "GatherOperand",
    "CscOperand",
    "default_threads",
    "set_threads",
    "balanced_bounds",
    "multiply",
    "multiply_rows",
    "gather",
    "gather_rows",
    "apply_columns",
    "copy",
    "streams",
]


@functools.cache
def _compiled():
    """The compiled kernels' module, imported on first use."""
    from sparsewire.kernels import numba_csr as kernels_numba

    return kernels_numba


def set_threads(threads: int, ranks_on_node: int = 1) -> None:
    """Not collective. Use ``threads`` threads in the threaded kernels of the calling thread.

    When ``threads * ranks_on_node`` exceeds the cores, idle OpenMP threads must sleep rather than
    spin, or they take the cores the other ranks need (a multiply then ran many times slower).
    ``OMP_WAIT_POLICY`` is read when the OpenMP runtime loads, at the first threaded kernel, so this
    must run before it (a value the user set wins). Where PyTorch was imported first, its libgomp
    has loaded already and read no such setting, and Numba's OpenMP threads would share it and spin:
    then Numba's pool, not yet launched, takes its ``workqueue`` layer, whose idle threads sleep
    (a two-level plan's test at P = 3 on 2 cores: 7.9-8.4 s spinning, 4.1 s on ``workqueue``, 2.4-3.0 s
    with ``OMP_WAIT_POLICY=PASSIVE`` in the environment at start; docs/design-decisions.md, "Numba and
    PyTorch in one process").
    """
    from sparsewire._lib.jit import numba

    if oversubscribed(ranks_on_node, threads):
        if "OMP_WAIT_POLICY" not in os.environ and _global_openmp() is not None and not _pool_launched():
            numba.config.THREADING_LAYER = "workqueue"
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if threads < 1:
        raise InputError(f"threads must be at least 1 (got {threads})")
    limit = numba.config.NUMBA_NUM_THREADS
    if threads > limit:
        raise InputError(
            f"{threads} threads asked for but Numba's pool has {limit}; set NUMBA_NUM_THREADS={threads} "
            "before Python starts (sparsewire sizes the pool itself when it imports Numba first)"
        )
    run_threaded(numba.set_num_threads, threads)  # the first call launches Numba's pool


_OPENMP: tuple | None = None  # (omp_get_max_threads, omp_set_num_threads) of the global scope
_MODULES_SEEN = -1  # len(sys.modules) when the global scope last had no OpenMP runtime


def _global_openmp() -> tuple | None:
    """``(omp_get_max_threads, omp_set_num_threads)`` of the OpenMP runtime in the process's global symbol scope
    (PyTorch's libgomp, once imported), or None while there is none."""
    global _OPENMP, _MODULES_SEEN
    # A runtime enters the global scope with a module's import (PyTorch's): look again only when modules were
    # imported since the last look (a look costs 13 us, and every threaded kernel asks).
    if _OPENMP is None and len(sys.modules) != _MODULES_SEEN:
        _MODULES_SEEN = len(sys.modules)
        scope = ctypes.CDLL(None)
        if hasattr(scope, "omp_get_max_threads") and hasattr(scope, "omp_set_num_threads"):
            _OPENMP = (scope.omp_get_max_threads, scope.omp_set_num_threads)
    return _OPENMP


def _pool_launched() -> bool:
    """Whether Numba has launched its thread pool (its threading layer is fixed from then on)."""
    from sparsewire._lib.jit import numba

    return bool(numba.np.ufunc.parallel._is_initialized)


def run_threaded(kernel, *args) -> None:
    """Not collective. Run a threaded (Numba ``parallel=True``) kernel, or what may launch Numba's thread pool,
    without changing the calling thread's OpenMP team size.

    Numba's OpenMP layer calls ``omp_set_num_threads(NUMBA_NUM_THREADS)`` when it launches its
    thread pool (64 here: sparsewire raises Numba's pool so that ``threads`` may exceed the
    cores). PyTorch loads its own libgomp into the process's global symbol scope, so that call
    lands in PyTorch's OpenMP runtime, and every later PyTorch parallel region then ran 64 threads
    on the machine's cores, many times slower (whenever PyTorch ran a parallel region before Numba
    first did; docs/design-decisions.md, "Numba and PyTorch in one process"). Restoring the team size
    after each threaded kernel (two calls into libgomp) costs under a microsecond. Without an OpenMP
    runtime in the global scope (no PyTorch) there is nothing to restore.

    On Numba's ``workqueue`` layer (what :func:`set_threads` picks where ranks outnumber the cores and PyTorch's
    OpenMP loaded first) a threaded kernel's launch wakes a pool thread and waits for it: 0.55 ms, against 7 us for
    the kernel itself on a small graph. With one thread the kernel runs as its serial compilation there (its
    ``prange`` loops as ``range``), in the calling thread."""
    kernel = _serial(kernel) if _one_thread_on_workqueue() and getattr(kernel, "targetoptions", {}).get("parallel") else kernel
    openmp = _global_openmp()
    if openmp is None:
        kernel(*args)
        return
    team = openmp[0]()
    try:
        kernel(*args)
    finally:
        openmp[1](team)


def _one_thread_on_workqueue() -> bool:
    from sparsewire._lib.jit import numba

    return _pool_launched() and numba.config.THREADING_LAYER == "workqueue" and numba.get_num_threads() == 1


@functools.cache
def _serial(kernel):
    """``kernel`` (a ``parallel=True`` Numba dispatcher) compiled with its other options but serially, cached on disk
    under a name of its own (Numba's cache tells functions apart by name, not by options)."""
    from sparsewire._lib.jit import numba

    source = kernel.py_func
    serial = types.FunctionType(source.__code__, source.__globals__, source.__name__, source.__defaults__, source.__closure__)
    serial.__qualname__, serial.__module__ = f"{source.__qualname__}_serial", source.__module__
    options = {name: value for name, value in kernel.targetoptions.items() if name not in ("parallel", "nopython")}
    cached = type(kernel._cache).__name__ != "NullCache"  # as the kernel is (one defined in a string cannot be)
    return numba.njit(cache=cached, **options)(serial)


def balanced_bounds(indptr: np.ndarray, parts: int) -> np.ndarray:
    """Not collective. ``parts + 1`` row offsets splitting a CSR matrix into ranges of about equal
    ``nonzeros + rows``."""
    n_rows = indptr.size - 1
    work = indptr.astype(np.int64) + np.arange(n_rows + 1, dtype=np.int64)
    targets = np.linspace(0, work[-1], parts + 1)
    bounds = np.searchsorted(work, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, n_rows
    return np.maximum.accumulate(bounds)


#: Mean nonzeros per row below which the CSR product prefetches B rows. Short rows wait on each B
#: row in turn; long rows keep enough loads in flight by themselves, and there the prefetches only
#: add instructions. Measured with the register kernel, B and C aligned, 2 threads, caches flushed
#: by a 512 MB copy before each run, time with prefetch over time without (k = 32; k = 8):
#: luxembourg_osm (2.1 per row) 0.70; 0.72, mdual (4.0) 0.73; 0.61, dblp-2010 (5.0) 0.77; 0.90,
#: delaunay_n16 (6.0) 0.83; 0.85, cnr-2000 (9.9) 1.00; 1.06, soc-Slashdot0902 (11.5) 0.89; 0.90,
#: cit-HepTh (12.7) 0.92; 0.82, bcsstk25 (16.3) 1.03; 1.25, stencil3d:40:27 (25.7) 1.28; 1.30.
PREFETCH_BELOW_ROW_NONZEROS = 14.0


#: Chunks each thread's row range is cut into for :func:`multiply`'s work stealing. Two halves of
#: equal work need not take equal time (which half is the slower one changed with the cores the
#: two threads were pinned to). 32 a thread was the best of the counts tried
#: (docs/design-decisions.md, "Threads steal row chunks").
CHUNKS_PER_THREAD = 32


@dataclass(frozen=True, eq=False)
class CsrOperand:
    """A CSR matrix ready for :func:`multiply` on ``len(bounds) - 1`` threads; ``prefetch``: the
    product prefetches B rows (mean nonzeros per row below :data:`PREFETCH_BELOW_ROW_NONZEROS`).

    ``bounds``: thread t's own rows ``[bounds[t], bounds[t+1])`` (what :func:`multiply_rows`
    callers and the per-thread CSC split use); ``chunks``: each of those ranges cut into
    :data:`CHUNKS_PER_THREAD` chunks of about equal work, handed out by the counters in
    ``claimed`` (scratch: one operand must not be multiplied by two threads at once)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]
    bounds: np.ndarray
    prefetch: bool
    chunks: np.ndarray
    claimed: np.ndarray

    @staticmethod
    def from_matrix(matrix: sp.sparray, dtype: np.dtype, threads: int, *, keep_order: bool = False) -> CsrOperand:
        """Not collective. ``keep_order``: each row is summed in the order ``matrix`` stores it (no duplicates
        allowed); otherwise duplicates are summed and rows sorted by column."""
        csr = sp.csr_array(matrix)
        if not keep_order:
            csr.sum_duplicates()
        indptr = csr.indptr.astype(np.int64)
        prefetch = csr.nnz < PREFETCH_BELOW_ROW_NONZEROS * max(1, csr.shape[0])
        # 4-byte column indices where they fit: 4 bytes less to read per nonzero.
        index_type = np.int32 if csr.shape[1] <= np.iinfo(np.int32).max else np.int64
        bounds = balanced_bounds(indptr, threads)
        chunks = np.concatenate(
            [[0]]
            + [
                lo + balanced_bounds(indptr[lo : hi + 1] - indptr[lo], CHUNKS_PER_THREAD)[1:]
                for lo, hi in zip(bounds[:-1], bounds[1:])
            ]
        ).astype(np.int64)
        return CsrOperand(
            # The plan's arrays are shared where their types already fit (a GNN plan's diagonal block
            # in the training dtype): a copy would hold the matrix twice.
            indptr,
            csr.indices.astype(index_type, copy=False),
            csr.data.astype(dtype, copy=False),
            csr.shape,
            bounds,
            bool(prefetch),
            chunks,
            np.zeros(threads * _compiled().COUNTER_STRIDE, np.int64),
        )

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


#: Bytes of C from which a product that overwrites C streams it to memory (non-temporal stores):
#: a C that large does not stay in the cache for the next pass anyway, and streaming saves reading
#: every line of it into the cache before it is written. Below it, C is left in the cache for the
#: passes that add to it, which would otherwise read C from memory (docs/design-decisions.md,
#: "Streamed stores for a large C").
STREAM_AT_LEAST_BYTES = 4 << 20


def streams(out: np.ndarray, accumulate: bool = False) -> bool:
    """Not collective. Whether :func:`multiply` writes ``out`` with non-temporal stores: a product that overwrites
    (not ``accumulate``) a C of :data:`STREAM_AT_LEAST_BYTES` or more. The kernel then streams
    when ``out``'s rows start on cache lines (:func:`sparsewire._lib.aligned.empty_aligned`) and stores as
    usual otherwise."""
    return not accumulate and out.nbytes >= STREAM_AT_LEAST_BYTES


def _require_contiguous_rows(x: np.ndarray, out: np.ndarray) -> None:
    """The register loads and stores assume 2-D blocks with rows of contiguous elements (a
    Fortran-ordered block would otherwise be read wrong)."""
    for name, array in (("x", x), ("out", out)):
        if array.ndim != 2 or (array.size and array.shape[1] > 1 and array.strides[1] != array.itemsize):
            raise InputError(
                f"the kernel's {name} must be 2-D with rows of contiguous elements (got strides {array.strides}); pass "
                f"np.ascontiguousarray({name})"
            )


#: Bytes of a B row up to which the CSR product never prefetches: a row of one cache line or less
#: (k = 16 float32, 8 float64 and below): at these widths a row is one load, and issuing the
#: prefetches costs more than they hide when the product runs warm, as the GNN widths that use
#: these rows do (docs/design-decisions.md, "Prefetch only where it pays").
PREFETCH_ABOVE_ROW_BYTES = 64


def _prefetches(operand: CsrOperand, x: np.ndarray) -> bool:
    return operand.prefetch and x.shape[1] * x.itemsize > PREFETCH_ABOVE_ROW_BYTES


def multiply(operand: CsrOperand, x: np.ndarray, out: np.ndarray, accumulate: bool = False) -> None:
    """Not collective. ``out = A @ x`` or, with ``accumulate``, ``out += A @ x``; x and out row-major, of the
    operand's dtype, rows contiguous. When :func:`streams` says so and ``out`` comes from
    :func:`sparsewire._lib.aligned.empty_aligned`, it is written with non-temporal stores."""
    _require_contiguous_rows(x, out)
    stream = streams(out, accumulate)
    if operand.bounds.size == 2:
        _compiled().csr_dense_range(
            operand.indptr,
            operand.indices,
            operand.data,
            x,
            out,
            0,
            operand.shape[0],
            accumulate,
            _prefetches(operand, x),
            stream,
        )
    else:
        run_threaded(
            _compiled().csr_dense_threads,
            operand.indptr,
            operand.indices,
            operand.data,
            x,
            out,
            operand.chunks,
            operand.claimed,
            accumulate,
            _prefetches(operand, x),
            stream,
        )


def multiply_rows(operand: CsrOperand, x: np.ndarray, out: np.ndarray, start: int, stop: int, accumulate: bool = False) -> None:
    """Not collective. Rows [start, stop) of :func:`multiply`, on the calling thread."""
    _require_contiguous_rows(x, out)
    _compiled().csr_dense_range(
        operand.indptr,
        operand.indices,
        operand.data,
        x,
        out,
        start,
        stop,
        accumulate,
        _prefetches(operand, x),
        streams(out, accumulate),
    )


@dataclass(frozen=True, eq=False)
class GatherOperand:
    """Row indices to gather (``out[r] = x[index[r]]``) on ``len(bounds) - 1`` threads."""

    index: np.ndarray
    bounds: np.ndarray

    @staticmethod
    def from_index(index: np.ndarray, threads: int) -> GatherOperand:
        """Not collective."""
        index = np.asarray(index, np.int64)
        return GatherOperand(index, np.linspace(0, index.size, threads + 1).astype(np.int64))


def gather(operand: GatherOperand, x: np.ndarray, out: np.ndarray) -> None:
    """Not collective. ``out[r] = x[index[r]]`` for every row r of out."""
    if operand.bounds.size == 2:
        _compiled().gather_range(operand.index, x, out, 0, operand.index.size)
    else:
        run_threaded(_compiled().gather_threads, operand.index, x, out, operand.bounds)


def gather_rows(operand: GatherOperand, x: np.ndarray, out: np.ndarray, start: int, stop: int) -> None:
    """Not collective. Rows [start, stop) of :func:`gather`, on the calling thread."""
    _compiled().gather_range(operand.index, x, out, start, stop)


def gather_elements(operand: GatherOperand, x: np.ndarray, out_flat: np.ndarray, start: int, stop: int) -> None:
    """Not collective. Elements [start, stop) of the flattened gathered block (one thread; may cut rows)."""
    _compiled().gather_elements(operand.index, x, out_flat, start, stop)


def multiply_elements(operand: CsrOperand, x: np.ndarray, out_flat: np.ndarray, start: int, stop: int, accumulate: bool) -> None:
    """Not collective. Elements [start, stop) of the flattened ``A @ x`` (one thread; may cut rows)."""
    _compiled().csr_elements(operand.indptr, operand.indices, operand.data, x, out_flat, start, stop, accumulate)


@dataclass(frozen=True, eq=False)
class CscOperand:
    """A matrix in CSC, split by output rows among T threads: thread t's entries of column j are
    ``rows/data[colptrs[t, j] : colptrs[t, j + 1]]``, all in rows ``[row_bounds[t], row_bounds[t+1])``."""

    colptrs: np.ndarray
    rows: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    @staticmethod
    def from_matrix(matrix: sp.sparray, dtype: np.dtype, row_bounds: np.ndarray) -> CscOperand:
        """Not collective."""
        coo = sp.coo_array(matrix)
        threads = row_bounds.size - 1
        n_cols = coo.shape[1]
        owner = np.searchsorted(row_bounds, coo.row, side="right") - 1
        order = np.lexsort((coo.row, coo.col, owner))
        key = owner[order].astype(np.int64) * n_cols + coo.col[order]
        flat = np.searchsorted(key, np.arange(threads * n_cols + 1, dtype=np.int64), side="left")
        # Thread t's column pointers are the flat pointers t * n_cols ... t * n_cols + n_cols.
        positions = np.arange(threads, dtype=np.int64)[:, None] * n_cols + np.arange(n_cols + 1, dtype=np.int64)[None, :]
        colptrs_2d = flat[positions]
        return CscOperand(
            np.ascontiguousarray(colptrs_2d, np.int64),
            coo.row[order].astype(np.int64),
            coo.data[order].astype(dtype),
            coo.shape,
        )


def apply_columns(operand: CscOperand, buffer: np.ndarray, out: np.ndarray, col_start: int, col_stop: int) -> None:
    """Not collective. ``out += A[:, col_start:col_stop] @ buffer[col_start:col_stop]`` (one received message)."""
    _require_contiguous_rows(buffer, out)
    if operand.colptrs.shape[0] == 1:
        _compiled().csc_columns_range(operand.colptrs[0], operand.rows, operand.data, buffer, out, col_start, col_stop)
    else:
        run_threaded(
            _compiled().csc_columns_threads, operand.colptrs, operand.rows, operand.data, buffer, out, col_start, col_stop
        )


def apply_elements(
    operand: CscOperand, thread: int, buffer_flat: np.ndarray, k: int, out: np.ndarray, start: int, stop: int
) -> None:
    """Not collective. Thread ``thread``'s part of ``out += A @ buffer`` for elements [start, stop) of the
    flattened buffer (one partition; whole rows and row fragments)."""
    _compiled().csc_elements(operand.colptrs[thread], operand.rows, operand.data, buffer_flat, k, out, start, stop)


def copy(source: np.ndarray, target: np.ndarray, threads: int) -> None:
    """Not collective. ``target[:] = source[:]`` (1-D) on ``threads`` threads: the machine's copy bandwidth."""
    bounds = np.linspace(0, source.size, threads + 1).astype(np.int64)
    run_threaded(_compiled().copy_threads, source, target, bounds)
