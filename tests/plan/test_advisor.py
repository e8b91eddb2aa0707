"""sparsewire.plan.advisor: every partitioner x strategy on the global matrix, and its recommendation."""

from __future__ import annotations

import pytest

from oracles import formula_volumes, random_integer_matrix
from sparsewire.errors import InputError
from sparsewire.io.generators import from_spec
from sparsewire.partition import PARTITIONERS, partition
from sparsewire.plan.advisor import advise
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES
from sparsewire.topology.model import Topology


@pytest.mark.parametrize("spec", ["stencil2d:12", None])
def test_the_table_covers_every_choice_with_the_formula_bytes_and_recommends_the_fastest(spec, rng):
    matrix = from_spec(spec) if spec else random_integer_matrix(rng, 60, 60, 0.08)
    ranks, k, element_bytes = 4, 8, 4
    report = advise(matrix, ranks, k=k, element_bytes=element_bytes)
    flat = [s.value for s in EXECUTABLE_STRATEGIES if not s.hierarchical]
    methods = [p for p in PARTITIONERS if p != "metis-hier"]  # no groups: metis-hier needs them
    assert [(r["partition"], r["strategy"]) for r in report["rows"]] == [(m, s) for m in methods for s in flat]
    for row in report["rows"]:
        chosen = partition(matrix, ranks, row["partition"])
        expected = formula_volumes(chosen.permute(matrix), chosen.rows, chosen.cols, k, element_bytes)
        if row["strategy"] in expected:
            assert row["total_bytes"] == expected[row["strategy"]], (row["partition"], row["strategy"])
        assert row["inter_group_bytes"] == 0  # one flat network: no groups, so no traffic between them
        if row["partition"] == "even":
            assert row["break_even_multiplies"] == 0
    least = min(r["predicted_seconds"] for r in report["rows"])  # auto's rule: near ties (2%) go to fewer steps
    near = [r for r in report["rows"] if r["predicted_seconds"] <= 1.02 * least]
    best = min(near, key=lambda r: (r["steps"], r["predicted_seconds"], r["total_bytes"]))
    assert report["recommendation"] == {"partition": best["partition"], "strategy": best["strategy"]}
    assert report["matrix"] == {"n_rows": matrix.shape[0], "n_cols": matrix.shape[1], "nnz": matrix.nnz}


def test_groups_add_the_hierarchical_strategies_and_metis_hier():
    report = advise(from_spec("stencil2d:12"), 8, topology=Topology.nodes(4), k=4)
    assert {r["strategy"] for r in report["rows"]} == {s.value for s in EXECUTABLE_STRATEGIES}
    assert "metis-hier" in {r["partition"] for r in report["rows"]}
    assert all(r["inter_group_bytes"] <= r["total_bytes"] for r in report["rows"])


def test_metis_hier_without_groups_is_refused():
    with pytest.raises(InputError, match="metis-hier partitions into groups first"):
        advise(from_spec("stencil2d:6"), 4, partitioners=["metis-hier"])
