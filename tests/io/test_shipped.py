"""The inputs that ship with the package: found by name, exactly the files the manifest lists (by
checksum), redistributable, at most 2 MB together; a path of the same name wins."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

import sparsewire
from sparsewire.errors import InputError
from sparsewire.gnn import load_graph
from sparsewire.io.shipped import DATA, SHIPPED, shipped_path

MANIFEST = (DATA / "MANIFEST.md").read_text()


def _manifest_rows() -> dict[str, dict]:
    rows = {}
    for line in MANIFEST.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0].startswith("`"):
            name, file, _, n, nnz, licence, _, digest = cells
            rows[name.strip("`")] = {
                "file": file.strip("`"),
                "n": int(n.replace(",", "")),
                "nnz": int(nnz.replace(",", "")),
                "licence": licence,
                "sha256": digest,
            }
    return rows


def test_the_manifest_lists_every_shipped_file_with_its_checksum_and_licence():
    rows = _manifest_rows()
    assert set(rows) == set(SHIPPED)
    files = {path.name for path in DATA.iterdir() if path.name != "MANIFEST.md"}
    assert files == set(SHIPPED.values())
    for name, row in rows.items():
        assert row["file"] == SHIPPED[name]
        assert hashlib.sha256(shipped_path(name).read_bytes()).hexdigest() == row["sha256"], name
        assert re.search(r"CC BY|MIT|Apache|BSD", row["licence"]), f"{name}: not a redistributable licence"
    assert sum(shipped_path(name).stat().st_size for name in SHIPPED) <= 2 * 1024 * 1024


@pytest.mark.parametrize("name", [name for name, file in SHIPPED.items() if file.endswith(".mtx.gz")])
def test_a_shipped_matrix_loads_by_name_with_the_manifest_size(name):
    row = _manifest_rows()[name]
    matrix = sparsewire.load_matrix(name)
    assert matrix.shape == (row["n"], row["n"]) and matrix.nnz == row["nnz"]
    assert abs(matrix - matrix.T).max() == 0  # both are symmetric, stored as a lower triangle
    assert np.all(matrix.data == 1.0)  # pattern files: value 1 on every entry


def test_the_shipped_graph_loads_by_name():
    row = _manifest_rows()["cora"]
    graph = load_graph("cora")
    assert graph.n == row["n"] and graph.adjacency.nnz == row["nnz"]


def test_a_file_of_the_same_name_wins_and_an_unknown_name_lists_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bcsstk25").write_text("not a matrix\n")
    with pytest.raises(InputError, match="bcsstk25: unknown file type"):  # the user's file was read, not ours
        sparsewire.load_matrix("bcsstk25")
    with pytest.raises(InputError, match="shipped matrix \\(bcsstk25, delaunay_n16\\)"):
        sparsewire.load_matrix("bcsstk26")
