"""compile --target cpu of a feature-draft bundle: both fused graphs carry the features, and the
compiled bundle decodes exactly (float and w8a8) with long accepted paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.errors import UnsupportedModelError
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.settings.resolve import bundle_requirements


def _io_names(specs: list) -> list[str]:  # type: ignore[type-arg]
    return [t.name for t in specs if not t.name.startswith(("past_key_values", "present"))]


def _prompts(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=int(rng.integers(2, 12))).tolist() for _ in range(count)]


@pytest.mark.parametrize("stages", [("surgery", "cpu"), ("surgery", "w8a8", "cpu")])
def test_compiled_feature_bundles_decode_exactly(feature_stages, stages: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    bundle = feature_stages(stages)
    fused = bundle.manifest.buckets.fused
    assert {"logits", "hidden_states", "next_token"} <= set(_io_names(fused["target"].outputs))
    assert "hidden_states" in _io_names(fused["draft"].inputs)
    assert {"hidden_out", "cand_ids"} <= set(_io_names(fused["draft"].outputs))
    assert set(bundle.manifest.reports["compile"]["max_abs_diff"]) == {"target", "draft"}
    engine = Engine(bundle.path)
    assert isinstance(engine.target, FusedRunner) and engine.drafter is not None
    assert isinstance(engine.drafter.runner, FusedRunner) and engine.drafter.needs_features
    exact = bool(bundle_requirements(engine.info.quantization).get("exact_layout"))
    assert exact == ("w8a8" in stages)
    lengths = []
    for prompt in _prompts(3, engine.vocab):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=24, speculative=False, exact_layout=exact))
        for drafter in ("model", "model+lookup"):
            spec = engine.generate(prompt, DecodeConfig(max_new_tokens=24, drafter=drafter, exact_layout=exact))  # type: ignore[arg-type]
            assert spec.output_ids == plain.output_ids
            lengths += [r.accepted_len for r in spec.speculative_rounds]
    assert np.mean(lengths) > 1.5  # half the target's tokens are outside the draft's vocabulary


def test_match_sampling_on_the_compiled_feature_bundle_reproduces_plain_sampling(feature_stages) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(feature_stages(("surgery", "cpu")).path)
    for seed, temperature in enumerate((0.7, 1.0)):
        config = {"max_new_tokens": 20, "temperature": temperature, "seed": seed}
        spec = engine.generate([5, 6, 7], DecodeConfig(mode="match", **config))  # type: ignore[arg-type]
        assert spec.output_ids == engine.generate([5, 6, 7], DecodeConfig(speculative=False, **config)).output_ids  # type: ignore[arg-type]


def test_input_norms_fuse(feature_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A feature draft with RMS norms on its inputs: the fused draft matches its dynamic graph (compile validates)."""
    bundle = compile_bundle(CompileConfig(output=tmp_path / "b", target=GraphFlavour.cpu, format=OutputFormat.onnx,
                                          max_context=64), feature_factory(input_norms=True))
    assert bundle.manifest.reports["compile"]["max_abs_diff"]["draft"] < 1e-5
    ops = bundle.manifest.buckets.fused["draft"].ops
    assert ops["SimplifiedLayerNormalization"] >= 2 and ops["Concat"] >= 1


def test_the_npu_flavour_refuses_feature_drafts(feature_stages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsupportedModelError, match="cannot run a feature draft yet.*--target cpu"):
        compile_bundle(CompileConfig(output=tmp_path / "b", target=GraphFlavour.npu), feature_stages(("surgery",)))
    assert not (tmp_path / "b").exists()
