"""Jobs that ``torchrun`` starts: their processes share no MPI world, and sparsewire plans, runs and reports over
torch.distributed alone. At P = 1 to 4 one job (tests/torchrun_job.py) runs ``sparsewire spmm --check`` for every
strategy (C exact against SciPy), ``sparsewire gcn cora`` (the losses of the same command under ``mpiexec``), and a
PyG model with GCN, SAGE, GIN, GAT and batch norm converted by sparsewire.pyg (the single process's losses for 100
epochs), and TorchComm's reductions (each result of its value's type) and an ``Alltoallv`` of uint32 with gaps
between its pieces, against closed-form answers; no rank has ``mpiexec`` or its proxy among its ancestors, each rank's
MPI world is itself alone, and no rank's torch.distributed process group outlives sparsewire's exit handler. The
ancestry check fails on a planted fault: the same job under ``mpiexec``, run to its launch record."""

from __future__ import annotations

import json

import pytest
from session_results import gcn_cora_losses_name

from conftest import ROOT, _seed, job_of, one_rank_beside, results_folder, run_mpi
from sparsewire import testing

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

JOB = str(ROOT / "tests" / "torchrun_job.py")
MPI_LAUNCHERS = ("mpiexec", "mpiexec.hydra", "hydra_pmi_proxy", "mpirun", "orterun", "prterun")


def parts(job: testing.Job) -> dict:
    """Rank 0's JSON object per part, and every rank's LAUNCH and EXIT records."""
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    found = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in job.stdout.splitlines() if " {" in line}
    for record in ("launch", "exit"):
        prefix = f"{record.upper()} "
        found[record] = [json.loads(line[len(prefix) :]) for line in job.stderr.splitlines() if line.startswith(prefix)]
    return found


JOB_ARGUMENTS = [JOB, str(_seed() % 10_000)]


def mpiexec_gcn_losses(ranks: int) -> list[float]:
    """The per-epoch losses of ``mpiexec -n RANKS sparsewire gcn cora --epochs 4``: those the collective job at this
    P left (tests/mpi/test_gnn_command.py; the suite runs its jobs first), else those of a run started here."""
    saved = results_folder() / gcn_cora_losses_name(ranks)
    if saved.exists():
        return json.loads(saved.read_text())
    reference = run_mpi(ranks, ["-m", "sparsewire", "gcn", "cora", "--epochs", "4", "--json"], timeout=300)
    assert reference.returncode == 0, reference.stderr[-3000:]
    return [entry["loss"] for entry in json.loads(reference.stdout.strip().splitlines()[-1])["history"]]


@pytest.mark.mpi
@pytest.mark.timeout(600)
# (in the order of tests/test_collective.py's jobs, which leave the losses of mpiexec's runs)
@pytest.mark.parametrize("ranks", [one_rank_beside(JOB_ARGUMENTS, timeout=540, launcher="torchrun"), 2, 4, 3])
def test_a_torchrun_job_plans_runs_and_trains_without_mpi(ranks, request):
    found = parts(job_of(request, ranks, JOB_ARGUMENTS, timeout=540, launcher="torchrun"))
    launch = found["launch"]
    assert sorted(record["rank"] for record in launch) == list(range(ranks))
    for record in launch:
        assert record["mpi_world"] == 1, record
        assert not set(record["ancestors"]) & set(MPI_LAUNCHERS), record
    # every rank's process groups were destroyed at exit while the interpreter still ran (left to its teardown, Gloo's
    # threads can abort a rank after its work is done)
    assert found["exit"] == [{"initialized": False}] * ranks, found["exit"]
    spmm = found["spmm"]
    assert spmm["ranks"] == ranks and spmm["transport"] == "torch"
    assert {run["strategy"] for run in spmm["runs"]} >= {"block", "column", "row", "joint"}
    for run in spmm["runs"]:
        assert run["max_abs_error"] == 0.0 and run["check_passed"], run["strategy"]
    gcn = found["gcn"]
    assert gcn["ranks"] == ranks and gcn["transport"] == "torch"
    losses = [entry["loss"] for entry in gcn["history"]]
    assert losses == pytest.approx(mpiexec_gcn_losses(ranks), abs=1e-6)
    pyg = found["pyg"]
    # float64: rounding only, which Adam's normalised step raises to 2e-8 at worst seen (a gradient near zero)
    assert pyg["epochs"] == 100 and pyg["largest_difference"] < 1e-6  # (1e-5 asked)
    assert found["reductions"] == {
        "sum": ranks * (ranks + 1) // 2,
        "max": ranks - 1,
        "min": [0, 1 - ranks],
        "lor": True,
        "buffer max": [float(ranks), 0.0],
        "float sum": 0.25 * ranks * (ranks + 1),
        "int64 max": ranks - 1,
        "array sum": [ranks * (ranks - 1) // 2, ranks],
        "big": 2**62 + ranks - 1,
        "types": ["float", "int64", "int", "int32"],
        "alltoallv": found["reductions"]["alltoallv"],
        "refused": found["reductions"]["refused"],
    }
    # rank 0 receives 1 value from each rank q (q * 10), each followed by the untouched gap
    assert found["reductions"]["alltoallv"] == [v for q in range(ranks) for v in (q * 10, 999)]
    assert "TorchComm reduces with SUM, PROD, MAX, MIN, LOR" in found["reductions"]["refused"]
    refused = found["refusals"]
    for name in ("sddmm", "spgemm"):
        assert refused[name].startswith(f"{name.upper() if name == 'sddmm' else 'SpGEMM'} sends its messages over MPI"), refused
    assert "use transport 'torch'" in refused["mpi transport"], refused


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_the_ancestry_check_sees_mpiexec_when_it_started_the_job():
    """The planted fault: under mpiexec, the job's ranks name Hydra's proxy among their ancestors and share a world."""
    job = run_mpi(2, [JOB, "3", "--launch-only"], timeout=240)
    launch = parts(job)["launch"]
    assert len(launch) == 2
    for record in launch:
        assert set(record["ancestors"]) & set(MPI_LAUNCHERS) and record["mpi_world"] == 2, record
