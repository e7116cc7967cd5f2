"""A feature draft (EAGLE-style) drives the engine: exact output, the features aligned, deep trees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from specdec.pipeline.draft.feature_model import FeatureDraft
from specdec.pipeline.engine.drafter import RoundPlan
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.runner import DynamicRunner
from specdec.pipeline.engine.stats import RoundStats
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.draft_spec import DraftKind


def _prompts(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=int(rng.integers(1, 14))).tolist() for _ in range(count)]


@pytest.mark.parametrize("vocab_step", [1, 3])
@pytest.mark.parametrize("drafter", ["model", "model+lookup"])
def test_greedy_speculative_equals_plain_and_hf(feature_factory, vocab_step: int, drafter: str) -> None:  # type: ignore[no-untyped-def]
    bundle = feature_factory(vocab_step=vocab_step)
    engine = Engine(bundle.path)
    assert engine.drafter is not None and engine.drafter.needs_features
    hf = AutoModelForCausalLM.from_pretrained(bundle.manifest.graphs["target"].source, dtype=torch.float32).eval()
    for prompt in _prompts(4, engine.vocab):
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=24, drafter=drafter))  # type: ignore[arg-type]
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=24, speculative=False))
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=0,
                              pad_token_id=0)[0, len(prompt):].tolist()
        assert spec.output_ids == plain.output_ids == ref
        assert spec.speculative_rounds and all(r.draft_calls >= 1 for r in spec.speculative_rounds)


def test_a_qwen3_target_takes_a_feature_draft(feature_factory) -> None:  # type: ignore[no-untyped-def]
    """q/k norms, a tied head and per-layer masks in the target; the draft's own layers are Llama's."""
    engine = Engine(feature_factory("qwen3", vocab_step=2).path)
    for prompt in _prompts(2, engine.vocab, seed=5):
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=16, drafter="model+lookup"))  # type: ignore[arg-type]
        assert spec.output_ids == engine.generate(prompt, DecodeConfig(max_new_tokens=16, speculative=False)).output_ids


@pytest.mark.parametrize("settings", [
    {"tree_budget": 6, "depth": 5, "width": 1, "exact_layout": True},  # a chain
    {"tree_budget": 24, "depth": 4, "width": 4},  # a tree
])
def test_an_agreeing_draft_drafts_deep_accepted_trees(feature_factory, settings: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    """The target itself in the feature format (its layers copied, fc passing the embedding on), on a
    confident target: every level after the first reads drafted features and drafted KV, and long
    paths are accepted."""
    engine = Engine(feature_factory(copy_target=True, head_scale=30.0).path)
    lengths, depths, calls = [], [], []
    for prompt in _prompts(4, engine.vocab, seed=2):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=30, speculative=False,
                                                     exact_layout=settings.get("exact_layout", False)))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=30, **settings))  # type: ignore[arg-type]
        assert spec.output_ids == plain.output_ids
        lengths += [r.accepted_len for r in spec.speculative_rounds]
        depths += [r.tree_depth for r in spec.speculative_rounds]
        calls += [r.draft_calls for r in spec.speculative_rounds]
    assert np.mean(lengths) > 2.0  # accepted tokens a round beyond the target's own
    assert max(depths) >= 3 and max(calls) >= 3  # several drafted levels, each one draft call


def test_a_reduced_vocabulary_proposes_only_its_ids(feature_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    bundle = feature_factory(copy_target=True, vocab_step=2)
    assert bundle.manifest.draft is not None and bundle.manifest.draft.kind is DraftKind.feature
    assert bundle.manifest.draft.vocab is not None and "draft_vocab.npy" in bundle.manifest.files
    engine = Engine(bundle.path)
    vocab = set(np.load(bundle.path / "draft_vocab.npy").tolist())
    assert vocab == set(range(0, engine.vocab, 2))
    drafter = engine.drafter
    assert drafter is not None
    proposed: list[int] = []
    draft = drafter.draft

    def recording(*args: Any, **kwargs: Any) -> Any:
        result = draft(*args, **kwargs)
        proposed.extend(result.tree.tokens[1:].tolist())
        return result

    monkeypatch.setattr(drafter, "draft", recording)
    accepted = []
    for prompt in _prompts(4, engine.vocab, seed=3):
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=24))
        assert spec.output_ids == engine.generate(prompt, DecodeConfig(max_new_tokens=24, speculative=False)).output_ids
        accepted += [r.accepted_len for r in spec.speculative_rounds]
    assert proposed and set(proposed) <= vocab
    assert np.mean(accepted) > 1.0  # the target's tokens inside the vocabulary are still proposed and accepted


class _EveryOtherRoundPlain:
    """A controller that decodes every second round plainly (a plain step feeds the draft its feature too)."""

    def __init__(self) -> None:
        self.rounds = 0

    def plan(self, plan: RoundPlan) -> RoundPlan | None:
        self.rounds += 1
        return None if self.rounds % 2 == 0 else plan

    def observe(self, stats: RoundStats) -> None:
        pass


def _hf_features(model: Any, tokens: list[int], layer: int) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    hook = model.model.layers[layer].register_forward_hook(lambda module, args, output: seen.append(
        output[0] if isinstance(output, tuple) else output))
    try:
        with torch.no_grad():
            model(torch.tensor([tokens]))
    finally:
        hook.remove()
    return seen[0][0]


@pytest.mark.parametrize("plain_rounds", [False, True])
def test_the_draft_cache_holds_rows_of_the_targets_features(feature_factory, plain_rounds: bool) -> None:  # type: ignore[no-untyped-def]
    """The alignment (feature_model.py): after a reply, the draft's cache of committed positions is
    what the draft computes teacher-forced — token x_t with the target's feature f_{t-1}, zeros at
    t = 0 — whichever rounds were speculative and which plain."""
    bundle = feature_factory()
    engine = Engine(bundle.path)
    draft_spec = bundle.manifest.draft
    assert draft_spec is not None and draft_spec.feature_layer is not None
    prompt = [5, 9, 3, 17, 2]
    controller = _EveryOtherRoundPlain() if plain_rounds else None
    reply = engine.generate(prompt, DecodeConfig(max_new_tokens=20), controller=controller)
    assert sum(r.kind == "plain" for r in reply.rounds) >= (3 if plain_rounds else 0)
    drafter = engine.drafter
    assert drafter is not None and isinstance(drafter.runner, DynamicRunner)
    committed = drafter.runner.length
    tokens = [*prompt, *reply.output_ids][:committed]
    assert committed >= len(prompt) + 5
    target = AutoModelForCausalLM.from_pretrained(bundle.manifest.graphs["target"].source,
                                                  dtype=torch.float32).eval()
    features = _hf_features(target, tokens, draft_spec.feature_layer)
    shifted = torch.cat([torch.zeros_like(features[:1]), features[:-1]])[None]
    draft = FeatureDraft.load(Path(bundle.manifest.graphs["draft"].source), target.get_input_embeddings().weight)
    cache: Any = DynamicCache()
    with torch.no_grad():
        draft(torch.tensor([tokens]), shifted, cache=cache)
    for layer, kv in enumerate(cache.layers):
        got_keys = drafter.runner.kv.layers[2 * layer][:, :, :committed]
        got_values = drafter.runner.kv.layers[2 * layer + 1][:, :, :committed]
        np.testing.assert_allclose(got_keys, kv.keys.numpy(), atol=2e-5)
        np.testing.assert_allclose(got_values, kv.values.numpy(), atol=2e-5)
