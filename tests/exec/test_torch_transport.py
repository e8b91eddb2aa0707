"""The torch.distributed transport (Gloo on CPU): a count mismatch caught at setup, a caller's own process group and
the command's refusal, each in a job of its own (torch.distributed's process group is the process's); the exact
products in every mode, the transposed, saved and deterministic plans, and the commands on the transport, are
collective cases in tests/mpi/test_executor.py, tests/mpi/test_torch_plans.py and tests/mpi/test_torch_command.py."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from conftest import _seed, run_mpi  # noqa: E402


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_count_mismatch_is_one_clear_error_on_every_rank_not_a_hang(ranks):
    completed = run_mpi(ranks, ["tests/exec/torch_driver.py", "mismatch", str(_seed())], timeout=60)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert f"OK mismatch on {ranks} ranks" in completed.stdout


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_process_group_the_caller_made_is_used_with_its_own_rank_order(ranks):
    completed = run_mpi(ranks, ["tests/exec/torch_driver.py", "own_group", str(_seed())], timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.strip() == f"OK own_group {ranks}"


def test_cli_refuses_the_partitioned_mode_on_torch_in_one_line():
    completed = run_mpi(
        2, ["-m", "sparsewire", "spmm", "stencil2d:8", "--transport", "torch", "--mode", "partitioned"], timeout=120
    )
    assert completed.returncode != 0
    errors = [line for line in completed.stderr.splitlines() if line.startswith("sparsewire: error:")]
    assert errors and "torch transport cannot run the partitioned mode" in errors[0], completed.stderr


@pytest.mark.parametrize("setting", ["abc", "0", "-3", "nan", "inf", "1e300"])
def test_a_bad_torch_timeout_setting_is_one_clear_error(monkeypatch, setting):
    """``nan`` and ``inf`` passed the check and then broke ``timedelta`` with a traceback."""
    from sparsewire.errors import InputError
    from sparsewire.exec.transports.torch_distributed import TIMEOUT_ENVIRONMENT_VARIABLE, _timeout

    monkeypatch.setenv(TIMEOUT_ENVIRONMENT_VARIABLE, setting)
    with pytest.raises(InputError, match=f"SPARSEWIRE_TORCH_TIMEOUT='{setting}' must be a positive, finite number"):
        _timeout()
    monkeypatch.setenv(TIMEOUT_ENVIRONMENT_VARIABLE, "12.5")
    assert _timeout().total_seconds() == 12.5
