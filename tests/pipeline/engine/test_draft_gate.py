"""The draft's confidence gate (DecodeConfig.draft_min_prob): fewer rows and draft calls, the same output."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.model_drafter import raw_logprob
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind

CONFIDENT = {"head_scale": 30.0}  # tiny random models are nearly uniform: a gate would drop every node


def _prompts(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=int(rng.integers(2, 14))).tolist() for _ in range(count)]


def _totals(engine: Engine, prompts: list[list[int]], config: DecodeConfig) -> tuple[list[list[int]], float, float]:
    """The outputs, and the mean verified rows and draft calls a speculative round."""
    outputs, rows, calls, rounds = [], 0, 0, 0
    for prompt in prompts:
        reply = engine.generate(prompt, config)
        outputs.append(reply.output_ids)
        rows += sum(r.tree_size for r in reply.speculative_rounds)
        calls += sum(r.draft_calls for r in reply.speculative_rounds)
        rounds += len(reply.speculative_rounds)
    return outputs, rows / max(rounds, 1), calls / max(rounds, 1)


def test_raw_logprob_is_the_drafts_own_softmax() -> None:
    logits = np.array([[2.0, 1.0, 0.0, -1.0]], np.float32)
    got = raw_logprob(logits, np.array([[0, 2, -1]]), temperature=0.5)
    scaled = logits[0].astype(np.float64) / 0.5
    want = scaled - np.log(np.exp(scaled).sum())
    assert got[0, :2] == pytest.approx(want[[0, 2]]) and got[0, 2] == -np.inf


@pytest.mark.parametrize("draft", ["model", "feature"])
@pytest.mark.parametrize("drafter", [DrafterKind.model, DrafterKind.model_lookup])
@pytest.mark.parametrize("shape", [{"tree_budget": 6, "depth": 5, "width": 1, "exact_layout": True},
                                   {"tree_budget": 16, "depth": 4, "width": 3}])
def test_greedy_output_is_plain_output_under_any_gate(bundle_factory, feature_factory, draft: str,  # type: ignore[no-untyped-def]
                                                       drafter: DrafterKind, shape: dict[str, object]) -> None:
    bundle = (bundle_factory("llama", **CONFIDENT) if draft == "model"
              else feature_factory(copy_target=True, **CONFIDENT))
    engine = Engine(bundle.path)
    prompts = _prompts(4, engine.vocab, seed=3)
    layout = bool(shape.get("exact_layout", False))
    plain, _, _ = _totals(engine, prompts, DecodeConfig(max_new_tokens=24, speculative=False, exact_layout=layout))
    _, rows_off, calls_off = _totals(engine, prompts, DecodeConfig(max_new_tokens=24, drafter=drafter, **shape))  # type: ignore[arg-type]
    for gate in (0.2, 0.9, 0.999):
        config = DecodeConfig(max_new_tokens=24, drafter=drafter, draft_min_prob=gate, **shape)  # type: ignore[arg-type]
        outputs, rows, calls = _totals(engine, prompts, config)
        assert outputs == plain, gate
        assert rows <= rows_off + 1e-9 and calls <= calls_off + 1e-9, gate  # a round: fewer rows, fewer calls
    assert rows < rows_off and calls < calls_off  # 0.999 drops every node the draft is not sure of


def test_rounds_record_each_nodes_gate_value(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama", **CONFIDENT).path)
    config = DecodeConfig(max_new_tokens=24, tree_budget=12, depth=4, width=3, draft_min_prob=0.01)
    seen = 0
    for prompt in _prompts(3, engine.vocab, seed=4):
        for stats in engine.generate(prompt, config).speculative_rounds:
            assert len(stats.order_gates) == len(stats.order_parents) == len(stats.order_depths)
            assert all(math.log(0.01) <= g <= 0 for g in stats.order_gates)  # every proposed node passed
            for position, parent in enumerate(stats.order_parents):  # parents come first, one level up
                assert parent < position
                if parent >= 0:
                    assert stats.order_depths[parent] == stats.order_depths[position] - 1
                    assert stats.order_gates[position] <= stats.order_gates[parent] + 1e-12
            seen += len(stats.order_gates)
    assert seen > 0


def test_rrs_ignores_the_gate(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    """rrs reads the proposal distribution; a gate on the drawn tokens would bias it, so it is off there."""
    engine = Engine(bundle_factory("llama", **CONFIDENT).path)
    base = {"max_new_tokens": 20, "temperature": 0.8, "mode": "rrs", "seed": 7, "tree_budget": 8, "depth": 3,
            "width": 2}
    for prompt in _prompts(3, engine.vocab, seed=5):
        off = engine.generate(prompt, DecodeConfig(**base))  # type: ignore[arg-type]
        on = engine.generate(prompt, DecodeConfig(**base, draft_min_prob=0.6))  # type: ignore[arg-type]
        assert on.output_ids == off.output_ids
        assert [r.tree_size for r in on.rounds] == [r.tree_size for r in off.rounds]


def test_match_sampling_under_a_gate_reproduces_plain_sampling(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama", **CONFIDENT).path)
    config = {"max_new_tokens": 24, "temperature": 0.9, "seed": 3}
    for prompt in _prompts(3, engine.vocab, seed=6):
        spec = engine.generate(prompt, DecodeConfig(mode="match", draft_min_prob=0.3, **config))  # type: ignore[arg-type]
        plain = engine.generate(prompt, DecodeConfig(speculative=False, **config))  # type: ignore[arg-type]
        assert spec.output_ids == plain.output_ids


@pytest.mark.parametrize("value", [-0.1, 1.0, 2.0])
def test_a_gate_outside_zero_to_one_is_refused(value: float) -> None:
    with pytest.raises(InputError, match="draft_min_prob must be in"):
        DecodeConfig(draft_min_prob=value)
