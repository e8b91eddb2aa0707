"""Readers and generators."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.errors import InputError
from sparsewire.io.generators import deterministic_dense, from_spec
from sparsewire.io.readers import load_matrix, nonfinite_entries

HEADER = "%%MatrixMarket matrix coordinate {field} {symmetry}\n"


def write(tmp_path, name, text, compress=False):
    path = tmp_path / name
    if compress:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return str(path)


def test_real_general_with_comments_and_duplicates(tmp_path):
    text = HEADER.format(field="real", symmetry="general") + "% a comment\n\n3 4 4\n1 1 1.5\n3 4 -2\n2 2 7e0\n1 1 0.5\n"
    matrix = load_matrix(write(tmp_path, "a.mtx", text))
    assert matrix.shape == (3, 4) and matrix.dtype == np.float64
    np.testing.assert_array_equal(matrix.toarray(), [[2, 0, 0, 0], [0, 7, 0, 0], [0, 0, 0, -2]])


@pytest.mark.parametrize("compress", [False, True])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path, compress):
    text = "\ufeff" + HEADER.format(field="integer", symmetry="general") + "2 3 2\n1 3 4\n2 1 -1\n"
    path = tmp_path / ("bom.mtx.gz" if compress else "bom.mtx")
    path.write_bytes(gzip.compress(text.encode()) if compress else text.encode())
    assert path.read_bytes()[:3] == b"\xef\xbb\xbf" or compress
    np.testing.assert_array_equal(load_matrix(str(path)).toarray(), [[0, 0, 4], [-1, 0, 0]])


def test_pattern_symmetric_gz(tmp_path):
    text = HEADER.format(field="pattern", symmetry="symmetric") + "3 3 3\n1 1\n3 1\n3 2\n"
    matrix = load_matrix(write(tmp_path, "a.mtx.gz", text, compress=True))
    np.testing.assert_array_equal(matrix.toarray(), [[1, 0, 1], [0, 0, 1], [1, 1, 0]])


def test_integer_skew_symmetric(tmp_path):
    text = HEADER.format(field="integer", symmetry="skew-symmetric") + "3 3 2\n2 1 5\n3 2 -4\n"
    matrix = load_matrix(write(tmp_path, "a.mtx", text))
    np.testing.assert_array_equal(matrix.toarray(), [[0, -5, 0], [5, 0, 4], [0, -4, 0]])


@pytest.mark.parametrize(
    "body, message",
    [
        ("%%MatrixMarket matrx coordinate real general\n2 2 1\n1 1 1\n", "line 1: malformed Matrix Market header"),
        ("%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 1 1 0\n", "field 'complex' is not supported"),
        ("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "dense"),
        (HEADER.format(field="real", symmetry="general") + "2 2\n1 1 1\n", "malformed size line"),
        (HEADER.format(field="real", symmetry="general") + "2 2 2\n1 1 1\n2 2\n", "line 4: 2 fields, expected 3"),
        (HEADER.format(field="real", symmetry="general") + "2 2 2\n1 1 1 9\n2 2 1\n", "line 3: 4 fields, expected 3"),
        (HEADER.format(field="pattern", symmetry="general") + "2 2 1\n1 1 1\n", "line 3: 3 fields, expected 2"),
        (HEADER.format(field="real", symmetry="general") + "2 2 3\n1 1 1\n2 2 1\n", "promises 3 entries but the file has 2"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 1 1\n2 2 1\n", "promises 1 entries but the file has 2"),
        (HEADER.format(field="real", symmetry="general") + "2 2 2\n1 1 1\n3 2 1\n", "row index out of bounds"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 0 1\n", "out of bounds"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 x 1\n", "line 3"),
        (HEADER.format(field="integer", symmetry="general") + "2 2 1\n1 1 1.5\n", "not integers"),
        # values the fast parser read up to the first odd character (1,5 as 1; 0x10 as 0; 1.5abc as 1.5)
        (HEADER.format(field="real", symmetry="general") + "2 2 2\n1 1 1\n2 2 1,5\n", "line 4: character ',' is not part"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 1 0x10\n", "line 3: character 'x' is not part"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 1 1.5abc\n", "line 3: character 'b' is not part"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 1 1.2.3\n", "line 3: two decimal points"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 1 1e5e5\n", "line 3: two exponents"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 1 1-2\n", "line 3: a sign inside a number"),
        (HEADER.format(field="real", symmetry="general") + "2 2 1\n1 1 nana\n", "line 3: 'nana' is not a number"),
        # a comment after the size line: its words would be counted as an entry ("the file has 3" for 2)
        (
            HEADER.format(field="real", symmetry="general") + "2 2 2\n1 1 1\n2 2 1\n% trailing note\n",
            "line 5: a comment among the entries; Matrix Market allows comments only between the header and the size",
        ),
        (HEADER.format(field="pattern", symmetry="general") + "2 2 2\n1 1\n  %x\n2 2\n", "line 4: a comment among"),
    ],
)
def test_malformed_matrix_market(tmp_path, body, message):
    with pytest.raises(InputError, match=message):
        load_matrix(write(tmp_path, "bad.mtx", body))


def test_every_plain_number_form_is_read_exactly(tmp_path):
    body = "3 3 6\n1 1 -2e-3\n1 2 1E+2\n2 2 0.5\n3 3 7\n2 1 NaN\n3 1 -inf\n"
    matrix = load_matrix(write(tmp_path, "a.mtx", HEADER.format(field="real", symmetry="general") + body)).toarray()
    np.testing.assert_array_equal(matrix, [[-2e-3, 100.0, 0], [np.nan, 0.5, 0], [-np.inf, 0, 7]])


def test_missing_and_unknown(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_matrix(str(tmp_path / "nothing.mtx"))
    with pytest.raises(InputError, match="neither an existing file, a shipped matrix .* nor a generator"):
        load_matrix("banana")
    with pytest.raises(InputError, match="not a valid gzip"):
        load_matrix(write(tmp_path, "fake.mtx.gz", "plain text"))
    with pytest.raises(InputError, match="unknown file type"):
        load_matrix(write(tmp_path, "data.csv", "1,2"))


def test_nan_values_are_counted(tmp_path):
    text = HEADER.format(field="real", symmetry="general") + "2 2 2\n1 1 nan\n2 2 1\n"
    assert nonfinite_entries(load_matrix(write(tmp_path, "nan.mtx", text))) == 1


def test_edge_list(tmp_path):
    text = "# Directed graph\n# FromNodeId\tToNodeId\n0\t1\n1\t2\n0\t1\n3\t0\n"
    path = write(tmp_path, "g.txt.gz", text, compress=True)
    directed = load_matrix(path)
    assert directed.shape == (4, 4) and directed.nnz == 3 and directed[0, 1] == 1
    undirected = load_matrix(path, symmetrize=True)
    assert (undirected != undirected.T).nnz == 0 and undirected.nnz == 6
    weighted = load_matrix(write(tmp_path, "w.txt", "0 1 2.5\n0 1 1\n"))
    assert weighted[0, 1] == 3.5
    with pytest.raises(InputError, match="malformed edge list"):
        load_matrix(write(tmp_path, "bad.txt", "0 1\n1 2 3\n"))
    with pytest.raises(InputError, match="non-negative integer"):
        load_matrix(write(tmp_path, "neg.txt", "0 1\n-1 2\n"))


def test_npz_roundtrip(tmp_path, rng):
    matrix = sp.random_array((20, 30), density=0.1, rng=rng, format="csr")
    sp.save_npz(tmp_path / "m.npz", matrix)
    loaded = load_matrix(str(tmp_path / "m.npz"))
    assert (loaded != matrix).nnz == 0
    with pytest.raises(InputError, match="npz"):
        load_matrix(write(tmp_path, "bad.npz", "nope"))


def test_generators_are_deterministic():
    for spec in ("rmat:8:4:3", "delaunay:300:2", "uniform:50x70:4:9"):
        first, second = from_spec(spec), from_spec(spec)
        assert (first != second).nnz == 0
    assert (from_spec("rmat:8:4:3") != from_spec("rmat:8:4:4")).nnz > 0


def test_rmat_shape_and_skew():
    matrix = from_spec("rmat:12:8:1")
    assert matrix.shape == (4096, 4096)
    assert 0 < matrix.nnz <= 8 * 4096 and np.all(matrix.data == 1)
    degrees = np.diff(matrix.indptr)
    assert degrees.max() > 10 * degrees.mean()  # heavy-tailed, as R-MAT with a = 0.57 is


@pytest.mark.parametrize("seed", [1, 7])
def test_rmat_compiled_path_makes_the_numpy_paths_matrix(monkeypatch, seed):
    """The compiled path draws each bit's numbers from a generator copy advanced to that bit's place and takes
    the edges in blocks through all the bits; with chunks and blocks shrunk so that there are several of
    each (and a last, shorter one), it makes exactly the NumPy path's matrix, and leaves the generator where
    the NumPy path does (the permutation that follows the draws agrees)."""
    from sparsewire.io import generators

    monkeypatch.setattr(generators, "RMAT_CHUNK", 1000)
    monkeypatch.setattr(generators, "RMAT_BLOCK", 300)
    monkeypatch.setattr(generators, "COMPILED_FROM_EDGES", 1 << 40)
    numpy_path = generators.rmat(10, 5, seed)
    monkeypatch.setattr(generators, "COMPILED_FROM_EDGES", 0)
    monkeypatch.setattr(generators, "node_cores", lambda: 3)  # chunks and permuted keys over three threads, unevenly
    compiled = generators.rmat(10, 5, seed)
    assert numpy_path.nnz > 4000
    for field in ("indptr", "indices", "data"):
        mine, theirs = getattr(compiled, field), getattr(numpy_path, field)
        assert mine.dtype == theirs.dtype and np.array_equal(mine, theirs), field


def test_rmat_compiled_and_numpy_steps_set_the_same_bits(rng):
    """The compiled step (large graphs) and the NumPy one (small) pick the same quadrants, on draws that
    include the thresholds themselves; and an R-MAT graph's pattern is canonical CSR with 32-bit ids."""
    from sparsewire.io.generators import GRAPH500_ABC, _add_quadrant_bits
    from sparsewire.io.rmat_bits import add_quadrant_bits

    a, b, c = GRAPH500_ABC
    draw = np.concatenate([rng.random(5000), [0.0, a, a + b, a + b + c, np.nextafter(a, 0), np.nextafter(1.0, 0)]])
    found = []
    for step in (add_quadrant_bits, _add_quadrant_bits):
        rows, cols = np.zeros(draw.size, np.int32), np.zeros(draw.size, np.int32)
        for bit in (4, 0):
            step(draw, rows, cols, bit, a, a + b, a + b + c)
        found.append((rows, cols))
    assert np.array_equal(found[0][0], found[1][0]) and np.array_equal(found[0][1], found[1][1])
    quadrant = (draw >= a).astype(int) + (draw >= a + b) + (draw >= a + b + c)  # 0 a, 1 b, 2 c, 3 d
    assert np.array_equal(found[0][0], 17 * (quadrant >= 2)) and np.array_equal(found[0][1], 17 * (quadrant % 2))
    matrix = from_spec("rmat:9:3:2")
    assert matrix.has_canonical_format and matrix.indices.dtype == np.int32
    canonical = sp.csr_array(matrix, copy=True)
    canonical.sum_duplicates()
    assert np.array_equal(canonical.indices, matrix.indices) and np.array_equal(canonical.indptr, matrix.indptr)


def test_delaunay_is_a_planar_triangulation():
    matrix = from_spec("delaunay:2000:1")
    assert (matrix != matrix.T).nnz == 0 and matrix.diagonal().sum() == 0
    edges = matrix.nnz // 2
    assert edges <= 3 * 2000 - 6  # planar
    assert 5.5 < matrix.nnz / 2000 < 6.0  # mean degree of a random Delaunay triangulation tends to 6


def test_stencils_exact():
    expected = np.array(
        [[4, -1, -1, 0], [-1, 4, 0, -1], [-1, 0, 4, -1], [0, -1, -1, 4]],
    )
    np.testing.assert_array_equal(from_spec("stencil2d:2").toarray(), expected)
    seven = from_spec("stencil3d:4")
    assert seven.shape == (64, 64) and seven.diagonal().tolist() == [6] * 64
    assert seven.nnz == 64 + 6 * 4 * 4 * 3  # diagonal + 2 * (grid edges) with 3 * 4 * 4 * 3 edges
    twenty_seven = from_spec("stencil3d:4:27")
    assert twenty_seven.diagonal().tolist() == [26] * 64
    centre = 1 * 16 + 1 * 4 + 1  # an interior point has all 26 neighbours
    assert twenty_seven[[centre]].nnz == 27 and twenty_seven[[centre]].sum() == 0
    assert from_spec("stencil2d:3:5").shape == (15, 15)


def test_uniform_rectangular():
    matrix = from_spec("uniform:30x80:5:2")
    assert matrix.shape == (30, 80) and np.all(np.diff(matrix.indptr) <= 5)


@pytest.mark.parametrize(
    "spec, message",
    [("rmat:16", "expected rmat:SCALE"), ("rmat:a:8", "integer"), ("stencil3d:4:9", "7 or 27"), ("delaunay:2", "at least 3")],
)
def test_bad_generator_specs(spec, message):
    with pytest.raises(InputError, match=message):
        load_matrix(spec)


def test_deterministic_dense_hash_values():
    # The values the issue gives for the hash (global, 0-based indices).
    assert deterministic_dense(0, 2, 2)[0, 0] == -0.3080275265965611
    assert deterministic_dense(1, 2, 1)[0, 0] == 0.10775042092427611
    assert deterministic_dense(0, 1, 2)[0, 1] == 0.11459226300939918
    assert deterministic_dense(123456, 123457, 8)[0, 7] == 0.331205268856138


def _hash_reference(i: int, j: int) -> float:
    x = (i * 2654435761 + j * 40503 + 1) % 2**32
    x = (((x >> 16) ^ x) * 0x45D9F3B) % 2**32
    x = (((x >> 16) ^ x) * 0x45D9F3B) % 2**32
    x = (x >> 16) ^ x
    return x / 2**32 - 0.5


def test_deterministic_dense_matches_python_integers_and_rows_do_not_repeat(rng):
    start = int(rng.integers(0, 10**9))
    block = deterministic_dense(start, start + 40, 5)
    for i in range(40):
        for j in range(5):
            assert block[i, j] == _hash_reference(start + i, j)
    # The old (7i + 13j) mod 17 operand repeated every 17 rows; no two rows of this one are equal.
    assert len({tuple(row) for row in block}) == 40
    assert deterministic_dense(start, start + 3, 4, np.float32).dtype == np.float32


# A 4-vertex METIS graph: edges 1-2 (weight 5), 1-3 (weight 2), 2-3 (weight 7); vertex 4 isolated.
METIS_EDGES = {(0, 1): 5, (0, 2): 2, (1, 2): 7}


def metis_dense(weighted):
    dense = np.zeros((4, 4))
    for (i, j), w in METIS_EDGES.items():
        dense[i, j] = dense[j, i] = w if weighted else 1
    return dense


@pytest.mark.parametrize(
    "text, weighted",
    [
        ("% a comment\n4 3\n2 3\n1 3\n1 2\n\n", False),
        ("4 3 1\n2 5 3 2\n1 5 3 7\n1 2 2 7\n\n", True),
        ("4 3 001\n3 2 2 5\n3 7 1 5\n% comment inside\n2 7 1 2\n\n", True),
        ("4 3 11\n9 2 5 3 2\n1 1 5 3 7\n4 1 2 2 7\n3\n", True),  # one vertex weight each
        ("4 3 111 2\n1 9 9 2 5 3 2\n1 1 1 1 5 3 7\n1 4 4 1 2 2 7\n1 3 3\n", True),  # size, two weights
        ("4 3 100\n6 2 3\n6 1 3\n6 1 2\n6\n", False),  # vertex sizes only
    ],
)
def test_metis_graph_formats(tmp_path, text, weighted):
    matrix = load_matrix(write(tmp_path, "g.graph", text))
    assert matrix.shape == (4, 4) and matrix.has_sorted_indices
    np.testing.assert_array_equal(matrix.toarray(), metis_dense(weighted))


def test_metis_graph_random_roundtrip(tmp_path, rng):
    """A random weighted undirected graph written in METIS format (gzipped) reads back exactly."""
    n = 200
    upper = sp.triu(sp.random_array((n, n), density=0.05, rng=rng, format="csr"), k=1)
    upper.data = rng.integers(1, 100, upper.nnz).astype(np.float64)
    graph = sp.csr_array(upper + upper.T)
    lines = [f"{n} {upper.nnz} 011 1"]
    for i in range(n):
        start, stop = graph.indptr[i], graph.indptr[i + 1]
        pairs = " ".join(f"{j + 1} {int(w)}" for j, w in zip(graph.indices[start:stop], graph.data[start:stop]))
        lines.append(f"{i + 3} {pairs}")
    loaded = load_matrix(write(tmp_path, "r.graph.gz", "\n".join(lines) + "\n", compress=True))
    assert loaded.shape == (n, n) and (loaded != graph).nnz == 0


@pytest.mark.parametrize(
    "body, message",
    [
        ("", "empty METIS graph"),
        ("4 x\n", "malformed METIS header"),
        ("4 3 021\n", "not a METIS format"),
        ("4 3 001 2\n", "needs vertex weights"),
        ("4 3\n2 3\n1 3\n1 2\n", "promises 4 vertex lines but the file has 3"),
        ("4 3\n2 3\n1 3\n1 2\n\n4\n", "promises 4 vertex lines but the file has 5"),
        ("4 3 1\n2 5 3\n1 5 3 7\n1 2 2 7\n\n", "line 2 \\(vertex 1\\) has 3 numbers"),
        ("4 3\n2 3\n1 3\n1 9\n\n", "neighbour 9 is outside 1..4"),
        ("4 3\n2 3\n1 3\n1 x\n\n", "line 4: a METIS graph holds non-negative integers only"),
        ("4 4\n2 3\n1 3\n1 2\n\n", "promises 4 edges \\(8 adjacency entries"),
        (
            "4 3\n2 3\n1 3\n1 4\n\n",
            "edge 2-3 is not listed from both ends with one weight; a METIS graph is undirected, so vertex 3's line must list 2 "
            "too",
        ),
        ("4 3 1\n2 5 3 2\n1 5 3 7\n1 2 2 8\n\n", "edge 2-3 is not listed from both ends with one weight"),
        ("4 3\n2 2 3\n1 1\n1\n\n", "listed twice"),
        # a negative edge weight was accepted (the weights of both ends agree, so nothing else caught it)
        ("4 3 1\n2 -5 3 2\n1 -5 3 7\n1 2 2 7\n\n", "line 2: -5 is negative; a METIS graph holds non-negative integers only"),
    ],
)
def test_malformed_metis_graph(tmp_path, body, message):
    with pytest.raises(InputError, match=message):
        load_matrix(write(tmp_path, "bad.graph", body))


def test_symmetric_files_store_one_triangle_and_skew_symmetric_no_diagonal(tmp_path):
    both = HEADER.format(field="real", symmetry="symmetric") + "2 2 2\n2 1 3\n1 2 3\n"  # (1, 2) would be doubled
    with pytest.raises(InputError, match=r"entry \(1, 2\) lies above the diagonal.*change the header to 'general'"):
        load_matrix(write(tmp_path, "both.mtx", both))
    diagonal = HEADER.format(field="real", symmetry="skew-symmetric") + "2 2 2\n1 1 4\n2 1 3\n"
    with pytest.raises(InputError, match=r"entry \(1, 1\) lies on or above the diagonal"):
        load_matrix(write(tmp_path, "skew.mtx", diagonal))
    lower = HEADER.format(field="real", symmetry="symmetric") + "3 3 3\n1 1 2\n3 1 5\n2 2 -1\n"
    np.testing.assert_array_equal(load_matrix(write(tmp_path, "lower.mtx", lower)).toarray(), [[2, 0, 5], [0, -1, 0], [5, 0, 0]])


def _save_raw_csr(path, data, indices, indptr, shape):
    """An .npz laid out as scipy.sparse.save_npz writes a CSR matrix, with arrays we choose."""
    np.savez(
        path,
        data=np.asarray(data),
        indices=np.asarray(indices, np.int32),
        indptr=np.asarray(indptr, np.int32),
        shape=np.asarray(shape),
        format=np.asarray(b"csr"),
    )


def test_npz_files_are_validated_before_use(tmp_path, rng):
    for name, indices in (("big.npz", [1_000_000, 1]), ("negative.npz", [-5, 1])):
        _save_raw_csr(tmp_path / name, [1.0, 2.0], indices, [0, 1, 2], (2, 50))
        with pytest.raises(InputError, match="corrupt CSR arrays"):
            load_matrix(str(tmp_path / name))
    _save_raw_csr(tmp_path / "pointer.npz", [1.0, 2.0], [0, 1], [0, 2, 1], (2, 2))
    with pytest.raises(InputError, match="corrupt CSR arrays"):
        load_matrix(str(tmp_path / "pointer.npz"))
    sp.save_npz(tmp_path / "complex.npz", sp.csr_array(np.array([[1 + 2j, 0], [0, 3]])))
    with pytest.raises(InputError, match="complex values"):
        load_matrix(str(tmp_path / "complex.npz"))
    sp.save_npz(tmp_path / "coo.npz", sp.coo_array((np.ones(2), (np.array([0, 7]), np.array([0, 1]))), shape=(8, 2)))
    assert load_matrix(str(tmp_path / "coo.npz")).nnz == 2
    good = tmp_path / "good.npz"
    sp.save_npz(good, sp.random_array((30, 30), density=0.2, rng=rng, format="csr"))
    whole = good.read_bytes()
    for cut in sorted(
        {0, 1, 10, len(whole) // 3, len(whole) // 2, len(whole) - 1} | set(rng.integers(1, len(whole), 5).tolist())
    ):
        (tmp_path / "cut.npz").write_bytes(whole[:cut])
        with pytest.raises(InputError, match="not a readable SciPy sparse .npz file"):
            load_matrix(str(tmp_path / "cut.npz"))


@pytest.mark.parametrize("spec", ["rmat:31:8:1", "stencil2d:100000000", "stencil3d:2000", "uniform:99999999999x5:1"])
def test_generator_specs_too_large_for_the_machine_are_refused_before_allocating(spec):
    with pytest.raises(InputError, match=r"needs about [0-9.]+ GiB to build, more than the [0-9.]+ GiB this process may use"):
        from_spec(spec)


def test_a_negative_generator_seed_is_one_clear_error():
    for spec in ("rmat:10:8:-1", "delaunay:50:-3", "uniform:20:2:-1"):
        with pytest.raises(InputError, match="the seed must be a non-negative integer"):
            from_spec(spec)


def test_a_size_line_too_large_for_the_machine_is_refused_before_allocating(tmp_path):
    text = HEADER.format(field="real", symmetry="general") + "1000000000000 1000000000000 1\n1 1 1.0\n"
    with pytest.raises(InputError, match="needs about .* GiB to build"):
        load_matrix(write(tmp_path, "huge.mtx", text))


@pytest.mark.parametrize("layout", ["csr", "csc"])
def test_npz_with_a_broken_row_pointer_and_no_entries_is_refused_not_a_segfault(tmp_path, layout):
    """Found by fuzzing: SciPy's full check skips the row pointer when it ends at 0 entries, and
    converting such a matrix read out of bounds (a segfault)."""
    indptr = np.zeros(9, np.int64)
    indptr[4] = 2**31 - 1
    shape = (8, 0) if layout == "csr" else (0, 8)
    np.savez(
        tmp_path / "broken.npz",
        indices=np.zeros(0, np.int32),
        indptr=indptr,
        format=np.bytes_(layout.encode()),
        shape=np.array(shape),
        data=np.zeros(0),
        _is_array=np.array(True),
    )
    with pytest.raises(InputError, match="the index pointer must start at 0, never decrease"):
        load_matrix(str(tmp_path / "broken.npz"))


@pytest.mark.parametrize(
    "content, suffix, expected",
    [  # each found by tests/io/fuzz_readers.py
        (b"0 9223372036854775807\n", ".txt", "vertex id of 2\\^53 or more"),
        (b"0 1e308\n", ".txt", "vertex id of 2\\^53 or more"),
        (b"%%MatrixMarket matrix coordinate real symmetric\n1 2 1\n1 2 1\n", ".mtx", "a symmetric matrix must be square"),
    ],
)
def test_inputs_found_by_fuzzing_are_one_error(tmp_path, content, suffix, expected):
    path = tmp_path / f"found{suffix}"
    path.write_bytes(content)
    with pytest.raises(InputError, match=expected):
        load_matrix(str(path))


@pytest.mark.parametrize("spec", ["uniform:1x1000000000000000000000000000000:1", "rmat:4:4:99999999999999999999999"])
def test_generator_fields_beyond_int64_are_one_error(spec):
    with pytest.raises(InputError, match="2\\^62 or more is out of range"):
        from_spec(spec)


#: Tokens that are plain numbers or words, and tokens that break one rule each, for the syntax checks below.
TOKENS = [b"1", b"-2.5e-3", b"inf", b"-inf", b"nan", b"NaN", b"Infinity", b"+infinity", b"1e5", b"1.", b".5", b"iNf"]
TOKENS += [b"e", b"+", b"1e+5e", b"1..2", b"infinit", b"nana", b"1nan", b"--1", b"1-2", b"e-1", b"0x10", b"1,5", b"\x01"]


def test_the_compiled_syntax_check_agrees_with_the_array_passes(rng):
    """The one-pass compiled check that large files take (``text_lines._all_plain``) accepts exactly the bodies that
    the array passes accept, on hand-made tokens and random bytes from the characters the rules name."""
    from sparsewire.io import text_lines

    compiled = text_lines._compiled_check()

    def accepted_by_the_array_passes(body: bytes) -> bool:
        try:
            text_lines.array_passes("f.mtx", body, 1, np.frombuffer(body, np.uint8))
        except InputError:
            return False
        return True

    alphabet = list(b"0123456789.eE+- \n\t\rinfatyINFATY,x\x00\x01")
    verdicts = set()
    for trial in range(3000):
        if trial % 2:
            body = bytes(rng.choice(alphabet, int(rng.integers(1, 30))).tolist())
        else:
            body = b" ".join(TOKENS[i] for i in rng.integers(0, len(TOKENS), int(rng.integers(1, 6)))) + b"\n"
        verdict = accepted_by_the_array_passes(body)
        assert bool(compiled(np.frombuffer(body, np.uint8))) == verdict, body
        verdicts.add(verdict)
    assert verdicts == {True, False}
    assert compiled(np.frombuffer(b"1 2 -3.5e+2\n4 5 nan\n6 7 -Infinity", np.uint8))
    for fault in (b"1 2 3.5x\n", b"1 2 3e5e\n", b"1 2 +-3\n", b"1 2 infin\n", b"1 2\x0b3\n"):
        assert not compiled(np.frombuffer(b"1 2 3\n" + fault, np.uint8)), fault


def test_a_large_file_with_one_bad_number_far_in_is_refused_by_line(tmp_path):
    """Past ``COMPILED_FROM_BYTES`` the compiled pass runs first; a fault it finds is named as the array passes name
    it, with its line."""
    from sparsewire.io.text_lines import COMPILED_FROM_BYTES

    n = COMPILED_FROM_BYTES // 10 + 1000
    lines = [f"{1 + i % 1000} {1 + i % 997} {i % 7}.5" for i in range(n)]
    lines[n - 5] = "3 4 1,5"
    path = tmp_path / "large.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n1000 1000 " + f"{n}\n" + "\n".join(lines) + "\n")
    assert path.stat().st_size > COMPILED_FROM_BYTES
    with pytest.raises(InputError, match=f"line {n - 5 + 3}: character ',' is not part of a number in '3 4 1,5'"):
        load_matrix(str(path))
    lines[n - 5] = "3 4 1.5"
    path.write_text("%%MatrixMarket matrix coordinate real general\n1000 1000 " + f"{n}\n" + "\n".join(lines) + "\n")
    assert load_matrix(str(path)).shape == (1000, 1000)
