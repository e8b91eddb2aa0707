"""How ``auto`` ranks its candidates (sparsewire.plan.cost.preferred) and says why (StrategyChoice.reason)."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsewire.distributed.auto import StrategyChoice, candidate_strategies
from sparsewire.distributed.trial import faster_in_every_turn
from sparsewire.io.generators import from_spec
from sparsewire.partition import even_rows
from sparsewire.plan.cost import NEAR_TIE, plan_steps, preferred
from sparsewire.plan.plan import build_plan
from sparsewire.plan.stats import plan_stats, strategy_stats
from sparsewire.plan.strategies import EXECUTABLE_STRATEGIES, Strategy
from sparsewire.topology.model import Topology


@pytest.mark.parametrize(
    "candidates, expected",
    [
        ({"joint": (100.0, 50, 1), "joint-group": (99.0, 40, 2)}, "joint"),  # 1% apart: the fewer steps
        ({"joint": (100.0, 50, 1), "joint-group": (97.0, 40, 2)}, "joint-group"),  # 3% apart: the faster
        ({"joint": (100.0, 50, 1), "column": (100.5, 40, 1)}, "joint"),  # same steps: the faster
        ({"joint": (100.0, 50, 1), "column": (100.0, 40, 1)}, "column"),  # same time and steps: fewer bytes
        ({"a": (0.0, 0, 0), "b": (0.0, 0, 1)}, "a"),  # one rank: nothing sent
        ({"only": (5.0, 1, 3)}, "only"),
    ],
)
def test_near_ties_go_to_fewer_steps_then_less_time_then_fewer_bytes(candidates, expected):
    assert preferred(candidates) == expected


def test_the_preferred_candidate_is_near_the_least_and_none_near_it_has_fewer_steps(rng):
    for _ in range(200):
        n = int(rng.integers(1, 8))
        seconds = rng.uniform(1.0, 1.05, n) if rng.random() < 0.5 else rng.uniform(0.5, 2.0, n)
        candidates = {f"s{i}": (float(seconds[i]), int(rng.integers(0, 4)), int(rng.integers(0, 3))) for i in range(n)}
        pick = candidates[preferred(candidates)]
        least = min(s for s, _, _ in candidates.values())
        assert pick[0] <= least * (1 + NEAR_TIE)
        near = [c for c in candidates.values() if c[0] <= least * (1 + NEAR_TIE)]
        assert pick[2] == min(c[2] for c in near)
        assert pick[0] == min(c[0] for c in near if c[2] == pick[2])


def test_the_steps_counted_are_those_that_carry_a_message():
    matrix = from_spec("delaunay:400:1")
    rows = even_rows(matrix.shape[0], 4)
    topology = Topology.nodes(2)
    # joint sends in one step; joint-group relays through a proxy: a second step
    assert plan_steps(strategy_stats(matrix, rows, rows, Strategy.JOINT, 4, 8, topology)) == 1
    assert plan_steps(strategy_stats(matrix, rows, rows, Strategy.JOINT_GROUP, 4, 8, topology)) == 2
    summaries = [
        (np.array([0, 3]), np.array([1, 0]), np.array([2, 0]), 0, 0, 0, 0, False),
        (np.array([5]), np.array([0]), np.array([1]), 0, 0, 0, 0, False),
    ]
    assert plan_steps(plan_stats(summaries, 4, 8, Strategy.JOINT, 2)) == 2  # step 3 sends no row: not counted


def test_the_reason_names_the_near_tie_and_the_steps():
    candidates = {"joint": (9.4e-3, 2_000_000, 1), "joint-group": (9.3e-3, 1_900_000, 2)}
    choice = StrategyChoice(
        Strategy.JOINT, "auto", "net.json", {n: c[:2] for n, c in candidates.items()}, {n: c[2] for n, c in candidates.items()}
    )
    assert preferred(candidates) == "joint"
    reason = choice.reason()
    assert reason.startswith("auto chose joint: predicted within 2% of the least"), reason
    assert "1 step)" in reason and "joint-group (9300.00 us" in reason and "2 steps)" in reason, reason
    assert "near ties go to fewer steps" in reason
    least = StrategyChoice(Strategy.JOINT_GROUP, "auto", "net.json", choice.candidates, choice.steps)
    assert least.reason().startswith("auto chose joint-group: least predicted time"), least.reason()
    unrecorded = StrategyChoice(Strategy.JOINT, "auto", "net.json", choice.candidates)
    assert "steps not recorded" in unrecorded.reason()
    assert choice.candidate_lines() == [
        "candidates (predicted time / bytes / steps): joint-group 9300.00 us / 1.90 MB / 2, joint 9400.00 us / 2.00 MB / 1"
    ], choice.candidate_lines()
    assert unrecorded.candidate_lines()[0].startswith("candidates (predicted time / bytes): joint-group 9300.00 us")
    assert StrategyChoice(Strategy.JOINT, "joint", "net.json", choice.candidates).candidate_lines() == []


def test_the_reason_of_a_trial_names_every_timed_candidate_fastest_first():
    candidates = {"joint": (9.4e-3, 2_000_000), "joint-group": (8.3e-3, 1_900_000), "column": (20e-3, 3_000_000)}
    measured = {"joint-group": 10.1e-3, "joint": 8.5e-3}
    choice = StrategyChoice(Strategy.JOINT, "auto", "measured:net.json", candidates, {"joint": 1, "joint-group": 2}, measured)
    assert choice.reason() == (
        "auto chose joint: faster than joint-group, the model's choice, in every turn of a trial on this job of the 2 "
        "candidates predicted within 25% of the least under measured:net.json (median per multiply: joint 8.500 ms, "
        "joint-group 10.100 ms)"
    ), choice.reason()
    kept = StrategyChoice(Strategy.JOINT_GROUP, "auto", "measured:net.json", candidates, choice.steps, measured)
    assert kept.reason().startswith("auto chose joint-group: the model's choice, and none was faster in every turn")
    line = choice.candidate_lines()[0]
    assert "joint-group 8300.00 us / 1.90 MB / 2 / timed 10100.00 us" in line, line
    assert "joint 9400.00 us / 2.00 MB / 1 / timed 8500.00 us" in line, line
    assert line.endswith("column 20000.00 us / 3.00 MB"), line  # not timed: predicted beyond 25%


@pytest.mark.parametrize(
    "times, expected",
    [
        ({"p": [5.0, 5.0, 5.0, 5.0], "a": [4.0, 4.0, 4.0, 4.0]}, "a"),  # faster in every turn
        ({"p": [5.0, 5.0, 5.0, 5.0], "a": [1.0, 1.0, 1.0, 5.5]}, "p"),  # least median, but slower in one turn
        ({"p": [5.0, 5.0, 5.0, 5.0], "a": [1.0, 1.0, 1.0, 5.0]}, "p"),  # a tie in one turn is not faster
        ({"p": [5.0, 5.0], "a": [4.0, 4.5], "b": [3.0, 4.8]}, "b"),  # both beat it: the least median (3.9 < 4.25)
        ({"p": [5.0, 5.0]}, "p"),
    ],
)
def test_the_trial_keeps_the_models_choice_unless_another_is_faster_in_every_turn(times, expected):
    assert faster_in_every_turn(times, "p") == expected


def test_the_trial_choice_beats_the_prediction_in_every_turn_and_has_the_least_median_of_those_that_do(rng):
    for _ in range(300):
        turns, names = int(rng.integers(1, 6)), [f"s{i}" for i in range(int(rng.integers(1, 5)))]
        times = {name: list(rng.integers(1, 6, turns).astype(float)) for name in names}
        predicted = names[int(rng.integers(len(names)))]
        kept = faster_in_every_turn(times, predicted)
        beats = [n for n in names if n != predicted and all(t < p for t, p in zip(times[n], times[predicted]))]
        if not beats:
            assert kept == predicted
        else:
            assert kept in beats and np.median(times[kept]) == min(np.median(times[n]) for n in beats)


def test_two_level_strategies_are_candidates_only_where_a_group_holds_two_ranks(rng):
    two_level = {s for s in EXECUTABLE_STRATEGIES if s.hierarchical}
    assert two_level and two_level <= set(candidate_strategies(Topology.nodes(2), 4))
    assert two_level <= set(candidate_strategies(Topology.nodes(3), 4))  # groups of 3 and 1: one relays
    for topology in (Topology.nodes(1), None, Topology.flat()):
        alone = candidate_strategies(topology, 4)
        assert alone and not any(s.hierarchical for s in alone), alone
    # why: with a rank in each group, each two-level plan sends what its flat plan sends, then an empty relay step
    n = int(rng.integers(40, 90))
    a = sp.random_array((n, n), density=0.08, rng=rng, format="csr") + sp.eye_array(n, format="csr")
    part = even_rows(n, 4)
    for flat, relaying in (("column", "column-hier"), ("joint", "joint-hier"), ("joint", "joint-group")):
        plain, relayed = (build_plan(a, part, part, s, Topology.nodes(1)) for s in (flat, relaying))
        for p in range(4):
            (step,), (first, second) = plain.ranks[p].exchanges, relayed.ranks[p].exchanges
            for field in ("send_ranks", "recv_ranks", "send_counts", "recv_counts"):
                assert getattr(first, field).tolist() == getattr(step, field).tolist(), field
            assert len(second.send_ranks) == len(second.recv_ranks) == 0
