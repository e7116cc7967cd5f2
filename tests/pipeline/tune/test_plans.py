"""The run-level prediction: the plan's decode speedup applied to the replies' decoding time only."""

from __future__ import annotations

from typing import Any

import pytest

from specdec.pipeline.tune.plans import run_prediction


def _reply(mode: str, ttft_ms: float, total_ms: float, new_tokens: int) -> dict[str, Any]:
    return {"type": "reply", "mode": mode, "ttft_ns": int(ttft_ms * 1e6), "total_ns": int(total_ms * 1e6),
            "new_tokens": new_tokens}


def test_prefill_dilutes_the_predicted_speedup() -> None:
    # plain: 60 ms prefill + 63 steps of 7 ms; speculative decodes twice as fast
    events = [_reply("plain", 60, 60 + 63 * 7, 64), _reply("speculative", 60, 60 + 63 * 3.5, 64)]
    predicted, decode_measured = run_prediction(2.0, events)
    assert predicted == pytest.approx((60 + 441) / (60 + 220.5))
    assert decode_measured == pytest.approx(2.0)


def test_without_a_decoding_phase_the_plan_stands() -> None:
    assert run_prediction(1.7, [_reply("plain", 5, 5, 1)]) == (1.7, None)
    assert run_prediction(1.7, []) == (1.7, None)


def test_a_gate_the_user_gives_is_pinned_and_a_free_one_is_calibrated_without(bundle_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from specdec.pipeline.engine.tune import measure
    from specdec.pipeline.records.decode import DecodeConfig
    from specdec.pipeline.settings.decode_options import DecodeOptions
    from specdec.pipeline.tune.plans import tune_request

    bundle = bundle_factory("llama")
    free = tune_request(bundle, DecodeOptions(), "local", [[5, 6, 7]])
    fixed = tune_request(bundle, DecodeOptions(draft_min_prob=0.2), "local", [[5, 6, 7]])
    assert free is not None and fixed is not None
    assert "draft_min_prob" not in free.pinned and "draft_min_prob" in fixed.pinned
    seen = []
    monkeypatch.setattr(measure, "tune", lambda engine, prompts, config, *args, **kwargs: seen.append(config))
    measure.run_request(None, free, DecodeConfig(draft_min_prob=0.3))  # type: ignore[arg-type]
    measure.run_request(None, fixed, DecodeConfig(draft_min_prob=0.2))  # type: ignore[arg-type]
    assert [c.draft_min_prob for c in seen] == [0.0, 0.2]  # an earlier plan's gate does not bias calibration
