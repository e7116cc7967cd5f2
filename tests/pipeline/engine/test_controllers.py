"""Adaptive controllers: each one acts as specified, and none changes what is accepted."""

from __future__ import annotations

import itertools

import pytest

from specdec.pipeline.engine.controllers import (
    BetaAdaptation,
    ControllerChain,
    HardFallback,
    Hysteresis,
    SensorDegrade,
    WidthController,
    build_chain,
    max_temperature_reader,
)
from specdec.pipeline.engine.drafter import RoundPlan
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.stats import RoundStats
from specdec.pipeline.records.decode import DecodeConfig

PLAN = RoundPlan(budget=16, depth=6, width=4)


def _round(accepted_len: int, depth: int = 4, kind: str = "speculative", size: int = 8) -> RoundStats:
    return RoundStats(index=0, kind=kind, tree_size=size, tree_depth=depth, accepted_len=accepted_len)


def test_beta_adaptation_follows_the_articles_rule() -> None:
    beta = BetaAdaptation(beta=0.3, target_len=3.5, eta=0.1, window=5, beta_min=0.1, beta_max=0.6)
    for _ in range(4):
        beta.observe(_round(2))
    assert beta.beta == 0.3 and not beta.events  # the window is not full yet
    beta.observe(_round(2))
    assert beta.beta == pytest.approx(0.3 * (1 + 0.1 * (3.5 / 2 - 1)))
    assert beta.events[-1]["action"] == "adjust" and beta.plan(PLAN).beta_base == beta.beta  # type: ignore[union-attr]
    for _ in range(200):  # long runs stay inside [beta_min, beta_max]
        beta.observe(_round(1))
    assert beta.beta == 0.6


def _timed(accepted_len: int, ms: float, kind: str = "speculative", size: int = 8) -> RoundStats:
    stats = _round(accepted_len, kind=kind, size=size)
    stats.wall_ns = int(ms * 1e6)
    return stats


def test_fallback_under_a_plan_compares_tokens_per_second_with_plain_steps() -> None:
    fallback = HardFallback(after=2, backoff_rounds=3, plain_step_ms=2.0, window=4)
    for accepted in (1, 1, 3, 2):  # misses in a row, but 7 tokens in 12 ms beat 2 ms plain steps
        fallback.observe(_timed(accepted, 3.0))
    assert fallback.plan(PLAN) == PLAN and not fallback.events
    for _ in range(10):  # lookup found nothing: the root alone, at a plain step's cost, is no evidence
        fallback.observe(_timed(1, 2.2, size=1))
    assert not fallback.events
    for accepted in (1, 2, 1, 1):  # 5 tokens in 12 ms: plain steps would have been faster
        fallback.observe(_timed(accepted, 3.0))
    assert fallback.events[-1]["action"] == "enter" and "plain steps 2 ms" in fallback.events[-1]["reason"]
    assert [fallback.plan(PLAN) for _ in range(3)] == [None, None, None]
    assert fallback.plan(PLAN) == PLAN  # retried; a full window again before the next judgement
    fallback.observe(_timed(1, 5.0))
    assert fallback.plan(PLAN) == PLAN


def test_fallback_follows_the_devices_pace_from_its_plain_steps() -> None:
    fallback = HardFallback(after=2, backoff_rounds=3, plain_step_ms=2.0, window=2)
    for _ in range(20):  # the device runs slower than when it was tuned
        fallback.observe(_timed(1, 4.0, kind="plain"))
    assert fallback.plain_step_ms is not None and fallback.plain_step_ms > 3.9
    fallback.observe(_timed(2, 6.0))
    fallback.observe(_timed(2, 6.0))  # 3 ms per token: slower than planned plain steps, faster than now
    assert not fallback.events


def test_a_chain_follows_the_plan_it_is_given() -> None:
    chain = build_chain({"enabled": ["fallback"], "targets": {}})
    assert chain is not None
    fallback = chain.controllers[0]
    assert isinstance(fallback, HardFallback) and fallback.plain_step_ms is None
    chain.follow_plan(1.4)
    assert fallback.plain_step_ms == 1.4
    planned = build_chain({"enabled": ["fallback"], "targets": {}, "plan_plain_step_ms": 1.2})
    assert planned is not None and planned.controllers[0].plain_step_ms == 1.2  # type: ignore[attr-defined]


def test_fallback_after_k_empty_rounds_then_retry() -> None:
    fallback = HardFallback(after=2, backoff_rounds=3)
    fallback.observe(_round(1))
    assert fallback.plan(PLAN) == PLAN
    fallback.observe(_round(1, depth=0, size=1))  # nothing proposed (a lookup miss): not a rejection
    assert fallback.plan(PLAN) == PLAN and not fallback.events
    fallback.observe(_round(1))
    assert fallback.events[-1]["action"] == "enter"
    assert [fallback.plan(PLAN) for _ in range(3)] == [None, None, None]
    assert fallback.events[-1]["action"] == "retry"
    assert fallback.plan(PLAN) == PLAN
    fallback.observe(_round(1))
    fallback.observe(_round(3))  # an accepted draft resets the count
    fallback.observe(_round(1))
    assert fallback.plan(PLAN) == PLAN


def test_width_controller_narrows_when_acceptance_is_low_and_widens_when_high() -> None:
    low = WidthController(band=(0.6, 0.75), period=2, max_width=16)
    for _ in range(2):
        low.observe(_round(1, depth=4))  # nothing accepted: alpha 0
    narrowed = low.plan(PLAN)
    assert narrowed is not None and narrowed.width < PLAN.width and narrowed.budget < PLAN.budget
    high = WidthController(band=(0.6, 0.75), period=2, max_width=16)
    for _ in range(2):
        high.observe(_round(5, depth=4))  # everything accepted: alpha 1
    widened = high.plan(PLAN)
    assert widened is not None and widened.width > PLAN.width
    inside = WidthController(band=(0.0, 1.0), period=1, max_width=16)
    inside.observe(_round(3))
    assert inside.plan(PLAN) == PLAN and not inside.events


def test_sensor_degrade_hysteresis() -> None:
    readings = iter([40.0, 52.0, 48.0, 56.0, 47.0, 44.0])
    thermal = SensorDegrade("thermal", lambda: next(readings), Hysteresis(50, 55, 45), "°C", min_interval_s=0)
    plans = [thermal.plan(PLAN) for _ in range(6)]
    assert plans[0] == PLAN
    assert plans[1] == RoundPlan(budget=8, depth=6, width=2)  # above 50: half the tree
    assert plans[2] == RoundPlan(budget=8, depth=6, width=2)  # 48: still degraded (no recovery above 45)
    assert plans[3] is None and plans[4] is None  # above 55: plain, and 47 does not recover
    assert plans[5] == PLAN  # below 45: back to full speculation
    assert [e["action"] for e in thermal.events] == ["degraded", "off", "normal"]


def test_temperature_reader_reads_millidegrees(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a").write_text("41500\n")
    (tmp_path / "b").write_text("52000\n")
    assert max_temperature_reader([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "missing")])() == 52.0
    assert max_temperature_reader([str(tmp_path / "missing")])() is None


def test_build_chain_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown controllers"):
        build_chain({"enabled": ["turbo"]})
    assert build_chain({"enabled": []}) is None


def _busy_chain() -> ControllerChain:
    """Every controller on, with settings that make each one act within a short reply."""
    temps = itertools.cycle([40.0, 52.0, 52.0, 56.0, 44.0, 40.0])
    return ControllerChain([
        HardFallback(after=1, backoff_rounds=2),
        BetaAdaptation(beta=0.3, target_len=3.5, eta=0.5, window=2, beta_min=0.05, beta_max=0.9),
        WidthController(band=(0.6, 0.75), period=2, max_width=8),
        SensorDegrade("thermal", lambda: next(temps), Hysteresis(50, 55, 45), "°C", min_interval_s=0),
    ])


@pytest.mark.parametrize("config", [
    {"max_new_tokens": 40},
    {"max_new_tokens": 40, "temperature": 0.9, "mode": "match", "seed": 3},
])
def test_controllers_never_change_the_output(bundle_factory, config) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    for prompt in ([5, 6, 7], [11, 12, 13, 14, 15]):
        plain = engine.generate(prompt, DecodeConfig(speculative=False, **config))
        chain = _busy_chain()
        adaptive = engine.generate(prompt, DecodeConfig(**config), controller=chain)
        assert adaptive.output_ids == plain.output_ids
        acted = {e["controller"] for r in adaptive.rounds for e in r.events}
        assert {"fallback", "thermal"} <= acted
        assert any(r.kind == "plain" for r in adaptive.rounds) and adaptive.speculative_rounds
