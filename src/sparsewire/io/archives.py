"""NumPy ``.npz`` archives read as untrusted input: opened without pickles, their unpacked size checked
before anything is allocated, and SciPy's sparse arrays validated before SciPy indexes with them."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.sizes import check_archive_fits, check_fits
from sparsewire.errors import InputError

__all__ = ["open_archive", "check_compressed", "read_npz"]


def open_archive(path, what: str) -> np.lib.npyio.NpzFile:
    """Not collective. The NumPy ``.npz`` archive at ``path`` opened without pickles (use it in a
    ``with``), after checking that it is an archive, not one ``.npy`` array (InputError naming
    ``what`` should be there), and that its arrays fit in memory once unpacked
    (:func:`~sparsewire._lib.sizes.check_archive_fits`). Reading a damaged archive may still raise
    OSError, ValueError, EOFError or ``zipfile.BadZipFile``; callers turn those into InputError."""
    archive = np.load(path, allow_pickle=False)
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(f"{path} holds a single array, not an .npz archive; give {what}")
    try:
        check_archive_fits(archive, str(path))
    except InputError:
        archive.close()
        raise
    return archive


def check_compressed(matrix) -> None:
    """Not collective. Raise ValueError unless the CSR/CSC/BSR ``matrix`` (from untrusted arrays)
    is safe to use: SciPy's ``check_format(full_check=True)`` plus the row pointer itself, which
    SciPy skips when it ends at 0 entries: a decreasing one is then read out of bounds by the next
    conversion (a segfault, found by fuzzing)."""
    indptr = np.asarray(matrix.indptr)
    if indptr.size == 0 or indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] > matrix.indices.size:
        raise ValueError("the index pointer must start at 0, never decrease and end within the stored entries")
    matrix.check_format(full_check=True)


def read_npz(path: str) -> sp.csr_array:
    """Not collective. Read a matrix saved with ``scipy.sparse.save_npz``, as untrusted input: a truncated or
    damaged file, indices out of range (SciPy would read outside its arrays), a broken row
    pointer and complex values are each an InputError, checked before the matrix is converted."""
    try:
        with open_archive(path, "a SciPy sparse .npz file"):
            pass
        matrix = sp.load_npz(path)
    except InputError:
        raise
    except Exception as error:  # noqa: BLE001 - zipfile, zlib, NumPy and SciPy each raise their own
        raise InputError(
            f"{path}: not a readable SciPy sparse .npz file ({type(error).__name__}: {error}); save it with scipy.sparse.save_npz"
        ) from None
    if matrix.ndim != 2:
        raise InputError(f"{path}: holds a {matrix.ndim}-dimensional array; a 2-D sparse matrix is needed")
    check_fits(int(matrix.shape[0]), int(matrix.shape[1]), int(matrix.nnz), path)  # before any conversion sizes by the shape
    if np.iscomplexobj(matrix.data):
        raise InputError(f"{path}: holds complex values; sparsewire multiplies real matrices (save the real part, or split it)")
    try:
        if matrix.format in ("csr", "csc", "bsr"):
            check_compressed(matrix)
        elif matrix.format == "coo":
            rows, cols = matrix.coords
            if rows.size and (rows.min() < 0 or cols.min() < 0 or rows.max() >= matrix.shape[0] or cols.max() >= matrix.shape[1]):
                raise ValueError(f"an index lies outside the {matrix.shape[0]} x {matrix.shape[1]} shape")
    except ValueError as error:
        raise InputError(
            f"{path}: corrupt {matrix.format.upper()} arrays ({error}); save the matrix again with scipy.sparse.save_npz"
        ) from None
    matrix = sp.csr_array(matrix, dtype=np.float64)
    matrix.sum_duplicates()
    return matrix
