"""The transport registry: a transport defined in the tests alone (tests/exec/extra_transports.py)
is one class and one registration, and then runs like a built-in one; the registry refuses what
it cannot run. The registered transport's runs under ``mpiexec`` are collective cases (tests/mpi/test_executor.py)."""

from __future__ import annotations

import extra_transports  # noqa: F401 - registers the tests' transports
import pytest

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
