"""Greedy speculative decoding equals plain greedy decoding and Hugging Face generate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.errors import BundleError
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.records.decode import DecodeConfig


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


# ---- every drafter: greedy output is the target's ----------------------------------------------

def _copying_prompts(engine: Engine, count: int, seed: int = 3) -> list[list[int]]:
    """Prompts that hold the target's own continuation of their start: prompt lookup finds copies."""
    prompts = []
    for start in _prompts(count, engine.vocab, seed):
        continuation = engine.generate(start, DecodeConfig(max_new_tokens=12, speculative=False)).output_ids
        prompts.append([*start, *continuation, *start])
    return prompts


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("drafter", ["lookup", "model+lookup"])
def test_greedy_output_is_plain_for_every_drafter(bundle_factory, arch: str, drafter: str) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory(arch).path)
    accepted = {"model": 0, "lookup": 0}
    for prompt in _copying_prompts(engine, 4):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=24, speculative=False))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=24, drafter=drafter))  # type: ignore[arg-type]
        assert spec.output_ids == plain.output_ids
        for source, counts in spec.by_source().items():
            accepted[source] += counts["accepted"]
    assert accepted["lookup"] > 0  # the copies were proposed and accepted
    assert (accepted["model"] > 0) == (drafter == "model+lookup")


@pytest.mark.parametrize("drafter", ["model", "lookup", "model+lookup"])
def test_exact_layout_keeps_chains_for_every_drafter(bundle_factory, drafter: str) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    for prompt in _copying_prompts(engine, 2, seed=5):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False, exact_layout=True))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20, exact_layout=True, drafter=drafter))  # type: ignore[arg-type]
        assert spec.output_ids == plain.output_ids
        for stats in spec.speculative_rounds:  # a chain: one node per depth, in depth order
            assert stats.order_depths == list(range(1, stats.tree_size))


def test_exact_layout_drafts_its_chain_to_the_budget(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    """A chain takes one child per level, so siblings outscoring its deeper nodes must not stop it short."""
    engine = Engine(bundle_factory("llama").path)
    settings = {"tree_budget": 7, "depth": 6, "width": 1}
    for prompt in _prompts(3, engine.vocab, seed=2):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=40, speculative=False, exact_layout=True))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=40, exact_layout=True, **settings))
        assert spec.output_ids == plain.output_ids
        sizes = [r.tree_size for r in spec.speculative_rounds]
        assert sizes and all(size <= 7 for size in sizes)
        assert sorted(sizes)[len(sizes) // 2] == 7, sizes  # most rounds verify the whole chain


def test_lookup_rounds_record_sources_and_slices(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    prompt = _copying_prompts(engine, 1, seed=8)[0]
    reply = engine.generate(prompt, DecodeConfig(max_new_tokens=30, drafter="model+lookup"))  # type: ignore[arg-type]
    spec = reply.speculative_rounds
    assert sum(r.accepted_len for r in reply.rounds) + 1 == len(reply.output_ids)
    stages = {s.stage for r in spec for s in r.slices}
    assert {"Lookup", "Draft_Generate", "Prune_Controller", "Target_Verify", "KV_Commit"} <= stages
    for r in spec:
        assert r.proposed_model + r.proposed_lookup >= r.tree_size - 1  # a merged node counts for both
        assert r.accepted_model + r.accepted_lookup >= r.accepted_len - 1
        assert len(r.order_depths) == r.tree_size - 1 and len(r.path_positions) == r.accepted_len - 1
        assert [s.stage for s in r.slices if s.stage in ("Draft_Generate", "Prune_Controller")][-1] == \
            "Prune_Controller"  # the final selection is the last PRUNE slice
    reply = engine.generate(prompt, DecodeConfig(max_new_tokens=30, drafter="lookup"))  # type: ignore[arg-type]
    assert all(r.draft_calls == 0 and r.proposed_model == 0 for r in reply.rounds)  # no draft model call
    assert reply.by_source()["lookup"]["proposed"] > 0


def test_rrs_with_lookup_is_reproducible(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    prompt = _copying_prompts(engine, 1, seed=9)[0]
    for drafter in ("lookup", "model+lookup"):
        config = DecodeConfig(max_new_tokens=20, temperature=0.9, mode="rrs", seed=4, drafter=drafter)  # type: ignore[arg-type]
        assert engine.generate(prompt, config).output_ids == engine.generate(prompt, config).output_ids


def test_target_only_bundle_speculates_with_lookup(pair_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    target, _ = pair_factory("llama")
    bundle = export_bundle(ExportConfig(target=str(target), output=tmp_path / "b"))
    export = bundle.manifest.reports.export
    assert set(bundle.manifest.graphs) == {"target"} and export is not None and "target-only" in str(export.draft)
    assert bundle.manifest.lineage[-1].config["target_only"] is True
    engine = Engine(bundle.path)
    assert engine.drafter is None
    prompt = _copying_prompts(engine, 1)[0]
    plain = engine.generate(prompt, DecodeConfig(max_new_tokens=16, speculative=False))
    spec = engine.generate(prompt, DecodeConfig(max_new_tokens=16, drafter="lookup"))  # type: ignore[arg-type]
    assert spec.output_ids == plain.output_ids and spec.speculative_rounds
    for drafter in ("model", "model+lookup"):
        with pytest.raises(BundleError, match="no draft graph.*drafter lookup"):
            engine.generate(prompt, DecodeConfig(max_new_tokens=16, drafter=drafter))  # type: ignore[arg-type]
