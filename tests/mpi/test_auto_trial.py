"""``auto``'s trial (sparsewire.distributed.trial): under a measured topology the plans predicted within 25% of the
least are timed on the job, and one faster than the model's choice in every turn replaces it; the times are each
multiply's slowest rank's; under assumed links, on one rank or with ``trial=False`` the prediction alone decides."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import sparsewire
from conftest import on_rank_zero, slow_link_topology
from sparsewire.distributed import trial
from sparsewire.distributed.trial import TRIAL_WITHIN, time_plans

pytestmark = pytest.mark.timeout(240)


def _matrix(comm, seed: int):
    rng = np.random.default_rng(seed)
    a = sp.random_array((120, 120), density=0.06, rng=rng, format="csr") + sp.eye_array(120, format="csr")
    a.data = rng.integers(-3, 4, a.nnz).astype(np.float64)
    return a, sparsewire.distribute(comm, a if comm.Get_rank() == 0 else None, partition="even")


@pytest.mark.ranks(4)
def test_auto_keeps_the_fastest_timed_of_the_near_candidates_and_it_multiplies_exactly(comm, shared_tmp, seed, monkeypatch):
    a, matrix = _matrix(comm, seed)
    rank = comm.Get_rank()
    record = shared_tmp / "net.json"
    on_rank_zero(comm, slow_link_topology, record, [0, 0, 1, 1])
    measured = sparsewire.parse_topology(str(record))
    b = np.random.default_rng(seed + 1).integers(-3, 4, (120, 4)).astype(np.float64)
    b_local = b[slice(*matrix.col_partition.range(rank))]
    with matrix.spmm_plan(4, topology=measured, options=sparsewire.ExecOptions(trial=False)) as predicted:
        candidates = predicted.choice.candidates
    least = min(seconds for seconds, _ in candidates.values())
    near = sorted(name for name, (seconds, _) in candidates.items() if seconds <= least * (1 + TRIAL_WITHIN))
    assert len(near) > 1, candidates  # the two-level plans send nearly the same bytes here
    model = predicted.rank_plan.strategy.value
    if sparsewire.Strategy(model).hierarchical:  # a relaying choice is timed beside the least flat plan too
        near = sorted({*near, _least_flat(candidates)})

    # planted: the timing says the plan the model ranks last of the timed ones is faster in every turn, and another
    # has the least median but loses one turn: the choice must follow the turns
    last = max(near, key=lambda name: (candidates[name][0], name))
    assert last != model
    planted = {name: [4e-3] * 4 for name in near}
    planted[last] = [3e-3] * 4
    others = [name for name in near if name not in (model, last)]
    if others:
        planted[others[0]] = [1e-3, 1e-3, 1e-3, 5e-3]
    calls = []

    def fake_time_plans(comm_, plans, k, dtype, options, **_):
        calls.append(sorted(plans))
        return {name: planted[name] for name in plans}

    monkeypatch.setattr(trial, "time_plans", fake_time_plans)
    with matrix.spmm_plan(4, topology=measured) as chosen:
        assert calls == [near], (calls, near)
        assert chosen.choice.measured == {name: float(np.median(times)) for name, times in planted.items()}
        assert chosen.rank_plan.strategy.value == last, (planted, model)
        assert chosen.choice.reason().startswith(f"auto chose {last}: faster than {model}, the model's choice, in every turn")
        whole = comm.gather(chosen.multiply(b_local))
        chosen.save(shared_tmp / "plan.npz")
    with sparsewire.SpmmPlan.load(shared_tmp / "plan.npz", matrix) as loaded:
        assert loaded.choice == chosen.choice  # the times travel with the plan
    if rank == 0:
        assert np.array_equal(np.vstack(whole), a @ b)
    monkeypatch.undo()

    # the real trial: every near candidate timed, the same on every rank
    with matrix.spmm_plan(4, topology=measured) as timed:
        times = timed.choice.measured
        assert sorted(times) == near and all(seconds > 0 for seconds in times.values()), times
        assert timed.rank_plan.strategy.value in near
        assert comm.allgather((times, timed.rank_plan.strategy)) == [(times, timed.rank_plan.strategy)] * comm.Get_size()
        whole = comm.gather(timed.multiply(b_local))
    if rank == 0:
        assert np.array_equal(np.vstack(whole), a @ b)

    # no trial: assumed links (a cluster this job does not run on), or asked not to
    for topology, options in ((sparsewire.Topology.nodes(2), None), (measured, sparsewire.ExecOptions(trial=False))):
        with matrix.spmm_plan(4, topology=topology, options=options) as plan:
            assert plan.choice.measured == {}, topology.name


@pytest.mark.ranks(2)
def test_a_plans_time_is_its_slowest_ranks(comm, seed, monkeypatch):
    _, matrix = _matrix(comm, seed)
    plans = {}
    for strategy in ("column", "joint"):
        with matrix.spmm_plan(3, strategy=strategy, mode="bulk") as plan:
            plans[strategy] = (plan.rank_plan, plan.options)
    delay = 0.05
    real = trial.SpmmExecutor

    calls = {"column": 0, "joint": 0}

    class Slowed(real):  # planted: only rank 1's column multiplies wait
        def multiply(self, b_local, out=None):
            calls[self.plan.strategy.value] += 1
            if comm.Get_rank() == 1 and self.plan.strategy.value == "column":
                import time

                time.sleep(delay)
            return super().multiply(b_local, out)

    monkeypatch.setattr(trial, "SpmmExecutor", Slowed)
    times = time_plans(comm, {name: rank_plan for name, (rank_plan, _) in plans.items()}, 3, np.dtype(np.float64),
                       plans["joint"][1], turns=3, repeat=2, turn_seconds=0.12, most=9)  # fmt: skip
    assert len(times["column"]) == len(times["joint"]) == 3
    # a turn holds about 0.12 s of a plan's multiplies, 2 to 9: column's (over 0.05 s) 2 or 3, joint's (well under) 9,
    # each turn after an untimed multiply; all after an untimed multiply and a timed one
    assert calls["joint"] == 2 + 3 * (1 + 9) and calls["column"] in (2 + 3 * (1 + 2), 2 + 3 * (1 + 3)), calls
    assert min(times["column"]) >= delay, times  # on rank 0 too: the slowest rank's time
    assert all(j < c for j, c in zip(times["joint"], times["column"])), times
    assert comm.allgather(times) == [times] * comm.Get_size()


def _least_flat(candidates: dict) -> str:
    """The candidate of the least predicted time among those that do not relay."""
    return min((name for name in candidates if not sparsewire.Strategy(name).hierarchical), key=lambda n: candidates[n][0])


def _shared_columns(comm):
    """A matrix whose rows on one node all read the same columns of the other node (a dense block each way): a
    two-level plan moves those B rows over the slow link once per node, a flat plan once per rank, about twice."""
    n = 120
    dense = np.zeros((n, n))
    dense[:60, 60:90] = 1.0
    dense[60:, 0:30] = 1.0
    a = sp.csr_array(dense + np.eye(n))
    return a, sparsewire.distribute(comm, a if comm.Get_rank() == 0 else None, partition="even")


@pytest.mark.ranks(4)
def test_a_relaying_choice_is_timed_beside_the_least_flat_plan_even_outside_the_window(comm, shared_tmp, seed, monkeypatch):
    a, matrix = _shared_columns(comm)
    rank = comm.Get_rank()
    measured = sparsewire.parse_topology(str(on_rank_zero(comm, slow_link_topology, shared_tmp / "net.json", [0, 0, 1, 1])))
    with matrix.spmm_plan(4, topology=measured, options=sparsewire.ExecOptions(trial=False)) as predicted:
        candidates, model = predicted.choice.candidates, predicted.rank_plan.strategy
    least = min(seconds for seconds, _ in candidates.values())
    flat = _least_flat(candidates)
    assert model.hierarchical and candidates[flat][0] > least * (1 + TRIAL_WITHIN), candidates
    near = sorted(name for name, (seconds, _) in candidates.items() if seconds <= least * (1 + TRIAL_WITHIN))
    b = np.random.default_rng(seed).integers(-3, 4, (120, 4)).astype(np.float64)
    b_local = b[slice(*matrix.col_partition.range(rank))]
    for flat_seconds, kept in ((1e-3, flat), (5e-3, model.value)):  # planted: the flat plan faster, then slower, every turn
        calls = []

        def fake_time_plans(comm_, plans, k, dtype, options, calls=calls, flat_seconds=flat_seconds, **_):
            calls.append(sorted(plans))
            return {name: [flat_seconds if name == flat else 4e-3] * 4 for name in plans}

        monkeypatch.setattr(trial, "time_plans", fake_time_plans)
        with matrix.spmm_plan(4, topology=measured) as chosen:
            assert calls == [sorted([*near, flat])], (calls, near, flat)
            assert chosen.rank_plan.strategy.value == kept, (flat_seconds, chosen.choice.measured)
            assert f"and {flat}, the least predicted that does not relay" in chosen.choice.reason(), chosen.choice.reason()
            whole = comm.gather(chosen.multiply(b_local))
        if rank == 0:
            assert np.array_equal(np.vstack(whole), a @ b)
        monkeypatch.undo()
