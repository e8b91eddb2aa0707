"""Plans on the torch.distributed transport and on the torch backend through the public API, on every rank of one
job: the ``roundtrip`` and ``backend`` cases of tests/exec/torch_driver.py (its other cases, a count mismatch and
the caller's own process group, need a process of their own: tests/exec/test_torch_transport.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from torch_driver import backend, roundtrip  # noqa: E402


@pytest.mark.ranks(1, 2, 3)
def test_torch_transport_transposed_saved_and_deterministic_plans(comm, seed, shared_tmp):
    """Forward and transposed products exact on the torch transport, a square and a rectangular A; a saved plan
    loads on it; the deterministic product bitwise the MPI transport's."""
    assert roundtrip(seed, comm, str(shared_tmp)) == "OK roundtrip 2"


@pytest.mark.ranks(1, 3)
def test_torch_backend_plans_transpose_and_stay_deterministic(comm, seed, shared_tmp):
    """Forward and transposed products exact on the torch backend; a saved plan loads on it; deterministic C bitwise
    the same in every mode, thread count and run."""
    assert backend(seed, comm, str(shared_tmp)) == "OK backend 2"
