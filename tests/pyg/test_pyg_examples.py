"""PyG's own example scripts beside their sparsewire versions (bench/peers/pyg_examples/): the versions differ from
PyG's only in lines marked ``# sparsewire``, and docs/pyg.md shows the change to ``gcn.py`` as it is."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "bench" / "peers" / "pyg_examples"
MARK = "# sparsewire"


def added_lines(original: list[str], changed: list[str]) -> list[str]:
    """The lines of ``changed`` that ``original`` does not have where they stand (added or edited lines)."""
    return [line[2:] for line in difflib.ndiff(original, changed) if line.startswith("+ ")]


def unmarked(lines: list[str]) -> list[str]:
    return [line for line in lines if not (line.rstrip().endswith(MARK) or f"{MARK}:" in line)]


@pytest.mark.parametrize("script", ["gcn", "gat"])
def test_the_sparsewire_version_changes_only_marked_lines(script):
    theirs = (EXAMPLES / f"{script}.py").read_text().splitlines()
    ours = (EXAMPLES / f"{script}_sparsewire.py").read_text().splitlines()
    added = added_lines(theirs, ours)
    assert unmarked(added) == []
    for call in ("import sparsewire.pyg as sw", "sw.distribute(data)", "sw.convert(model)", "sw.cross_entropy(",
                 "sw.allreduce_gradients(model)", "sw.accuracy(", "torch.manual_seed("):  # fmt: skip
        assert any(call in line for line in added), call
    removed = [line for line in difflib.ndiff(theirs, ours) if line.startswith("- ")]
    assert len(removed) <= len(added), removed  # a line is only ever replaced by a marked one, never dropped


def test_a_change_without_the_mark_is_found():
    theirs = (EXAMPLES / "gcn.py").read_text().splitlines()
    planted = [line.replace("F.cross_entropy", "sw.cross_entropy") for line in theirs]
    assert unmarked(added_lines(theirs, planted)) == [line for line in planted if "sw.cross_entropy" in line]


def test_docs_show_the_change_to_gcn_as_it_is():
    theirs = (EXAMPLES / "gcn.py").read_text().splitlines()
    ours = (EXAMPLES / "gcn_sparsewire.py").read_text().splitlines()
    expected = list(difflib.unified_diff(theirs, ours, lineterm=""))[2:]  # without the two file-name lines
    shown = re.search(r"```diff\n(.*?)\n```", (ROOT / "docs" / "pyg.md").read_text(), re.S)
    assert shown is not None, "docs/pyg.md has no diff block"
    assert shown.group(1).splitlines() == expected
