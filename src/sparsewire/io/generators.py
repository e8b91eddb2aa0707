"""Synthetic sparse matrix families, deterministic for a seed.

Specs (as accepted by :func:`from_spec` and anywhere the CLI takes a matrix):

=====================================  ==========================================================
``rmat:SCALE:EDGE_FACTOR[:SEED]``      R-MAT / Graph500 Kronecker graph, 2^SCALE vertices,
                                       EDGE_FACTOR * 2^SCALE directed edges drawn with
                                       a, b, c = 0.57, 0.19, 0.19; vertex labels randomly
                                       permuted as Graph500 does; repeated edges count once.
``delaunay:N[:SEED]``                  adjacency of the Delaunay triangulation of N uniform random
                                       points in the unit square (as SuiteSparse's delaunay_n*).
``stencil2d:NX[:NY]``                  5-point Laplacian on an NX x NY grid (4 on the diagonal).
``stencil3d:N[:7|27]``                 7-point (6 on the diagonal) or 27-point (26 on the diagonal)
                                       Laplacian on an N x N x N grid.
``uniform:ROWS[xCOLS]:PER_ROW[:SEED]``  PER_ROW uniformly random columns per row (repeats count once).
=====================================  ==========================================================

Graph generators give value 1 on every edge; stencils give integer Laplacian values, so products
with integer data are exact.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.aligned import empty_aligned
from sparsewire._lib.cores import map_on_threads, node_cores
from sparsewire._lib.distinct import pattern_of_keys, sort_in_place
from sparsewire._lib.sizes import check_fits
from sparsewire.errors import InputError

__all__ = [
    "rmat",
    "delaunay",
    "stencil2d",
    "stencil3d",
    "uniform",
    "from_spec",
    "deterministic_dense",
    "deterministic_dense_rows",
    "GENERATORS",
]

GRAPH500_ABC = (0.57, 0.19, 0.19)


def _pattern(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    """The canonical CSR pattern (sorted columns, each (i, j) once, value 1) of the edges (rows[e], cols[e])."""
    return pattern_of_keys(rows.astype(np.int64) * shape[1] + cols, shape, in_place=True)


#: R-MAT edges drawn per chunk (all of a chunk's draws for one bit before the next bit's: this order fixes
#: the matrix) and, in the compiled path, edges taken through all the bits at once.
RMAT_CHUNK, RMAT_BLOCK = 1 << 22, 1 << 15

#: R-MAT graphs with this many edges or more take the compiled steps (below it, importing Numba, 0.4 s,
#: costs more than the steps save).
COMPILED_FROM_EDGES = 1 << 20


def _add_quadrant_bits(draw, rows, cols, bit: int, a: float, ab: float, abc: float) -> None:
    """:func:`sparsewire.io.rmat_bits.add_quadrant_bits` in NumPy (the same bits; for small graphs)."""
    rows[draw >= ab] |= 1 << bit
    cols[((draw >= a) & (draw < ab)) | (draw >= abc)] |= 1 << bit


def rmat(scale: int, edge_factor: int, seed: int = 1, abc: tuple[float, float, float] = GRAPH500_ABC) -> sp.csr_array:
    """Not collective. R-MAT graph (Chakrabarti et al. 2004; Graph500 parameters by default).

    Each of ``edge_factor * 2**scale`` edges picks, bit by bit from the top, one of the four
    quadrants with probabilities a, b, c, d = 1 - a - b - c. Vertex labels are then permuted
    at random (Graph500 does the same) so that high-degree vertices are not all in the first rows.
    """
    if not 1 <= scale <= 31:
        raise InputError(f"rmat scale must be in 1..31 (got {scale})")
    if edge_factor < 1:
        raise InputError(f"rmat edge factor must be at least 1 (got {edge_factor})")
    a, b, c = abc
    n, n_edges = 1 << scale, edge_factor << scale
    rng = np.random.default_rng(seed)
    index = np.int32 if scale < 31 else np.int64
    rows = np.zeros(n_edges, dtype=index)
    cols = np.zeros(n_edges, dtype=index)
    if n_edges < COMPILED_FROM_EDGES:
        chunk = RMAT_CHUNK
        draw = np.empty(min(chunk, n_edges))
        for start in range(0, n_edges, chunk):
            stop = min(start + chunk, n_edges)
            for bit in range(scale - 1, -1, -1):
                rng.random(out=draw[: stop - start])
                _add_quadrant_bits(draw[: stop - start], rows[start:stop], cols[start:stop], bit, a, a + b, a + b + c)
        permutation = rng.permutation(n).astype(index)
        keys = permutation[rows].astype(np.int64) * n
        del rows
        keys += permutation[cols]
        del cols, permutation
        return pattern_of_keys(keys, (n, n), in_place=True)
    from sparsewire.io import rmat_bits  # Numba, loaded for large graphs only

    _compiled_quadrants(rng, rows, cols, scale, (a, a + b, a + b + c))
    permutation = rng.permutation(n).astype(index)
    keys = rmat_bits.permuted_keys(rows, cols, permutation, n, node_cores())
    del rows, cols, permutation
    sort_in_place(keys)
    indptr, indices = rmat_bits.pattern_of_sorted_keys(keys, n, n)
    del keys
    return sp.csr_array((np.ones(indices.size), indices, indptr), shape=(n, n))


def _compiled_quadrants(rng: np.random.Generator, rows: np.ndarray, cols: np.ndarray, scale: int, thresholds) -> None:
    """The quadrant bits of every edge from the same draws, in the same stream positions, as the NumPy path:
    chunks of :data:`RMAT_CHUNK` edges, and within a chunk all of one bit's draws before the next bit's.
    Each bit of a chunk gets its own copy of the generator advanced to that bit's first draw, so the edges
    are taken in blocks of :data:`RMAT_BLOCK` through all the bits while the block's draws and bits stay in
    the cache (a bit's pass over a whole chunk moved 64 MB through memory each time), and the chunks, which
    share nothing, go to this node's cores in threads (NumPy's draws and the compiled step release the
    GIL). ``rng`` ends past every draw."""
    from sparsewire.io.rmat_bits import add_quadrant_bits

    n_edges = rows.size
    chunk, block = RMAT_CHUNK, RMAT_BLOCK
    origin = rng.bit_generator.state

    def chunk_bits(start: int) -> None:
        stop = min(start + chunk, n_edges)
        size = stop - start
        bit_streams = []
        for position in range(scale):  # the bit drawn position-th, from the top bit down
            stream = np.random.PCG64()
            stream.state = origin
            stream.advance(start * scale + position * size)  # earlier chunks drew scale numbers an edge
            bit_streams.append(np.random.Generator(stream))
        draw = np.empty(min(block, size))
        for first in range(start, stop, block):
            last = min(first + block, stop)
            for position, stream in enumerate(bit_streams):
                stream.random(out=draw[: last - first])
                add_quadrant_bits(draw[: last - first], rows[first:last], cols[first:last], scale - 1 - position, *thresholds)

    map_on_threads(chunk_bits, range(0, n_edges, chunk), node_cores())
    rng.bit_generator.advance(scale * n_edges)


def delaunay(n: int, seed: int = 1) -> sp.csr_array:
    """Not collective. Symmetric adjacency (no diagonal) of the Delaunay triangulation of n random points."""
    if n < 3:
        raise InputError(f"delaunay needs at least 3 points (got {n})")
    points = np.random.default_rng(seed).random((n, 2))
    from scipy.spatial import Delaunay  # loaded for this generator only (7 MiB)

    triangles = Delaunay(points).simplices.astype(np.int64)
    first = np.concatenate([triangles[:, 0], triangles[:, 1], triangles[:, 0]])
    second = np.concatenate([triangles[:, 1], triangles[:, 2], triangles[:, 2]])
    return _pattern(np.concatenate([first, second]), np.concatenate([second, first]), (n, n))


def _path_laplacian(n: int) -> sp.csr_array:
    return sp.csr_array(sp.diags_array([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], offsets=[-1, 0, 1]))


def stencil2d(nx: int, ny: int | None = None) -> sp.csr_array:
    """Not collective. 5-point Laplacian on an nx x ny grid: 4 on the diagonal, -1 to each grid neighbour."""
    ny = nx if ny is None else ny
    if nx < 1 or ny < 1:
        raise InputError(f"stencil2d grid sizes must be positive (got {nx} x {ny})")
    matrix = sp.kron(sp.eye_array(ny), _path_laplacian(nx)) + sp.kron(_path_laplacian(ny), sp.eye_array(nx))
    return _canonical(matrix)


def stencil3d(n: int, points: int = 7) -> sp.csr_array:
    """Not collective. 7-point (diagonal 6) or 27-point (diagonal 26) Laplacian on an n x n x n grid."""
    if n < 1:
        raise InputError(f"stencil3d grid size must be positive (got {n})")
    identity = sp.eye_array(n)
    if points == 7:
        laplacian = _path_laplacian(n)
        matrix = (
            sp.kron(sp.kron(identity, identity), laplacian)
            + sp.kron(sp.kron(identity, laplacian), identity)
            + sp.kron(sp.kron(laplacian, identity), identity)
        )
    elif points == 27:
        band = sp.diags_array([np.ones(n - 1), np.ones(n), np.ones(n - 1)], offsets=[-1, 0, 1])
        neighbourhood = sp.kron(sp.kron(band, band), band)
        matrix = 27 * sp.eye_array(n**3) - neighbourhood
    else:
        raise InputError(f"stencil3d supports 7 or 27 points (got {points})")
    return _canonical(matrix)


def uniform(n_rows: int, n_cols: int, per_row: int, seed: int = 1) -> sp.csr_array:
    """Not collective. Each row gets ``per_row`` uniformly random columns (repeats count once), value 1."""
    if n_rows < 1 or n_cols < 1 or per_row < 0:
        raise InputError(f"uniform needs positive sizes and a non-negative count per row (got {n_rows}x{n_cols}, {per_row})")
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), per_row)
    cols = rng.integers(0, n_cols, size=rows.size, dtype=np.int64)
    return _pattern(rows, cols, (n_rows, n_cols))


def _canonical(matrix) -> sp.csr_array:
    matrix = sp.csr_array(matrix, dtype=np.float64)
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    return matrix


def _ints(spec: str, fields: list[str], minimum: int, maximum: int, usage: str) -> list[int]:
    if not minimum <= len(fields) <= maximum:
        raise InputError(f"generator spec {spec!r} has {len(fields)} fields; expected {usage}")
    try:
        values = [int(f) for f in fields]
    except ValueError:
        raise InputError(f"generator spec {spec!r}: every field must be an integer; expected {usage}") from None
    if any(abs(value) >= 2**62 for value in values):  # beyond int64 arithmetic (a column count is not sized by the memory check)
        raise InputError(f"generator spec {spec!r}: a field of 2^62 or more is out of range; expected {usage}")
    return values


def _seed(spec: str, values: list[int], position: int) -> int:
    seed = values[position] if len(values) > position else 1
    if seed < 0:
        raise InputError(f"generator spec {spec!r}: the seed must be a non-negative integer (got {seed})")
    return seed


def _from_rmat(spec: str, fields: list[str]) -> sp.csr_array:
    values = _ints(spec, fields, 2, 3, "rmat:SCALE:EDGE_FACTOR[:SEED]")
    if 1 <= values[0] <= 31 and values[1] >= 1:
        check_fits(2 ** values[0], 2 ** values[0], values[1] * 2 ** values[0], spec)
    return rmat(values[0], values[1], _seed(spec, values, 2))


def _from_delaunay(spec: str, fields: list[str]) -> sp.csr_array:
    values = _ints(spec, fields, 1, 2, "delaunay:N[:SEED]")
    check_fits(values[0], values[0], 7 * values[0], spec)
    return delaunay(values[0], _seed(spec, values, 1))


def _from_stencil2d(spec: str, fields: list[str]) -> sp.csr_array:
    values = _ints(spec, fields, 1, 2, "stencil2d:NX[:NY]")
    cells = values[0] * (values[-1] if len(values) > 1 else values[0])
    check_fits(cells, cells, 5 * cells, spec)
    return stencil2d(*values)


def _from_stencil3d(spec: str, fields: list[str]) -> sp.csr_array:
    values = _ints(spec, fields, 1, 2, "stencil3d:N[:7|27]")
    cells = max(values[0], 0) ** 3
    check_fits(cells, cells, (values[1] if len(values) > 1 else 7) * cells, spec)
    return stencil3d(*values)


def _from_uniform(spec: str, fields: list[str]) -> sp.csr_array:
    usage = "uniform:ROWS[xCOLS]:PER_ROW[:SEED]"
    if not 2 <= len(fields) <= 3:
        raise InputError(f"generator spec {spec!r} has {len(fields)} fields; expected {usage}")
    shape = fields[0].lower().split("x")
    values = _ints(spec, shape + fields[1:], len(shape) + len(fields) - 1, 4, usage)
    n_rows = values[0]
    n_cols = values[1] if len(shape) == 2 else n_rows
    rest = values[len(shape) :]
    check_fits(n_rows, n_cols, n_rows * max(rest[0], 0), spec)
    return uniform(n_rows, n_cols, rest[0], _seed(spec, rest, 1))


GENERATORS = {
    "rmat": _from_rmat,
    "delaunay": _from_delaunay,
    "stencil2d": _from_stencil2d,
    "stencil3d": _from_stencil3d,
    "uniform": _from_uniform,
}


def from_spec(spec: str) -> sp.csr_array:
    """Not collective. Build a matrix from a generator spec such as ``rmat:16:8:1`` (see the module docstring)."""
    name, _, rest = spec.partition(":")
    builder = GENERATORS.get(name.lower())
    if builder is None:
        raise InputError(f"unknown generator {name!r}; known: {', '.join(sorted(GENERATORS))}")
    return builder(spec, rest.split(":") if rest else [])


def deterministic_dense(row_start: int, row_stop: int, k: int, dtype=np.float64) -> np.ndarray:
    """Not collective. Rows ``row_start:row_stop`` of the reference dense operand B (global indices), so results
    can be compared across ranks and libraries without shipping B.

    B[i, j] is a hash of (i, j) with all arithmetic mod 2^32, so no two rows repeat and a
    misrouted row changes C: ``x = i*2654435761 + j*40503 + 1; x = ((x >> 16) ^ x) * 0x45d9f3b;
    x = ((x >> 16) ^ x) * 0x45d9f3b; x = (x >> 16) ^ x; B[i, j] = x / 2^32 - 0.5``.
    """
    return deterministic_dense_rows(np.arange(row_start, row_stop), k, dtype)


def deterministic_dense_rows(rows: np.ndarray, k: int, dtype=np.float64) -> np.ndarray:
    """Not collective. The rows ``rows`` (any global indices, in that order) of the B of
    :func:`deterministic_dense`: a rank whose B rows are a partitioner's permutation asks for them."""
    mask = np.uint64(0xFFFFFFFF)
    shift = np.uint64(16)
    multiplier = np.uint64(0x45D9F3B)
    rows = np.asarray(rows, dtype=np.uint64)[:, None]
    cols = np.arange(k, dtype=np.uint64)[None, :]
    x = (rows * np.uint64(2654435761) + cols * np.uint64(40503) + np.uint64(1)) & mask
    x = (((x >> shift) ^ x) * multiplier) & mask
    x = (((x >> shift) ^ x) * multiplier) & mask
    x = (x >> shift) ^ x
    block = empty_aligned(x.shape, dtype)  # rows on cache lines: the kernel's fastest B
    np.copyto(block, x / 2.0**32 - 0.5, casting="same_kind")
    return block
