"""Tuning on a real (tiny) bundle: cost curve, calibration rounds, a plan, and applying it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.tune import measure
from specdec.pipeline.engine.tune.measure import (
    MIN_CONFIRMED,
    CalibrationSpec,
    TuneSettings,
    apply_choice,
    calibration_round,
    calibration_specs,
    confirm,
    tune,
)
from specdec.pipeline.engine.tune.planner import TreePlan
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind
from specdec.pipeline.records.plan import PlanChoice

SMALL = TuneSettings(widths=(1, 2), max_budget=8, max_depth=3, max_new_tokens=12, repeats=2,
                     drafters=(DrafterKind.model,))


def _prompts(vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(1, vocab, size=6).tolist() for _ in range(2)]


def test_tune_measures_and_plans(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    result = tune(engine, _prompts(engine.vocab), DecodeConfig(), SMALL)
    sizes = [n for n, _ in result.verify.points]
    assert sizes[0] == 1 and max(sizes) == 8 and all(ms > 0 for _, ms in result.verify.points)
    assert result.plain_step_ms > 0
    assert [c.width for c in result.calibrations] == [1, 2]
    rounds = [r for c in result.calibrations for r in c.rounds]
    assert rounds and all(len(r.order_depths) >= 1 and r.draft_ms for r in rounds)
    for r in rounds:  # the accepted path is a prefix of the best-first order, depth by depth
        assert all(r.order_depths[p] == d + 1 for d, p in enumerate(r.path_positions))
        assert r.accepted(budget=SMALL.max_budget, depth=SMALL.max_depth) == len(r.path_positions)
    choice = result.plan.choice
    assert choice.predicted_speedup >= 1.0  # a plan never predicts losing to plain decoding
    if choice.speculative:  # kept only after measuring faster than plain decoding
        assert result.confirmed_speedup is not None and result.confirmed_speedup >= MIN_CONFIRMED
    else:
        assert (all(c.predicted_speedup < 1.05 for c in result.plan.candidates)
                or any("not kept" in note for note in result.notes))
    as_dict = result.as_dict()
    assert as_dict["verify_cost"]["points"] and as_dict["calibration"][0]["acceptance_profile"]


def test_calibration_round_splits_draft_prune_and_rest(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    reply = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=10, tree_budget=8, depth=3, width=2))
    for stats in reply.speculative_rounds:
        r = calibration_round(stats)
        assert len(r.draft_ms) == len(r.prune_ms) == stats.draft_calls
        assert r.rest_ms >= 0
        assert sum(r.draft_ms) + sum(r.prune_ms) + r.rest_ms <= stats.wall_ns / 1e6 + 1e-6


def test_exact_layout_calibrates_chains(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    from specdec.pipeline.engine.tune.measure import run_request
    from specdec.pipeline.records.plan import TuneRequest

    engine = Engine(bundle_factory("llama").path)
    request = TuneRequest(prompts=_prompts(engine.vocab), device="test", max_budget=6, max_depth=4, max_new_tokens=10,
                          repeats=1)
    result = run_request(engine, request, DecodeConfig(exact_layout=True))
    assert [c.name for c in result.calibrations] == ["model/w1", "lookup(1-3)/w1", "model+lookup(1-3)/w1"]
    for calibration in result.calibrations:
        for r in calibration.rounds:
            assert list(r.order_depths) == list(range(1, len(r.order_depths) + 1))  # a chain


def _repeating_prompts(vocab: int) -> list[list[int]]:
    """Prompts that repeat themselves, so prompt lookup finds matches."""
    rng = np.random.default_rng(1)
    return [(rng.integers(1, vocab, size=5).tolist() * 3) for _ in range(2)]


def test_tune_calibrates_every_drafter_and_plans_across_them(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    settings = dataclasses.replace(SMALL, drafters=tuple(DrafterKind), lookup_widths=(1,), mixed_widths=(2,),
                                   lookup_ngrams=((1, 3), (2, 4)))
    result = tune(engine, _repeating_prompts(engine.vocab), DecodeConfig(), settings)
    names = [c.name for c in result.calibrations]
    assert names == ["model/w1", "model/w2", "lookup(1-3)/w1", "lookup(2-4)/w1", "model+lookup(1-3)/w2"]
    lookup = result.calibrations[2]
    assert lookup.rounds and all(not r.draft_ms for r in lookup.rounds)  # no model call
    # some rounds proposed nothing: the planner charges them a one-node verify, not the budget
    sizes = [r.tree_size(8, 3) for r in lookup.rounds]
    assert min(sizes) >= 1 and max(sizes) <= 8
    drafters = {c.drafter for c in result.plan.candidates}
    assert {"model", "lookup", "model+lookup"} <= drafters  # the best of each is reported
    choice = result.plan.choice
    assert choice.predicted_speedup >= 1.0
    if choice.drafter == "lookup":
        assert choice.lookup_ngrams in ([1, 3], [2, 4])


def test_target_only_bundles_calibrate_lookup(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    specs = calibration_specs(TuneSettings(), DecodeConfig(), has_draft=False)
    assert specs and {s.drafter for s in specs} == {DrafterKind.lookup}
    assert {s.lookup_ngrams for s in specs} == {(1, 3), (2, 4)}
    own = calibration_specs(TuneSettings(lookup_ngrams=()), DecodeConfig(lookup_min_ngram=2, lookup_max_ngram=5),
                            has_draft=True)
    assert {s.lookup_ngrams for s in own if s.drafter.uses_lookup} == {(2, 5)}
    assert CalibrationSpec(DrafterKind.lookup, 2, (2, 4)).config(DecodeConfig(), 12) == DecodeConfig(
        drafter=DrafterKind.lookup, tree_budget=12, width=2, lookup_min_ngram=2, lookup_max_ngram=4)


def test_apply_choice_sets_the_drafter_unless_pinned() -> None:
    base = DecodeConfig()
    tree = PlanChoice("lookup", budget=6, depth=5, width=1, expected_tokens=2.0, round_ms=1.0, predicted_speedup=1.4,
                      lookup_ngrams=[2, 4])
    applied = apply_choice(base, tree)
    assert (applied.drafter, applied.lookup_min_ngram, applied.lookup_max_ngram) == (DrafterKind.lookup, 2, 4)
    pinned = apply_choice(base, tree, frozenset({"drafter", "lookup_min_ngram"}))
    assert (pinned.drafter, pinned.lookup_min_ngram, pinned.lookup_max_ngram) == (DrafterKind.model, 1, 4)


def test_apply_choice_respects_pinned_fields() -> None:
    base = DecodeConfig(tree_budget=16, depth=6, width=4)
    tree = PlanChoice("model", budget=5, depth=3, width=2, expected_tokens=2.0, round_ms=1.0, predicted_speedup=1.3)
    applied = apply_choice(base, tree)
    assert (applied.tree_budget, applied.depth, applied.width, applied.speculative) == (5, 3, 2, True)
    pinned = apply_choice(base, tree, frozenset({"depth"}))
    assert (pinned.tree_budget, pinned.depth) == (5, 6)
    plain = dataclasses.replace(tree, budget=1)
    assert not apply_choice(base, plain).speculative
    assert apply_choice(base, plain, frozenset({"tree_budget"})).speculative  # the user asked for a tree


def _plan(*speedups: float) -> TreePlan:
    trees = [PlanChoice("model", budget=2 + i, depth=1 + i, width=1, expected_tokens=2.0, round_ms=1.0,
                        predicted_speedup=speedup) for i, speedup in enumerate(speedups)]
    return TreePlan(trees[0], plain_step_ms=1.0, candidates=trees)


def test_a_plan_that_measures_slower_than_plain_gives_way(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    measured = {2: 0.93, 3: 1.12, 4: 1.30}  # by budget: the model's favourite loses when measured
    monkeypatch.setattr(measure, "measured_speedup",
                        lambda engine, prompts, base, choice, repeats: measured[choice.budget])
    notes: list[str] = []
    plan, speedup = confirm(None, [], DecodeConfig(), _plan(1.6, 1.5, 1.4), TuneSettings(), notes)  # type: ignore[arg-type]
    assert plan.choice.budget == 3 and speedup == 1.12  # the first that measures faster, not the fastest
    assert "not kept" in notes[0] and "kept model 3/2/1" in notes[1]


def test_plain_decoding_when_no_candidate_measures_faster(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tried: list[int] = []

    def slower(engine, prompts, base, choice, repeats):  # type: ignore[no-untyped-def]
        tried.append(choice.budget)
        return 1.01  # within the noise margin: not a win

    monkeypatch.setattr(measure, "measured_speedup", slower)
    notes: list[str] = []
    plan, speedup = confirm(None, [], DecodeConfig(), _plan(1.6, 1.5, 1.4, 1.3), TuneSettings(confirm_tries=3),  # type: ignore[arg-type]
                            notes)
    assert not plan.choice.speculative and speedup is None and tried == [2, 3, 4]
    assert notes[-1].startswith("plain decoding planned")


def _measured_by_drafter(monkeypatch, speedups: dict[str, float]) -> list[str]:  # type: ignore[no-untyped-def]
    """measured_speedup replaced by `speedups[drafter]`; returns the drafters measured, in order."""
    tried: list[str] = []

    def rate(engine, prompts, base, choice, repeats):  # type: ignore[no-untyped-def]
        tried.append(choice.drafter)
        return speedups[choice.drafter]

    monkeypatch.setattr(measure, "measured_speedup", rate)
    return tried


def _rivals(lookup_predicted: float) -> TreePlan:
    mixed = PlanChoice("model+lookup", budget=3, depth=1, width=2, expected_tokens=2.0, round_ms=1.0,
                       predicted_speedup=1.25)
    runner_up = PlanChoice("model+lookup", budget=2, depth=1, width=2, expected_tokens=1.9, round_ms=1.0,
                           predicted_speedup=1.24)
    lookup = PlanChoice("lookup", budget=4, depth=3, width=1, expected_tokens=1.8, round_ms=1.0,
                        predicted_speedup=lookup_predicted)
    return TreePlan(mixed, plain_step_ms=1.0, candidates=[mixed, runner_up, lookup])


@pytest.mark.parametrize(("lookup_measured", "kept"), [(1.3, "lookup"), (1.1, "model+lookup")])
def test_another_drafter_predicted_close_behind_is_measured_and_the_faster_kept(  # type: ignore[no-untyped-def]
        monkeypatch, lookup_measured: float, kept: str) -> None:
    tried = _measured_by_drafter(monkeypatch, {"model+lookup": 1.2, "lookup": lookup_measured})
    notes: list[str] = []
    plan, speedup = confirm(None, [], DecodeConfig(), _rivals(1.2), TuneSettings(), notes)  # type: ignore[arg-type]
    assert tried == ["model+lookup", "lookup"]  # the same drafter's runner-up is no rival
    assert plan.choice.drafter == kept and speedup == max(1.2, lookup_measured)
    assert ("kept lookup 4/3/1" in notes[0]) == (kept == "lookup") and "1.20x" in notes[0]


def test_a_rival_predicted_far_behind_is_not_measured(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tried = _measured_by_drafter(monkeypatch, {"model+lookup": 1.2, "lookup": 1.2})
    plan, _ = confirm(None, [], DecodeConfig(), _rivals(1.1), TuneSettings(), [])  # type: ignore[arg-type]
    assert tried == ["model+lookup"] and plan.choice.drafter == "model+lookup"  # 1.1 < 0.9 x 1.25


def test_a_rival_already_measured_slower_than_plain_is_not_measured_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    lookup = PlanChoice("lookup", budget=4, depth=3, width=1, expected_tokens=1.8, round_ms=1.0, predicted_speedup=1.3)
    mixed = PlanChoice("model+lookup", budget=3, depth=1, width=2, expected_tokens=2.0, round_ms=1.0,
                       predicted_speedup=1.25, draft_min_prob=0.2)
    tried = _measured_by_drafter(monkeypatch, {"lookup": 0.9, "model+lookup": 1.1})
    notes: list[str] = []
    plan, speedup = confirm(None, [], DecodeConfig(), TreePlan(lookup, 1.0, [lookup, mixed]), TuneSettings(),  # type: ignore[arg-type]
                            notes)
    assert tried == ["lookup", "model+lookup"] and plan.choice is mixed and speedup == 1.1
    assert notes[-1] == "kept model+lookup 3/1/2, gate 0.2: it measured 1.10x plain decoding"


def test_measured_speedup_decodes_both_ways(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    choice = PlanChoice("model", budget=4, depth=3, width=1, expected_tokens=2.0, round_ms=1.0, predicted_speedup=1.5)
    speedup = measure.measured_speedup(engine, _prompts(engine.vocab), DecodeConfig(max_new_tokens=8), choice, 1)
    assert 0.05 < speedup < 20.0  # a ratio of two real, positive rates


def test_plain_passes_and_verify_rounds_interleave(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Drift between the plain step and the verify curve biases every prediction (their ratio):
    the two are timed pass by pass, and each keeps its own aggregate."""
    calls: list[str] = []

    def plain(engine, prompt, config):  # type: ignore[no-untyped-def]
        calls.append(f"plain {prompt[0]}")
        return 1_000_000 * prompt[0], 2  # ns, tokens

    def verify(engine, context, config, size, tree, rand):  # type: ignore[no-untyped-def]
        calls.append(f"verify {size}")
        return 1_000_000 * size * (len(calls) % 3 + 1)

    monkeypatch.setattr(measure, "plain_pass", plain)
    monkeypatch.setattr(measure, "prefill", lambda runner, ids: calls.append("prefill"))
    monkeypatch.setattr(measure, "_time_verify", verify)
    prompts = [[1], [2], [3]]
    engine = SimpleNamespace(target=None)
    plain_ms, curve = measure.measure_costs(engine, prompts, [5, 6], DecodeConfig(), [1, 2], repeats=2)  # type: ignore[arg-type]
    assert calls == ["plain 1", "prefill", "verify 1", "verify 2", "plain 2", "prefill", "verify 1", "verify 2",
                     "plain 3"]
    assert plain_ms == (1 + 2 + 3) / 6  # every prompt's tokens, prefill excluded
    calls.clear()
    measure.measure_costs(engine, prompts[:1], [5, 6], DecodeConfig(), [1], repeats=3)  # type: ignore[arg-type]
    assert calls == ["plain 1", "prefill", "verify 1", "verify 1", "verify 1"]  # the context is prefilled once
    assert [size for size, _ in curve.points] == [1, 2] and all(ms > 0 for _, ms in curve.points)


def test_measure_costs_times_a_real_bundle(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    prompts = _prompts(engine.vocab)
    plain_ms, curve = measure.measure_costs(engine, prompts, list(prompts[0]) * 2, DecodeConfig(max_new_tokens=6),
                                           [1, 3], repeats=3)
    assert plain_ms > 0 and [n for n, _ in curve.points] == [1, 3] and all(ms > 0 for _, ms in curve.points)


def test_apply_choice_sets_the_gate_unless_pinned() -> None:
    choice = PlanChoice("model", budget=5, depth=4, width=1, expected_tokens=1.5, round_ms=1.0, predicted_speedup=1.2,
                        draft_min_prob=0.3)
    assert apply_choice(DecodeConfig(), choice).draft_min_prob == 0.3
    assert apply_choice(DecodeConfig(draft_min_prob=0.1), choice, frozenset({"draft_min_prob"})).draft_min_prob == 0.1
    assert apply_choice(DecodeConfig(draft_min_prob=0.1), dataclasses.replace(choice, draft_min_prob=0.0)
                        ).draft_min_prob == 0.0  # a plan without a gate turns an earlier plan's off


def test_calibration_measures_draft_probabilities_and_the_plan_replays_gates(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    """Model calibrations run under a recording gate (they drop nothing a plan would keep) and record every
    node's probability, so the planner weighs gates; a gate the user fixed is the only one replayed."""
    from specdec.pipeline.engine.tune.planner import GATES

    engine = Engine(bundle_factory("llama", head_scale=30.0).path)
    spec = CalibrationSpec(DrafterKind.model, 1)
    assert spec.config(DecodeConfig(), 8).draft_min_prob == measure.RECORDING_GATE < min(g for g in GATES if g > 0)
    assert CalibrationSpec(DrafterKind.lookup, 1).config(DecodeConfig(), 8).draft_min_prob == 0
    settings = dataclasses.replace(SMALL, widths=(1,), confirm_repeats=0)
    result = tune(engine, _prompts(engine.vocab), DecodeConfig(), settings)
    calibration = result.calibrations[0]
    assert calibration.gates == GATES
    assert any(g < 0 for r in calibration.rounds for g in r.order_gates)
    gated = {c.draft_min_prob for c in result.plan.candidates}
    assert gated <= set(GATES)
    fixed = tune(engine, _prompts(engine.vocab), DecodeConfig(draft_min_prob=0.2), settings)
    assert fixed.calibrations[0].gates == (0.2,) and fixed.plan.choice.draft_min_prob in (0.0, 0.2)
