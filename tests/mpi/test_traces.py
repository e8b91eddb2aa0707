"""Summaries, traces and traffic maps of whole runs on every rank of one job (the checks live beside the tracing
tests, in tests/profile/*_checks.py): a planted imbalance in the summary; SpGEMM's and training's traces; the
measured traffic map equal to the plan's. Every traced mode on both transports runs in a job of its own
(tests/profile/test_tracing.py)."""

from __future__ import annotations

import gcn_trace_checks
import log_view_checks
import pytest
import spgemm_trace_checks
import traffic_checks


@pytest.mark.ranks(1, 3)
def test_a_planted_imbalance_shows_as_max_min_and_load_balance(comm):
    ranks = comm.Get_size()
    summary = comm.bcast(log_view_checks.check())
    local = next(row for row in summary["phases"] if row["phase"] == "local product")
    assert summary["multiplies"] == 5 and local["count"] == 5
    assert local["time_max"] >= 5 * log_view_checks.SLEEP  # the sleeping rank's five sleeps
    if ranks == 1:
        assert summary["load_balance_efficiency"] == 1.0 and local["max_min_ratio"] == 1.0
    else:
        assert local["max_min_ratio"] > 10, local
        assert abs(summary["load_balance_efficiency"] - 1 / ranks) < 0.1, summary["load_balance_efficiency"]
    assert 0 < summary["communication_efficiency"] <= 1 and summary["timer_seconds"] > 0 and summary["record_seconds"] > 0


@pytest.mark.ranks(1, 3, 4)
def test_spgemm_traces_are_valid_and_carry_the_bytes_mpi_delivered(comm, seed, shared_tmp):
    result = comm.bcast(spgemm_trace_checks.check(seed, str(shared_tmp)))
    assert result == "OK 4", result  # SUMMA and the three 1D strategies


@pytest.mark.parametrize(
    "model", [pytest.param("gcn", marks=pytest.mark.ranks(2)), pytest.param("sage", marks=pytest.mark.ranks(3))]
)
def test_training_traces_layers_propagations_and_the_planned_messages(comm, seed, shared_tmp, model):
    pytest.importorskip("torch")
    assert comm.bcast(gcn_trace_checks.check(seed, str(shared_tmp), model)) == "OK"


@pytest.mark.ranks(1, 3)
def test_the_measured_map_equals_the_plans_exactly(comm, seed):
    result = comm.bcast(traffic_checks.check(seed))
    assert int(result.split("OK ")[1].split()[0]) >= 30, result  # 7 strategies x 5 modes less refusals
