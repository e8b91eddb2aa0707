"""The transport registry: a transport defined in the tests alone (tests/exec/extra_transports.py)
is one class and one registration, and then runs like a built-in one; the registry refuses what
it cannot run."""

from __future__ import annotations

import json

import extra_transports  # noqa: F401 - registers the tests' transports
import pytest

from conftest import _seed, run_mpi
from sparsewire.errors import InputError
from sparsewire.exec.options import ExecOptions
from sparsewire.exec.transports import register_transport, transport_entry, transport_help, transport_names, transport_problem
from sparsewire.plan.modes import Mode


def test_the_registry_names_the_builtin_and_the_registered_transports():
    names = transport_names()
    assert names[:2] == ("mpi", "torch") and {"recording", "mpi-p2p-partitions", "torch-grouped"} <= set(names)
    assert "recording: MPI, every call recorded" in transport_help()
    assert (
        transport_problem("recording", "partitioned")
        == "the recording transport cannot run the partitioned mode (it runs bulk, overlap, pipelined, early); the partitioned "
        "mode needs MPI-4 partitioned messages: use transport 'mpi'"
    )
    assert transport_problem("pigeon", "bulk").startswith("unknown transport 'pigeon'; choose mpi or torch or recording")
    assert ExecOptions(transport="recording", mode="early").transport == "recording"
    with pytest.raises(InputError, match="recording transport cannot run the partitioned mode"):
        ExecOptions(transport="recording", mode="partitioned")
    with pytest.raises(InputError, match="registered already"):
        register_transport("recording", modes=("bulk",), summary="again", select=lambda mode, comm, device: None)
    with pytest.raises(InputError, match="letters, digits"):
        register_transport("no spaces", modes=("bulk",), summary="bad", select=lambda mode, comm, device: None)
    assert transport_entry("mpi").modes == frozenset(Mode)


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_transport_registered_in_the_tests_runs_every_mode_it_declares(ranks):
    completed = run_mpi(ranks, ["tests/exec/registry_driver.py", str(_seed())], timeout=300)
    assert completed.returncode == 0, completed.stdout + completed.stderr[-4000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["runs"] == 12
    for calls in report["calls"]:  # every rank's recorder saw the schedules' calls
        assert calls["post_receives"] > 0 and calls["start_sends"] > 0 and calls["wait_sends"] > 0
        assert calls["wait_any"] > 0  # the early mode completes receives one at a time
