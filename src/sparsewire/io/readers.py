"""Reading sparse matrices: Matrix Market, SNAP edge lists, METIS graphs, SciPy ``.npz`` and generator specs.

Every loader returns a ``scipy.sparse.csr_array`` of float64 values with duplicates summed and
column indices sorted. Pattern files read as value 1. Anything malformed raises
:class:`~sparsewire.errors.InputError` with the file, the line and the fix.

A *matrix spec* is what the command line accepts wherever a matrix is expected: a path
(``.mtx``, ``.mtx.gz``, ``.txt``, ``.txt.gz``, ``.graph``, ``.graph.gz``, ``.npz``) or a
generator spec such as ``rmat:16:8:1`` (see :mod:`sparsewire.io.generators`).
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib

import numpy as np
import scipy.sparse as sp

from sparsewire._lib.sizes import check_fits
from sparsewire.errors import InputError
from sparsewire.io import generators
from sparsewire.io.archives import read_npz
from sparsewire.io.shipped import SHIPPED, shipped_path
from sparsewire.io.text_lines import check_field_counts, check_number_syntax

__all__ = [
    "load_matrix",
    "is_edge_list",
    "read_matrix_market",
    "read_edge_list",
    "read_metis_graph",
    "read_npz",
    "nonfinite_entries",
]

_MM_FIELDS = {"real": 3, "integer": 3, "pattern": 2}
_MM_SYMMETRIES = {"general", "symmetric", "skew-symmetric"}
_MM_HEADER_HELP = "expected '%%MatrixMarket matrix coordinate <real|integer|pattern> <general|symmetric|skew-symmetric>'"


def load_matrix(spec: str, *, symmetrize: bool = False) -> sp.csr_array:
    """Not collective. Load a matrix from a path or build it from a generator spec.

    Args:
        spec: a file path (``.mtx``, ``.mtx.gz``, ``.txt``, ``.txt.gz``, ``.graph``, ``.graph.gz``,
            ``.npz``), the name of a matrix that ships with the package (``bcsstk25``,
            ``delaunay_n16``; :mod:`~sparsewire.io.shipped`), or a generator
            spec (``rmat:SCALE:EDGE_FACTOR[:SEED]``, ``delaunay:N[:SEED]``, ``stencil2d:NX[:NY]``,
            ``stencil3d:N[:7|27]``, ``uniform:ROWS[xCOLS]:PER_ROW[:SEED]``).
        symmetrize: for edge lists only (refused for other specs), return the pattern union ``max(A, A^T)``.

    Returns:
        The matrix as CSR with float64 values.

    Raises:
        InputError: missing file, unknown format or generator, malformed content.
    """
    if not isinstance(spec, str) or not spec:
        raise InputError("empty matrix argument; give a file path or a generator spec such as rmat:16:8:1")
    if symmetrize and not is_edge_list(spec):
        # Ignoring it would leave a user who asked for an undirected graph with a directed one.
        raise InputError(
            f"{spec}: --symmetrize (symmetrize=True) applies to edge lists (.txt, .el, .tsv, .edges) only; give an edge list or "
            "drop the option"
        )
    if os.path.exists(spec):
        return _load_file(spec, symmetrize=symmetrize)
    shipped = shipped_path(spec)
    if shipped is not None and _file_kind(str(shipped)) != "npz":
        return _load_file(str(shipped), symmetrize=symmetrize)
    head = spec.split(":", 1)[0].lower()
    if ":" in spec and head in generators.GENERATORS:
        return generators.from_spec(spec)
    if _file_kind(spec) is not None or os.sep in spec:
        raise InputError(f"{spec}: no such file; check the path, or use a generator spec such as rmat:16:8:1")
    known = ", ".join(sorted(generators.GENERATORS))
    names = ", ".join(name for name, file in SHIPPED.items() if not file.endswith(".npz"))
    raise InputError(
        f"{spec!r} is neither an existing file, a shipped matrix ({names}) nor a generator spec; "
        f"give a .mtx/.mtx.gz/.txt/.txt.gz/.graph/.graph.gz/.npz path or one of the generators ({known}), e.g. rmat:16:8:1"
    )


def is_edge_list(spec: str) -> bool:
    """Not collective. Whether ``spec`` names an edge list (by its extension), the one format ``symmetrize`` applies to."""
    return _file_kind(spec) == "edges"


def _file_kind(path: str) -> str | None:
    lower = path.lower()
    if lower.endswith((".mtx", ".mtx.gz", ".mm", ".mm.gz")):
        return "mtx"
    if lower.endswith((".txt", ".txt.gz", ".el", ".el.gz", ".tsv", ".tsv.gz", ".edges", ".edges.gz")):
        return "edges"
    if lower.endswith((".graph", ".graph.gz")):
        return "metis"
    if lower.endswith(".npz"):
        return "npz"
    return None


def _load_file(path: str, *, symmetrize: bool) -> sp.csr_array:
    kind = _file_kind(path)
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; give a matrix file inside it")
    if kind == "mtx":
        return read_matrix_market(path)
    if kind == "edges":
        return read_edge_list(path, symmetrize=symmetrize)
    if kind == "metis":
        return read_metis_graph(path)
    if kind == "npz":
        return read_npz(path)
    raise InputError(
        f"{path}: unknown file type; use .mtx or .mtx.gz (Matrix Market), .txt or .txt.gz (SNAP edge list), "
        ".graph or .graph.gz (METIS) or .npz (SciPy)"
    )


_NEWLINE = b"\n"
_COMMENT_LINE = re.compile(rb"(?m)^[ \t]*%")  # a line whose first field starts with %


def _read_bytes(path: str) -> bytes:
    """The file's bytes (decompressed for .gz), without a UTF-8 byte-order mark (editors on Windows add one; it
    carries no data)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise InputError(f"{path}: cannot read ({error.strerror}); check the path and its permissions") from None
    if path.lower().endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            raise InputError(f"{path}: not a valid gzip file; decompress it by hand to check, or drop the .gz suffix") from None
    return raw.removeprefix(b"\xef\xbb\xbf")


def read_matrix_market(path: str) -> sp.csr_array:
    """Not collective. Read a Matrix Market coordinate file (optionally gzipped) strictly.

    Supported: fields ``real``, ``integer``, ``pattern``; symmetries ``general``, ``symmetric``,
    ``skew-symmetric`` (expanded to the full matrix). Every data line must hold exactly two
    indices (pattern) or two indices and a value; the number of entries must equal the size line.
    """
    data = _read_bytes(path)
    lines = data.split(b"\n", 1)
    header = lines[0].decode("ascii", "replace").strip()
    tokens = header.split()
    if len(tokens) != 5 or tokens[0] != "%%MatrixMarket" or tokens[1].lower() != "matrix":
        raise InputError(f"{path}: line 1: malformed Matrix Market header {header[:80]!r}; {_MM_HEADER_HELP}")
    layout, field, symmetry = (t.lower() for t in tokens[2:])
    if layout != "coordinate":
        raise InputError(
            f"{path}: line 1: '{layout}' (dense) Matrix Market files are not supported; store the matrix in coordinate format"
        )
    if field not in _MM_FIELDS:
        raise InputError(f"{path}: line 1: field '{field}' is not supported; {_MM_HEADER_HELP}")
    if symmetry not in _MM_SYMMETRIES:
        raise InputError(f"{path}: line 1: symmetry '{symmetry}' is not supported; {_MM_HEADER_HELP}")

    # Skip comments and blank lines up to the size line, remembering line numbers for errors.
    position, line_number = len(lines[0]) + 1, 2
    while True:
        if position >= len(data):
            raise InputError(f"{path}: no size line after the header; add a line 'ROWS COLUMNS ENTRIES'")
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end
        text = data[position:end].strip()
        if text and not text.startswith(b"%"):
            break
        position, line_number = end + 1, line_number + 1
    size_tokens = text.split()
    try:
        n_rows, n_cols, n_entries = (int(t) for t in size_tokens)
        if min(n_rows, n_cols, n_entries) < 0:
            raise ValueError
    except ValueError:
        raise InputError(
            f"{path}: line {line_number}: malformed size line {text[:80].decode('ascii', 'replace')!r}; "
            "expected three non-negative integers 'ROWS COLUMNS ENTRIES'"
        ) from None
    if symmetry != "general" and n_rows != n_cols:
        raise InputError(
            f"{path}: line {line_number}: a {symmetry} matrix must be square, but the size line says {n_rows} x {n_cols}; fix "
            "the size line or the header"
        )
    check_fits(n_rows, n_cols, n_entries * (1 if symmetry == "general" else 2), path)
    comment = _COMMENT_LINE.search(data, end + 1)
    if comment:  # (its words would count as an entry's fields)
        where = line_number + 1 + data.count(_NEWLINE, end + 1, comment.start())
        raise InputError(
            f"{path}: line {where}: a comment among the entries; "
            "Matrix Market allows comments only between the header and the size line: delete it or move it up"
        )
    check_field_counts(path, data[end + 1 :], line_number + 1, _MM_FIELDS[field], n_entries, field)
    check_number_syntax(path, data[end + 1 :], line_number + 1)

    # SciPy's fast_matrix_market parses the numbers; an 'integer' file is parsed as real so that
    # a non-integer value is caught instead of silently truncated, and a symmetric one as general,
    # so that the stored triangle is checked before it is mirrored here.
    first = (f"%%MatrixMarket matrix coordinate {'real' if field == 'integer' else field} general").encode()
    to_parse = first + data[len(lines[0]) :]
    import scipy.io  # loaded when a Matrix Market file is read

    try:
        coo = scipy.io.mmread(io.BytesIO(to_parse))
    except (ValueError, OverflowError) as error:
        message = str(error).rstrip(".").replace("Line ", "line ", 1)
        if "out of bounds" in message:
            raise InputError(
                f"{path}: {message.lower()} (indices are 1-based and the size line says {n_rows} x {n_cols}); "
                "fix that entry or the size line"
            ) from None
        raise InputError(f"{path}: {message}; fix that entry") from None
    if symmetry != "general":
        coo = _mirror(path, sp.coo_array(coo), symmetry)
    matrix = sp.csr_array(coo, dtype=np.float64)
    if field == "integer" and matrix.nnz and not np.all(np.mod(matrix.data[np.isfinite(matrix.data)], 1) == 0):
        raise InputError(f"{path}: the header says 'integer' but some values are not integers; change the header to 'real'")
    matrix.sum_duplicates()
    return matrix


def _mirror(path: str, coo: sp.coo_array, symmetry: str) -> sp.coo_array:
    """The full matrix of a symmetric (``A + A^T`` off the diagonal) or skew-symmetric
    (``A - A^T``) file, whose entries must all lie on or below the diagonal (strictly below for
    skew-symmetric), as the Matrix Market format stores them."""
    above = coo.row < coo.col
    if symmetry == "skew-symmetric":
        above |= coo.row == coo.col
    if above.any():
        first = int(np.flatnonzero(above)[0])
        where = "on or above" if symmetry == "skew-symmetric" else "above"
        raise InputError(
            f"{path}: entry ({coo.row[first] + 1}, {coo.col[first] + 1}) lies {where} the diagonal, but a {symmetry} file stores "
            f"only the lower triangle{' without the diagonal' if symmetry == 'skew-symmetric' else ''} (its mirror image is "
            "implied); "
            "remove the upper entries or change the header to 'general'"
        )
    off = coo.row != coo.col
    sign = -1.0 if symmetry == "skew-symmetric" else 1.0
    return sp.coo_array(
        (
            np.concatenate([coo.data, sign * coo.data[off]]),
            (np.concatenate([coo.row, coo.col[off]]), np.concatenate([coo.col, coo.row[off]])),
        ),
        shape=coo.shape,
    )


def read_edge_list(path: str, *, symmetrize: bool = False) -> sp.csr_array:
    """Not collective. Read a SNAP-style edge list: ``SOURCE TARGET [WEIGHT]`` per line, ``#`` comments, 0-based ids.

    The matrix is n x n with n = largest id + 1. Without a weight column every edge has value 1
    and repeated edges count once; with one, repeated edges are summed. ``symmetrize`` returns
    ``max(A, A^T)`` (the undirected graph).
    """
    text = _read_bytes(path)
    try:
        table = np.loadtxt(io.BytesIO(text), comments="#", dtype=np.float64, ndmin=2)
    except ValueError as error:
        raise InputError(
            f"{path}: malformed edge list ({error}); every line must be 'SOURCE TARGET' or 'SOURCE TARGET WEIGHT', comments "
            "start with '#'"
        ) from None
    if table.size == 0:
        raise InputError(f"{path}: the edge list has no edges; check the file")
    if table.shape[1] not in (2, 3):
        raise InputError(f"{path}: edge lines have {table.shape[1]} fields, expected 2 (SOURCE TARGET) or 3 (with WEIGHT)")
    ids = table[:, :2]
    if not np.all(np.isfinite(ids)) or np.any(ids < 0) or np.any(np.mod(ids, 1) != 0):
        row = int(np.flatnonzero(~np.all(np.isfinite(ids) & (ids >= 0) & (np.mod(ids, 1) == 0), axis=1))[0])
        raise InputError(f"{path}: edge {row + 1} has a vertex id that is not a non-negative integer; fix that line")
    if np.any(ids >= 2**53):  # beyond exact integers in float64 (and int64 at 2^63): no machine holds such a graph
        row = int(np.flatnonzero(np.any(ids >= 2**53, axis=1))[0])
        raise InputError(f"{path}: edge {row + 1} has a vertex id of 2^53 or more; renumber the vertices from 0")
    sources, targets = ids[:, 0].astype(np.int64), ids[:, 1].astype(np.int64)
    n = int(max(sources.max(), targets.max())) + 1
    check_fits(n, n, len(sources), f"{path} (n = largest vertex id + 1)")
    weighted = table.shape[1] == 3
    values = table[:, 2] if weighted else np.ones(len(sources))
    matrix = sp.coo_array((values, (sources, targets)), shape=(n, n)).tocsr()
    matrix.sum_duplicates()
    if not weighted:
        matrix.data[:] = 1.0
    if symmetrize:
        matrix = sp.csr_array(matrix.maximum(matrix.T))
        matrix.sum_duplicates()
    return matrix


def read_metis_graph(path: str) -> sp.csr_array:
    """Not collective. Read a METIS graph file (the input format of METIS, ParMETIS and their test graphs),
    optionally gzipped, as its symmetric adjacency matrix.

    Format (METIS 5 manual, sec. 4.1.1): ``%`` comment lines; a header ``n m [fmt [ncon]]`` with
    n vertices and m undirected edges; then one line per vertex i, in order (an isolated vertex has
    an empty line): ``[size] [w_1 ... w_ncon] v_1 [e_1] v_2 [e_2] ...`` with 1-based neighbours
    v and, where ``fmt``'s digits say so, a vertex size (first digit), ``ncon`` vertex weights
    (second digit; ``ncon`` defaults to 1) and edge weights e (third digit). Vertex sizes and
    weights are read and dropped (they steer partitioning, not the product). A_ij is the edge
    weight, or 1 without weights. Checked: n vertex lines, every neighbour in 1..n, 2m adjacency
    entries, no neighbour twice on one line, each edge listed from both ends with one weight.
    """
    pieces = _read_bytes(path).split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()  # the newline that ends the last line does not start another
    lines = [(number, line) for number, line in enumerate(pieces, 1) if not line.lstrip().startswith(b"%")]
    while lines and not lines[0][1].strip():
        lines.pop(0)  # blank lines before the header (after it, a blank line is an isolated vertex)
    if not lines:
        raise InputError(f"{path}: empty METIS graph; the first line must be 'n m [fmt [ncon]]'")
    header_number, header_line = lines[0]
    header = header_line.decode("ascii", "replace").split()
    if not 2 <= len(header) <= 4 or not all(token.isdigit() for token in header):
        raise InputError(
            f"{path}: line {header_number}: malformed METIS header {header_line[:80]!r}; expected 'n m [fmt [ncon]]' "
            "(non-negative integers)"
        )
    n, m = int(header[0]), int(header[1])
    fmt = header[2].rjust(3, "0") if len(header) > 2 else "000"
    if len(fmt) != 3 or set(fmt) - {"0", "1"}:
        raise InputError(
            f"{path}: line {header_number}: fmt {header[2]!r} is not a METIS format; use up to three 0/1 digits (vertex sizes, "
            "vertex weights, edge weights)"
        )
    ncon = int(header[3]) if len(header) > 3 else 1
    if (fmt[1] == "0" and len(header) > 3) or ncon < 1:
        raise InputError(
            f"{path}: line {header_number}: ncon = {header[3]} needs vertex weights (fmt's middle digit 1) and must be at least 1"
        )
    vertex_lines = lines[1 : n + 1]
    extra = [number for number, line in lines[n + 1 :] if line.strip()]
    if len(vertex_lines) < n or extra:
        found = len(vertex_lines) + len(extra)
        raise InputError(
            f"{path}: the header promises {n} vertex lines but the file has {found} (after the header, every vertex has exactly "
            "one line, empty when it has no neighbours); fix the header or the file"
        )
    head = int(fmt[0]) + (ncon if fmt[1] == "1" else 0)  # tokens before the adjacency
    step = 2 if fmt[2] == "1" else 1  # tokens per neighbour
    counts = np.array([len(line.split()) for _, line in vertex_lines], dtype=np.int64)
    bad = np.flatnonzero((counts < head) | ((counts - head) % step != 0))
    if bad.size:
        number = vertex_lines[int(bad[0])][0]
        raise InputError(
            f"{path}: line {number} (vertex {int(bad[0]) + 1}) has {int(counts[bad[0]])} numbers, which does not fit fmt {fmt} "
            f"({head} before the neighbours, {step} per neighbour); fix that line or the header"
        )
    try:
        tokens = np.array(b" ".join(line for _, line in vertex_lines).split(), dtype=np.int64)
    except (ValueError, OverflowError):
        first = next(number for number, line in vertex_lines if not all(token.isdigit() for token in line.split()))
        raise InputError(f"{path}: line {first}: a METIS graph holds non-negative integers only; fix that line") from None
    negative = np.flatnonzero(tokens < 0)  # int() took "-3": METIS sizes, weights and ids are never negative
    if negative.size:
        vertex = int(np.searchsorted(np.cumsum(counts), negative[0], side="right"))
        raise InputError(
            f"{path}: line {vertex_lines[vertex][0]}: {int(tokens[negative[0]])} is negative; a METIS graph holds non-negative "
            "integers only; fix that line"
        )
    # Position of every token within its line; the adjacency starts after `head` tokens.
    line_of = np.repeat(np.arange(n, dtype=np.int64), counts)
    position = np.arange(tokens.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    adjacency = position >= head
    neighbour_mask = adjacency & ((position - head) % step == 0)
    rows, columns = line_of[neighbour_mask], tokens[neighbour_mask] - 1
    values = tokens[adjacency & ((position - head) % step == 1)].astype(np.float64) if step == 2 else np.ones(rows.size)
    outside = np.flatnonzero((columns < 0) | (columns >= n))
    if outside.size:
        vertex = int(rows[outside[0]])
        raise InputError(
            f"{path}: line {vertex_lines[vertex][0]} (vertex {vertex + 1}): neighbour {int(columns[outside[0]]) + 1} is outside "
            f"1..{n}; fix that line"
        )
    if rows.size != 2 * m:
        raise InputError(
            f"{path}: the header promises {m} edges ({2 * m} adjacency entries, each edge from both ends) but the file lists "
            f"{rows.size}; fix the header's m or the file"
        )
    matrix = sp.coo_array((values, (rows, columns)), shape=(n, n)).tocsr()
    if matrix.nnz != rows.size:
        raise InputError(
            f"{path}: an edge is listed twice from the same vertex; a METIS graph lists each neighbour once per vertex"
        )
    mismatch = matrix != matrix.T
    if mismatch.nnz:
        first = sp.coo_array(mismatch)
        i, j = int(first.row[0]), int(first.col[0])
        raise InputError(
            f"{path}: edge {i + 1}-{j + 1} is not listed from both ends with one weight; a METIS graph is undirected, so vertex "
            f"{j + 1}'s line must list {i + 1} too"
        )
    matrix.sort_indices()
    return matrix


def nonfinite_entries(matrix: sp.csr_array) -> int:
    """Not collective. Number of stored entries that are NaN or infinite."""
    return int(np.count_nonzero(~np.isfinite(matrix.data)))
