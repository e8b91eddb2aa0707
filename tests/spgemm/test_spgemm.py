"""SpGEMM pieces that need no MPI: semirings, SUMMA stages and grids, the wire format, values,
comparison and the graph references."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.apps import graphs
from sparsewire.errors import InputError
from sparsewire.partition import RowPartition
from sparsewire.spgemm.compare import compare_exactly, reference_product
from sparsewire.spgemm.local import import_messages, index_dtype, pack_row_ranges, row_counts, to_graphblas, to_scipy, wire_bytes
from sparsewire.spgemm.semirings import SEMIRINGS, get_semiring, user_semiring
from sparsewire.spgemm.summa import ProcessGrid, choose_grid, parse_grid, summa_stages
from sparsewire.spgemm.values import apply_values, check_values_spec


def brute_force(a: np.ndarray, b: np.ndarray, add, multiply):
    """C over stored entries only: C(i, j) exists iff some k has A(i, k) and B(k, j) stored."""
    n, m = a.shape[0], b.shape[1]
    pattern, values = np.zeros((n, m), bool), np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            terms = [multiply(a[i, k], b[k, j]) for k in range(a.shape[1]) if a[i, k] != 0 and b[k, j] != 0]
            if terms:
                pattern[i, j] = True
                total = terms[0]
                for term in terms[1:]:
                    total = add(total, term)
                values[i, j] = total
    return pattern, values


SEMANTICS = {
    "plus_times": (lambda x, y: x + y, lambda x, y: x * y),
    "min_plus": (min, lambda x, y: x + y),
    "max_plus": (max, lambda x, y: x + y),
    "max_times": (max, lambda x, y: x * y),
    "min_times": (min, lambda x, y: x * y),
    "plus_min": (lambda x, y: x + y, min),
    "plus_pair": (lambda x, y: x + y, lambda x, y: 1),
    "plus.minus": (lambda x, y: x + y, lambda x, y: x - y),
    "min.first": (min, lambda x, y: x),
}


def random_integer(rng, shape, density):
    matrix = sp.random_array(shape, density=density, rng=rng, format="csr")
    matrix.data = (rng.integers(1, 10, matrix.nnz) * rng.choice([-1, 1], matrix.nnz)).astype(np.float64)
    return sp.csr_array(matrix)


@pytest.mark.parametrize("name", sorted(SEMANTICS))
def test_local_product_matches_brute_force(rng, name):
    a, b = random_integer(rng, (7, 9), 0.3), random_integer(rng, (9, 6), 0.3)
    add, multiply = SEMANTICS[name]
    pattern, values = brute_force(a.toarray(), b.toarray(), add, multiply)
    coo = sp.coo_array(reference_product(a, b, get_semiring(name)))
    stored = np.zeros(coo.shape, bool)
    stored[coo.row, coo.col] = True  # stored entries, explicit zeros included
    assert np.array_equal(stored, pattern)
    assert np.array_equal(coo.data, values[coo.row, coo.col])


def test_semiring_facts():
    expected = {
        "plus_times": (0.0, True, False),
        "min_plus": (np.inf, True, True),
        "max_plus": (-np.inf, True, True),
        "max_times": (-np.inf, True, True),
        "min_times": (np.inf, True, True),
        "plus_min": (0.0, True, False),
        "lor_land": (False, True, True),
        "plus_pair": (0.0, True, False),
        "any_pair": (None, True, True),
    }
    assert set(expected) == set(SEMIRINGS)
    for name, (identity, commutes, idempotent) in expected.items():
        semiring = get_semiring(name)
        assert semiring.identity == identity, name
        assert semiring.multiplication_commutes is commutes, name
        assert semiring.addition_idempotent is idempotent, name
    assert get_semiring("plus.minus").multiplication_commutes is False
    assert get_semiring("min.first").multiplication_commutes is False
    assert get_semiring("lor_land").dtype == np.bool_


def test_min_plus_identity_is_not_zero():
    # CombBLAS's GPU path starts sums at 0, which would turn min(0, 5) into 0: a single path of length 5 must stay 5.
    a = sp.csr_array(np.array([[0.0, 2.0], [0.0, 0.0]]))
    b = sp.csr_array(np.array([[0.0, 0.0], [0.0, 3.0]]))
    assert reference_product(a, b, get_semiring("min_plus")).toarray()[0, 1] == 5.0
    assert reference_product(-a, b, get_semiring("max_times")).toarray()[0, 1] == -6.0


def test_user_semiring_from_a_python_function(rng):
    semiring = user_semiring("ten_a_minus_b", "plus", lambda x, y: 10 * x - y)
    assert semiring.multiplication_commutes is False
    a, b = random_integer(rng, (6, 5), 0.4), random_integer(rng, (5, 7), 0.4)
    pattern, values = brute_force(a.toarray(), b.toarray(), lambda x, y: x + y, lambda x, y: 10 * x - y)
    result = reference_product(a, b, semiring)
    coo = sp.coo_array(result)
    assert result.nnz == pattern.sum()
    assert np.array_equal(coo.data, values[coo.row, coo.col])


def test_semiring_errors():
    with pytest.raises(InputError, match="unknown semiring"):
        get_semiring("plus_nothing")
    with pytest.raises(InputError, match="unknown monoid"):
        get_semiring("avg.times")
    with pytest.raises(InputError, match="no binary operator"):
        get_semiring("plus.frobnicate")


def test_a_user_multiplication_that_does_not_compile_is_refused_naming_why():
    with pytest.raises(InputError, match=r"does not compile for float64 values \(Unknown attribute 'norm' of type float64"):
        user_semiring("bad_attribute", "plus", lambda x, y: x.norm + y)
    with pytest.raises(InputError, match=r"does not compile for float64 values \(Unknown dtype"):
        user_semiring("bad_result", "plus", lambda x, y: "text")
    with pytest.raises(InputError, match="the plus monoid cannot add"):  # compiles, to a bool
        user_semiring("comparison", "plus", lambda x, y: x < y)
    # compiled for the semiring's own type only: bool under lor
    semiring = user_semiring("both", "lor", lambda x, y: x and y, np.bool_)
    a = sp.csr_array(np.array([[True, False], [True, True]]))
    assert semiring.dtype == np.bool_
    assert reference_product(a, a, semiring).toarray().tolist() == [[True, False], [True, True]]


def test_summa_stages_common_refinement():
    # A's columns in 2 blocks, B's rows in 3: the stages are the union of both boundaries.
    stages = summa_stages(RowPartition(np.array([0, 5, 10])), RowPartition(np.array([0, 3, 7, 10])))
    assert stages == [(0, 3, 0, 0), (3, 5, 0, 1), (5, 7, 1, 1), (7, 10, 1, 2)]
    with pytest.raises(InputError, match="inner dimensions"):
        summa_stages(RowPartition(np.array([0, 5])), RowPartition(np.array([0, 6])))


def test_grids():
    assert [str(choose_grid(p)) for p in (1, 2, 3, 4, 6, 12)] == ["1x1", "2x1", "3x1", "2x2", "3x2", "4x3"]
    assert parse_grid("1x3", 3) == ProcessGrid(1, 3)
    with pytest.raises(InputError, match="ranks"):
        parse_grid("2x2", 3)
    with pytest.raises(InputError, match="ROWSxCOLS"):
        parse_grid("two", 4)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.bool_])
def test_wire_format_round_trip(rng, dtype):
    matrix = random_integer(rng, (40, 30), 0.05).tolil()
    matrix[[3, 17], :] = 0  # empty rows are not listed
    matrix = sp.csr_array(matrix)
    block = to_graphblas(matrix, dtype)
    itype = index_dtype(40, 30)
    [(ints, values, listed)] = pack_row_ranges(block, np.array([0, 40]), itype)
    assert block.nvals == matrix.nnz  # packing without consume gives the arrays back
    nonempty = int((np.diff(matrix.indptr) > 0).sum())
    assert listed == nonempty == int((row_counts(block) > 0).sum())
    assert ints.dtype == np.int32 and ints.size == 2 * listed + matrix.nnz
    assert wire_bytes(listed, values.size, 4, np.dtype(dtype).itemsize) == 16 + 4 * ints.size + values.nbytes
    back = to_scipy(import_messages([(ints, values, listed)], np.zeros(1, np.int64), 40, 30, dtype))
    assert (back != to_scipy(block)).nnz == 0
    # Split by destination and rebuilt: the same matrix; consumed, the block is left empty.
    bounds = np.array([0, 10, 10, 25, 40])
    pieces = pack_row_ranges(block, bounds, itype, consume=True)
    assert block.nvals == 0
    assert sum(v.size for _, v, _ in pieces) == matrix.nnz
    rebuilt = to_scipy(import_messages(pieces, bounds[:-1], 40, 30, dtype))
    assert (rebuilt != to_scipy(to_graphblas(matrix, dtype))).nnz == 0


def test_wire_format_of_empty_and_one_row_matrices():
    for shape in [(1, 4), (6, 1), (0, 3), (3, 0)]:
        block = to_graphblas(sp.csr_array(shape), np.float64)
        pieces = pack_row_ranges(block, np.array([0, shape[0]]), np.dtype(np.int32))
        assert pieces[0][0].size == 0 and pieces[0][2] == 0
        assert import_messages(pieces, np.zeros(1, np.int64), *shape, np.float64).nvals == 0


def test_values_and_exact_comparison():
    matrix = sp.csr_array(np.array([[0.0, 2.5], [1.0, 0.0]]))
    assert np.array_equal(apply_values(matrix, "ones").data, [1.0, 1.0])
    first, second = apply_values(matrix, "random:4"), apply_values(matrix, "random:4")
    assert np.array_equal(first.data, second.data) and set(first.data) <= set(range(1, 10))
    assert np.array_equal(apply_values(matrix, "file").data, matrix.data)
    with pytest.raises(InputError, match="random:SEED"):
        check_values_spec("gaussian")
    with pytest.raises(InputError, match="integer"):
        check_values_spec("random:x")
    same = compare_exactly(first, second)
    assert same["check_passed"] and same["exact"]
    other = first.copy()
    other.data[0] += 1
    assert compare_exactly(other, first)["mismatched_values"] == 1
    assert compare_exactly(sp.csr_array(np.eye(2)), first)["pattern_equal"] is False


def test_graph_references_on_hand_made_graphs():
    # K4 has 4 triangles; a 5-cycle none; a directed path 0 -> 1 -> 2 -> 3.
    k4 = sp.csr_array(np.ones((4, 4)) - np.eye(4))
    assert graphs.reference_triangle_count(k4) == 4
    cycle = sp.csr_array((np.ones(5), (np.arange(5), (np.arange(5) + 1) % 5)), shape=(5, 5))
    assert graphs.reference_triangle_count(cycle) == 0
    path = sp.csr_array((np.array([2.0, 3.0, 4.0]), ([0, 1, 2], [1, 2, 3])), shape=(4, 4))
    assert np.array_equal(graphs.reference_bfs_levels(path, 0), [0, 1, 2, 3])
    assert np.array_equal(graphs.reference_bfs_levels(path, 2), [np.inf, np.inf, 0, 1])
    assert np.array_equal(graphs.reference_shortest_paths(path, 0), [0, 2, 5, 9])
    reach = graphs.reference_reachable_within(path, 2).toarray()
    assert reach[0].tolist() == [True, True, True, False] and reach[3].tolist() == [False, False, False, True]


@pytest.mark.parametrize("passes", [1, 2])
def test_the_bf16_check_accepts_a_bf16_product_and_only_with_its_bound(rng, passes):
    """C from operands rounded to bf16 (B, and for two passes A too: what SUMMA's coded blocks do) is within the bound
    ``compare_products`` allows with ``codec=("bf16", passes)``; the same comparison without the codec (a check
    that forgot the codec) fails, and a C one bf16 step further off than the bound fails too."""
    from sparsewire.spgemm.compare import compare_products

    def bf16(matrix):
        rounded = sp.csr_array(matrix, copy=True)
        bits = rounded.data.astype(np.float32).view(np.uint32)
        rounded.data = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32).astype(np.float64)
        return rounded

    a = sp.random_array((60, 50), density=0.2, rng=rng, format="csr")
    b = sp.random_array((50, 40), density=0.2, rng=rng, format="csr")
    a.data, b.data = rng.standard_normal(a.nnz), rng.standard_normal(b.nnz) * 1e3
    semiring = get_semiring("plus_times")
    reference = reference_product(a, b, semiring)
    # (on the reference's pattern: rounded terms can cancel to an exact 0, which SciPy's product drops and ours keeps)
    dense = ((bf16(a) if passes == 2 else a) @ bf16(b)).toarray()
    coded = sp.csr_array(reference, copy=True)
    coded.data = dense[np.repeat(np.arange(coded.shape[0]), np.diff(coded.indptr)), coded.indices]
    assert compare_products(coded, reference, a, b, semiring, ("bf16", passes))["check_passed"]
    assert not compare_products(coded, reference, a, b, semiring)["check_passed"]
    further = sp.csr_array(reference, copy=True)
    scale = sp.csr_array(abs(a) @ abs(b))
    scale.sort_indices()
    further.sort_indices()
    further.data = further.data + 1.01 * ((1 + 2.0**-8) ** passes - 1) * scale.data
    assert not compare_products(further, reference, a, b, semiring, ("bf16", passes))["check_passed"]


def test_spgemm_options_are_validated_once_with_every_problem_named(rng):
    """SpgemmOptions: hand-made bad values each named in one InputError; random good ones round-trip through
    spgemm_options (given keywords replace fields, UNSET ones do not) and as_dict."""
    from sparsewire import SpgemmOptions, Topology
    from sparsewire.spgemm.options import ALGORITHMS, COMPRESS, ONE_DIM_STRATEGIES, UNSET, spgemm_options

    with pytest.raises(InputError) as caught:
        SpgemmOptions(algorithm="cannon", strategy="diagonal", phases=0, overlap="yes", compress="zip", topology="nodes:2")
    message = str(caught.value)
    for fragment in ("'cannon'", "'diagonal'", "phases must be", "overlap must be", "'zip'", "topology must be"):
        assert fragment in message, message
    assert spgemm_options(None, phases=-1) == "phases must be a positive integer (got -1)"
    assert spgemm_options("summa").startswith("options must be a sparsewire.SpgemmOptions")
    assert "not an option of an SpGEMM plan" in spgemm_options(None, phase=2)
    for _ in range(20):
        chosen = {
            "algorithm": str(rng.choice(ALGORITHMS)),
            "strategy": str(rng.choice(("auto", *ONE_DIM_STRATEGIES))),
            "phases": int(rng.integers(1, 9)),
            "overlap": bool(rng.integers(2)),
            "stages_per_product": int(rng.integers(1, 5)),
            "compress": str(rng.choice(COMPRESS)),
            "topology": Topology.nodes(int(rng.integers(1, 5))) if rng.integers(2) else None,
        }
        options = spgemm_options(None, **chosen, grid=UNSET)
        assert options == SpgemmOptions(**chosen) and options.grid is None
        report = options.as_dict()
        assert report["phases"] == chosen["phases"] and report["compress"] == chosen["compress"]
        assert report["topology"] == (None if chosen["topology"] is None else chosen["topology"].name)
        assert spgemm_options(options, phases=UNSET) is options  # nothing given: the same object
