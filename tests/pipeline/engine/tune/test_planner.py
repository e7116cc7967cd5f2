"""The planner on synthetic cost curves and calibration rounds with a known optimum."""

from __future__ import annotations

import dataclasses
import itertools
import math

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


def gated_chain(probabilities: tuple[float, ...], accepted_depth: int) -> CalibrationRound:
    """A chain whose node d has path probability `probabilities[d - 1]` under the draft."""
    depth = len(probabilities)
    return CalibrationRound(order_depths=tuple(range(1, depth + 1)), path_positions=tuple(range(accepted_depth)),
                            path_ranks=(0,) * accepted_depth, draft_ms=(1.0,) * depth, prune_ms=(0.0,) * depth,
                            rest_ms=0.5, order_parents=tuple(range(-1, depth - 1)),
                            order_gates=tuple(math.log(p) for p in probabilities))


def test_a_confidence_gate_replays_the_nodes_it_keeps() -> None:
    r = gated_chain((0.9, 0.5, 0.2, 0.05), accepted_depth=3)
    assert r.accepted(budget=8, depth=8) == 3 and r.tree_size(8, 8) == 5 and r.draft_levels(8) == 4
    assert r.accepted(8, 8, gate=0.3) == 2 and r.tree_size(8, 8, gate=0.3) == 3
    assert r.draft_levels(8, gate=0.3) == 3  # the root's call and the calls of the two kept nodes
    assert r.draft_levels(2, gate=0.3) == 2 and r.tree_size(2, 8, gate=0.3) == 2  # the depth and budget still cut
    assert r.tree_size(8, 8, gate=0.95) == 1 and r.draft_levels(8, gate=0.95) == 1  # the root decodes alone
    # a node whose parent the gate dropped goes with it, whatever its own value (a lookup node under it)
    lookup_below = dataclasses.replace(r, order_gates=(math.log(0.9), math.log(0.1), 0.0, 0.0))
    assert lookup_below.tree_size(8, 8, gate=0.3) == 2


def test_the_planner_picks_a_gate_where_doubtful_nodes_cost_more_than_they_bring() -> None:
    confident = gated_chain((0.95, 0.9, 0.85, 0.8), accepted_depth=4)
    doubtful = gated_chain((0.15, 0.05, 0.02, 0.01), accepted_depth=0)
    calibration = Calibration("model", 1, 5, 4, (confident, doubtful) * 4)
    assert calibration.gates[0] == 0.0 and len(calibration.gates) > 1
    verify = CostCurve(((1, 10.0), (5, 18.0)))
    plan = plan_tree([calibration], verify, plain_step_ms=10.0)
    assert plan.choice.draft_min_prob >= 0.2 and plan.choice.budget == 5 and plan.choice.depth == 4
    ungated = plan_tree([dataclasses.replace(calibration, fixed_gate=0.0)], verify, plain_step_ms=10.0)
    assert ungated.choice.draft_min_prob == 0 and plan.choice.predicted_speedup > ungated.choice.predicted_speedup
    # rounds that measured no probabilities offer no gate, and a fixed one is the only one replayed
    assert Calibration("lookup", 1, 5, 4, (chain_round((1, 2, 3, 4), 2),)).gates == (0.0,)
    assert dataclasses.replace(calibration, fixed_gate=0.1).gates == (0.1,)
