"""``sparsewire gcn`` on every rank of one job, as ``mpiexec -n P sparsewire gcn`` runs it: the paper's settings on
Cora, float32 by default, graphs with isolated and unlabelled nodes, a rank without nodes, generated graphs with
synthetic features. Its refusals end their jobs and run in jobs of their own (tests/gnn/test_gnn.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("torch")

from planetoid_files import write_planetoid  # noqa: E402
from session_results import RESULTS_VARIABLE, gcn_cora_losses_name  # noqa: E402

from conftest import SHARED_DATA, on_rank_zero  # noqa: E402
from sparsewire._lib.atomic import atomic_write  # noqa: E402

CORA = SHARED_DATA / "gnn" / "cora.npz"
needs_cora = pytest.mark.skipif(not CORA.exists(), reason="../shared/data/gnn/cora.npz is not present")


def gcn_report(command, *args):
    status, out, err = command("gcn", *args, "--json")
    assert status == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@needs_cora
@pytest.mark.ranks(3)
def test_paper_settings_reach_eighty_percent_on_cora_at_three_ranks(command):
    report = gcn_report(command, str(CORA))
    assert report["test_accuracy"] >= 0.80, report["test_accuracy"]
    assert len(report["history"]) == 200 and {"epoch", "loss", "train_accuracy", "val_accuracy"} <= set(report["history"][0])
    assert report["bytes_per_epoch"] > 0 and report["seconds_per_epoch"] > 0


@needs_cora
@pytest.mark.ranks(1)
def test_float32_is_the_default_and_reaches_eighty_percent_on_cora_at_one_rank(command):
    report = gcn_report(command, str(CORA))
    assert report["dtype"] == "float32" and report["test_accuracy"] >= 0.80, report["test_accuracy"]


@pytest.mark.ranks(1, 3)
def test_gcn_command_on_a_graph_with_isolated_and_unlabelled_nodes(command, comm, rng, shared_tmp):
    n = 40
    adjacency = sp.random_array((n, n), density=0.06, rng=rng, format="csr")
    adjacency = sp.csr_array(((adjacency + adjacency.T) != 0).astype(float))
    adjacency.setdiag(0)
    adjacency.eliminate_zeros()
    adjacency = sp.lil_array(adjacency)
    adjacency[[7, 8], :] = 0
    adjacency[:, [7, 8]] = 0  # isolated nodes
    labels = rng.integers(0, 3, n)
    labels[[3, 30]] = -1
    labelled = np.flatnonzero(labels >= 0)
    features = rng.integers(0, 2, (n, 6))
    splits = labelled[:12], labelled[12:20], labelled[20:]
    on_rank_zero(comm, write_planetoid, shared_tmp / "g.npz", adjacency, features, labels, *splits)
    report = gcn_report(command, str(shared_tmp / "g.npz"), "--epochs", "20")
    assert len(report["history"]) == 20 and 0 <= report["test_accuracy"] <= 1
    assert all(np.isfinite(h["loss"]) for h in report["history"])


@pytest.mark.ranks(2)
def test_gcn_command_on_a_generated_graph_with_synthetic_features(command):
    args = ["rmat:8:4:1", "--features", "random:12", "--classes", "4", "--model", "sage", "--epochs", "5"]
    report = gcn_report(command, *args)
    assert report["model"] == "sage" and len(report["history"]) == 5


#: ``sparsewire gcn`` on the star graph below: ``--partition nnz``, 5 epochs.
STAR_OPTIONS = ["--features", "random:4", "--classes", "2", "--epochs", "5", "--partition", "nnz", "--dtype", "float64"]


@pytest.mark.ranks(4)
def test_gcn_with_a_rank_without_nodes_trains_as_on_one_rank(command, comm, shared_tmp, monkeypatch, capsys):
    """--partition nnz on a 40-node star (node 1 the hub) at P = 4 leaves a rank without rows (the normalisation
    used to fail there: "truth value of an array is ambiguous"); the losses equal those of the same command on rank 0
    alone (its world one process: ``MPI.COMM_SELF``)."""
    from mpi4py import MPI

    from sparsewire.comm import runtime

    n = 40
    star = shared_tmp / "star.mtx"
    edges = "".join(f"{i + 1} 1\n" for i in range(1, n))
    text = f"%%MatrixMarket matrix coordinate pattern symmetric\n{n} {n} {n - 1}\n{edges}"
    on_rank_zero(comm, star.write_text, text)
    together = [entry["loss"] for entry in gcn_report(command, str(star), *STAR_OPTIONS)["history"]]
    if comm.Get_rank() == 0:
        from sparsewire.cli import main

        monkeypatch.setattr(runtime, "world", lambda: MPI.COMM_SELF)
        capsys.readouterr()
        status = main(["gcn", str(star), *STAR_OPTIONS, "--json"])
        out, err = capsys.readouterr()
        assert status == 0, err[-3000:]
        alone = [entry["loss"] for entry in json.loads(out.strip().splitlines()[-1])["history"]]
        assert len(together) == 5
        np.testing.assert_allclose(together, alone, rtol=0, atol=1e-9)


@pytest.mark.ranks(1, 3)
@pytest.mark.parametrize("strategy", ["auto", "column"])
def test_gcn_model_gat_takes_pyg_example_settings_and_moves_the_planned_bytes(command, comm, strategy):
    report = gcn_report(command, "cora", "--model", "gat", "--epochs", "3", "--strategy", strategy)
    assert report["model"] == "gat" and report["heads"] == 8 and report["hidden"] == 8
    assert report["lr"] == 0.005 and report["dropout"] == 0.6
    plans = report["attention_plans"]
    assert sorted((plan["heads"], plan["channels"]) for plan in plans) == [(1, 7), (8, 8)]
    assert report["strategies"] == ["joint" if strategy == "auto" else strategy]
    planned = sum(plan["planned_bytes_forward"] + plan["planned_bytes_backward"] for plan in plans)
    # a training step's bytes, counted from MPI's receive statuses, against the plans' formula
    assert [entry["bytes"] for entry in report["history"]] == [planned] * 3
    assert (planned > 0) == (comm.Get_size() > 1)


@pytest.mark.ranks(2)
def test_gcn_model_gat_refuses_the_torch_transport(command):
    status, out, err = command("gcn", "cora", "--model", "gat", "--epochs", "1", "--transport", "torch")
    assert status != 0 and "attention layers run on the mpi transport" in err, err[-2000:]


@pytest.mark.ranks(1, 2, 3, 4)
def test_gcn_on_cora_leaves_its_losses_for_the_torchrun_jobs(command, comm):
    """``sparsewire gcn cora --epochs 4`` as ``mpiexec -n P`` runs it: the losses that tests/test_torchrun.py's job at
    this P must equal. Rank 0 leaves them in the folder the launcher names (``SPARSEWIRE_TEST_RESULTS``, where the
    suite started this job), so that the torchrun test need not start the same mpiexec run again."""
    report = gcn_report(command, "cora", "--epochs", "4")
    assert report["ranks"] == comm.Get_size() and [entry["epoch"] for entry in report["history"]] == [1, 2, 3, 4]
    folder = os.environ.get(RESULTS_VARIABLE)
    if folder and comm.Get_rank() == 0:
        with atomic_write(Path(folder) / gcn_cora_losses_name(comm.Get_size()), "w") as handle:
            json.dump([entry["loss"] for entry in report["history"]], handle)
