"""Greedy speculative decoding equals plain greedy decoding and Hugging Face generate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from specdec.pipeline.runtime.config import DecodeConfig
from specdec.pipeline.runtime.engine import Engine


def _prompts(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=int(rng.integers(1, 14))).tolist() for _ in range(count)]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_greedy_speculative_equals_plain_and_hf(bundle_factory, arch: str) -> None:  # type: ignore[no-untyped-def]
    bundle = bundle_factory(arch)
    engine = Engine(bundle.path)
    hf = AutoModelForCausalLM.from_pretrained(bundle.manifest.graphs["target"].source, dtype=torch.float32).eval()
    accepted = []
    for prompt in _prompts(6, engine.vocab):
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=24))
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=24, speculative=False))
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=0,
                              pad_token_id=0)[0, len(prompt):].tolist()
        assert spec.output_ids == plain.output_ids == ref
        accepted.append(spec.mean_accepted_len)
    assert np.mean(accepted) > 1.0  # the layer-dropped draft is accepted at times


@pytest.mark.parametrize("settings", [
    {"tree_budget": 2, "depth": 1, "width": 1},  # chain of one draft token
    {"tree_budget": 6, "depth": 5, "width": 1},  # a chain: gamma = 5
    {"tree_budget": 32, "depth": 3, "width": 8},  # wide and shallow
    {"tree_budget": 12, "depth": 8, "width": 2},
])
def test_tree_shapes_do_not_change_greedy_output(bundle_factory, settings: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    for prompt in _prompts(3, engine.vocab, seed=1):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20, **settings))
        assert spec.output_ids == plain.output_ids
        assert max(r.tree_size for r in spec.speculative_rounds) <= settings["tree_budget"]
        assert max(r.tree_depth for r in spec.speculative_rounds) <= settings["depth"]


def test_match_sampling_reproduces_plain_sampling(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    """Uniforms are indexed by output position, so match consumes exactly what plain sampling does."""
    engine = Engine(bundle_factory("llama").path)
    for seed, (temperature, top_k, top_p) in enumerate([(0.7, 0, 1.0), (1.0, 20, 1.0), (1.3, 0, 0.9)]):
        config = {"max_new_tokens": 24, "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
        spec = engine.generate([5, 6, 7], DecodeConfig(mode="match", **config))  # type: ignore[arg-type]
        plain = engine.generate([5, 6, 7], DecodeConfig(speculative=False, **config))  # type: ignore[arg-type]
        assert spec.output_ids == plain.output_ids


def test_seeded_runs_are_reproducible(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    config = DecodeConfig(max_new_tokens=20, temperature=0.9, mode="rrs", seed=11)  # type: ignore[arg-type]
    first = engine.generate([3, 4], config).output_ids
    assert engine.generate([3, 4], config).output_ids == first
    other = engine.generate([3, 4], DecodeConfig(max_new_tokens=20, temperature=0.9, mode="rrs", seed=12))  # type: ignore[arg-type]
    assert other.output_ids != first


def test_stops_at_eos_and_includes_it(bundle_factory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    plain = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=12, speculative=False))
    eos = plain.output_ids[4]
    engine.eos = {eos}
    for speculative in (True, False):
        reply = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=12, speculative=speculative))
        first = plain.output_ids.index(eos)
        assert reply.output_ids == plain.output_ids[: first + 1] and reply.stop_reason == "eos"


def test_statistics_are_recorded(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    reply = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=30))
    spec = reply.speculative_rounds
    assert spec and sum(r.accepted_len for r in reply.rounds) + 1 == len(reply.output_ids)
    stages = {s.stage for r in spec for s in r.slices}
    assert stages == {"Draft_Generate", "Prune_Controller", "Target_Verify", "Accept_Reject_Sample", "KV_Commit"}
    assert all(r.tree_size >= 2 and r.draft_calls >= 1 for r in spec)
    assert 0.0 <= reply.acceptance_rate <= 1.0 and reply.ttft_ns > 0
