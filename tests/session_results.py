"""What a collective job leaves for a test of the outer session to compare with: the folder the suite names in
``SPARSEWIRE_TEST_RESULTS`` for its jobs (tests/conftest.py makes it and removes it at the end), and the files in it."""

from __future__ import annotations

#: The variable that names the folder, in the environment of the jobs the suite starts.
RESULTS_VARIABLE = "SPARSEWIRE_TEST_RESULTS"


def gcn_cora_losses_name(ranks: int) -> str:
    """The file of ``mpiexec -n RANKS sparsewire gcn cora --epochs 4``'s per-epoch losses (a JSON list)."""
    return f"gcn-cora-4-epochs-{ranks}-ranks.json"
