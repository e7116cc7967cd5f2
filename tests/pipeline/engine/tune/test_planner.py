"""The planner on synthetic cost curves and calibration rounds with a known optimum."""

from __future__ import annotations

import itertools

import pytest

from specdec.pipeline.engine.tune.planner import Calibration, CalibrationRound, CostCurve, plan_tree


def test_cost_curve_interpolates_and_extrapolates() -> None:
    curve = CostCurve(((1, 10.0), (4, 10.0), (8, 18.0)))
    assert curve(1) == 10.0
    assert curve(2) == 10.0
    assert curve(6) == pytest.approx(14.0)
    assert curve(16) == pytest.approx(34.0)  # last slope continues
    _intercept, slope, residual = curve.linear_fit()
    assert slope > 0 and residual > 0  # a knee is not a line: the fit says so


def chain_round(order_depths: tuple[int, ...], accepted_depth: int) -> CalibrationRound:
    """A round whose best-first order is `order_depths` and whose accepted path is the first node
    of each depth up to `accepted_depth`."""
    positions = []
    for depth in range(1, accepted_depth + 1):
        positions.append(order_depths.index(depth))
    return CalibrationRound(order_depths=order_depths, path_positions=tuple(positions),
                            path_ranks=(0,) * accepted_depth, draft_ms=(1.0,) * 8, prune_ms=(0.0,) * 8,
                            rest_ms=0.5)


def test_restricted_trees_accept_the_contained_prefix() -> None:
    r = chain_round((1, 1, 2, 2, 3, 3, 4), accepted_depth=3)  # path at positions 0, 2, 4
    assert r.accepted(budget=8, depth=8) == 3
    assert r.accepted(budget=3, depth=8) == 1  # positions 0, 1 kept
    assert r.accepted(budget=4, depth=8) == 2
    assert r.accepted(budget=8, depth=2) == 2
    assert r.accepted(budget=2, depth=1) == 1


def brute_force_best(calibration: Calibration, verify: CostCurve, plain: float) -> tuple[int, int, float]:
    best = (1, 0, 1.0)
    for budget, depth in itertools.product(range(2, calibration.max_budget + 1), range(1, calibration.max_depth + 1)):
        tokens = calibration.expected_tokens(budget, depth)
        speedup = tokens * plain / (calibration.draft_and_host_ms(depth) + verify(budget))
        if speedup > best[2]:
            best = (budget, depth, speedup)
    return best


@pytest.mark.parametrize("knee", [2, 4, 8])
def test_plan_matches_brute_force_on_a_known_curve(knee: int) -> None:
    rounds = tuple(chain_round((1, 1, 2, 2, 3, 3, 4, 4, 5, 5), accepted_depth=d) for d in (0, 1, 2, 3, 3, 4, 5, 2))
    calibration = Calibration("model", width=2, max_budget=11, max_depth=5, rounds=rounds)
    verify = CostCurve(((1, 10.0), (knee, 10.0), (knee + 8, 10.0 + 8 * 3.0)))
    plan = plan_tree([calibration], verify, plain_step_ms=10.5)
    budget, depth, speedup = brute_force_best(calibration, verify, 10.5)
    assert plan.choice.predicted_speedup == pytest.approx(speedup, rel=1e-3)
    assert (plan.choice.budget, plan.choice.depth) == (budget, depth)
    assert plan.choice.budget <= knee + 1  # nodes past the knee cost more than they bring


def test_plain_decoding_when_nothing_pays() -> None:
    rounds = tuple(chain_round((1, 2, 3), accepted_depth=0) for _ in range(5))  # nothing is ever accepted
    calibration = Calibration("model", width=1, max_budget=4, max_depth=3, rounds=rounds)
    plan = plan_tree([calibration], CostCurve(((1, 10.0), (4, 11.0))), plain_step_ms=10.0)
    assert not plan.choice.speculative
    assert plan.choice.predicted_speedup == 1.0
    assert plan.candidates and plan.candidates[0].predicted_speedup < 1.05


def test_cheaper_drafter_wins_at_equal_acceptance() -> None:
    rounds = tuple(chain_round((1, 2, 3), accepted_depth=2) for _ in range(4))
    model = Calibration("model", 1, 4, 3, rounds)
    free = Calibration("lookup", 1, 4, 3, tuple(
        CalibrationRound(r.order_depths, r.path_positions, r.path_ranks, (0.01,) * 3, (0.0,) * 3, 0.1) for r in rounds))
    plan = plan_tree([model, free], CostCurve(((1, 10.0), (4, 10.5))), plain_step_ms=10.0)
    assert plan.choice.drafter == "lookup"


def test_acceptance_profile_by_depth_and_rank() -> None:
    def with_ranks(ranks: tuple[int, ...]) -> CalibrationRound:
        return CalibrationRound((1, 1, 2, 2), tuple(range(len(ranks))), ranks, (1.0,), (0.0,), 0.0)

    calibration = Calibration("model", 2, 5, 2, (with_ranks((0, 0)), with_ranks((1,)), with_ranks(()),
                                                   with_ranks((0, 1))))
    profile = calibration.acceptance_profile(max_rank=2)
    assert profile[1] == [0.5, 0.25]  # of 4 roots: rank 0 accepted twice, rank 1 once
    assert profile[2] == [1 / 3, 1 / 3] or profile[2] == [0.3333, 0.3333]


def test_rounds_that_proposed_less_cost_a_smaller_verify() -> None:
    """Prompt lookup without a match verifies the root alone: the plan charges c(1), not c(budget)."""
    hit = CalibrationRound((1, 2, 3), (0, 1, 2), (0, 0, 0), (), (), 0.05)
    miss = CalibrationRound((), (), (), (), (), 0.05)
    lookup = Calibration("lookup", 1, 4, 3, (hit, miss, miss, miss), lookup_ngrams=(1, 3))
    assert [r.tree_size(4, 3) for r in lookup.rounds] == [4, 1, 1, 1]
    curve = CostCurve(((1, 10.0), (4, 16.0)))
    assert lookup.verify_ms(4, 3, curve) == (16.0 + 3 * 10.0) / 4
    assert lookup.verify_ms(4, 3, curve, min_rows=2) == (16.0 + 3 * 12.0) / 4  # the exact layout pads a lone root
    plan = plan_tree([lookup], curve, plain_step_ms=10.0)
    # 1 + 3/4 tokens per round for 0.05 + 11.5 ms: 1.52x, where charging every round c(4) would say 1.09x
    assert plan.choice.drafter == "lookup" and plan.choice.lookup_ngrams == [1, 3]
    assert plan.choice.predicted_speedup == pytest.approx(1.75 * 10.0 / 11.55, abs=1e-3)
