"""The commands on torch's side on every rank of one job, as ``mpiexec -n P sparsewire ...`` runs them: spmm on the
torch transport and the torch backend; gcn trained on either as on MPI and NumPy, and on a GPU, where there is one,
as on the CPU (the same losses within 1e-6, the same bytes per epoch). Their refusals, and the transport's own
process groups, run in jobs of their own (tests/exec/test_torch_transport.py, tests/exec/test_backends.py)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from conftest import SHARED_DATA  # noqa: E402

CORA = SHARED_DATA / "gnn" / "cora.npz"
needs_cora = pytest.mark.skipif(not CORA.exists(), reason="../shared/data/gnn/cora.npz is not present")


def report_of(command, *args):
    status, out, err = command(*args, "--json")
    assert status == 0, out[-2000:] + err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def assert_gcn_trains_alike(command, option: str, values: tuple[str, str], extra: tuple[str, ...] = (), graph=CORA) -> None:
    """``sparsewire gcn`` on Cora (``graph``) for 30 epochs with ``--OPTION`` set to each of the two ``values`` (and
    ``extra`` arguments): the reports name the value, the losses agree within 1e-6 and the bytes per epoch are equal."""
    histories = {}
    for value in values:
        report = report_of(command, "gcn", str(graph), "--epochs", "30", *extra, f"--{option}", value)
        assert report[option] == value
        histories[value] = report["history"]
    first, second = ([entry["loss"] for entry in histories[value]] for value in values)
    assert len(second) == 30
    assert max(abs(a - b) for a, b in zip(first, second)) <= 1e-6
    assert [entry["bytes"] for entry in histories[values[0]]] == [entry["bytes"] for entry in histories[values[1]]]


@pytest.mark.ranks(3)
def test_cli_spmm_on_torch_says_what_its_bytes_are(command):
    args = ["spmm", "rmat:10:8:2", "--transport", "torch", "--mode", "bulk,overlap,early", "--strategy", "joint"]
    report = report_of(command, *args, "--check", "--repeat", "2", "--k", "4")
    assert report["transport"] == "torch" and len(report["runs"]) == 3
    for run in report["runs"]:
        assert run["check_passed"] and run["max_abs_error"] == 0.0
        assert run["measured_bytes"] is None and not run["bytes_measured"]
        assert run["received_tensor_bytes"] == run["planned_bytes"] > 0
        assert "no receive status" in run["bytes_counted_by"]


@pytest.mark.ranks(3)
def test_cli_spmm_on_the_torch_backend_matches_numpy(command):
    reports = {}
    for backend in ("numpy", "torch"):
        args = ["spmm", "rmat:9:8:3", "--k", "8", "--mode", "bulk,overlap,early", "--repeat", "2", "--backend", backend]
        reports[backend] = report_of(command, *args)
    assert reports["torch"]["backend"] == "torch" and reports["numpy"]["backend"] == "numpy"
    for mine, theirs in zip(reports["numpy"]["runs"], reports["torch"]["runs"]):
        assert mine["mode"] == theirs["mode"] and mine["strategy"] == theirs["strategy"]
        assert (mine["checksum_sum"], mine["checksum_fro"]) == (theirs["checksum_sum"], theirs["checksum_fro"])
        assert mine["measured_bytes"] == theirs["measured_bytes"] == mine["planned_bytes"] > 0


@needs_cora
@pytest.mark.ranks(2, 3)
def test_gcn_on_torch_trains_as_on_mpi(command):
    assert_gcn_trains_alike(command, "transport", ("mpi", "torch"))


@needs_cora
@pytest.mark.ranks(3)
def test_gcn_on_the_torch_backend_trains_as_on_numpy(command):
    assert_gcn_trains_alike(command, "backend", ("numpy", "torch"), extra=("--dtype", "float64"))


@pytest.mark.ranks(2)
def test_gcn_on_cuda_trains_as_on_the_cpu(command):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("CUDA absent: no GPU here")
    # the Cora that ships with sparsewire, so that a GPU machine without ../shared runs it
    assert_gcn_trains_alike(command, "device", ("cpu", "cuda:0"), extra=("--dtype", "float64"), graph="cora")
