"""quantize a feature-draft bundle: the target keeps its hidden_states output, the draft is scored
and calibrated on the float target's features, and the result decodes exactly."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.quantize import quantize_bundle
from specdec.pipeline.quantize.config import QuantizeConfig
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.settings.resolve import bundle_requirements


@pytest.mark.parametrize("step", ["w8a8", "nbits"])
def test_quantized_feature_bundles_keep_the_features_and_decode_exactly(feature_stages, step: str) -> None:  # type: ignore[no-untyped-def]
    bundle = feature_stages(("surgery", step))
    manifest = bundle.manifest
    assert "hidden_states" in [o.name for o in manifest.graphs["target"].outputs]
    assert "hidden_states" in [i.name for i in manifest.graphs["draft"].inputs]
    assert manifest.draft is not None and manifest.draft.is_feature and "draft_vocab.npy" in manifest.files
    quantized = manifest.quantization
    assert quantized is not None and set(quantized.graphs) == {"target", "draft"}
    assert "fc" in quantized.graphs["draft"].layers  # the draft's own input projection is quantized too
    report = dump(manifest.reports)["quantize"]
    draft = report["graphs"]["draft"]
    assert math.isfinite(draft["perplexity_before"]) and math.isfinite(draft["perplexity_after"])
    speculative = report["speculative"]
    assert speculative["exact"] and speculative["top1_agreement_before"] > 0.4  # the agreeing draft, scored fairly
    assert speculative["mean_accepted_len_after"] > 1.5
    engine = Engine(bundle.path)
    exact = bool(bundle_requirements(engine.info.quantization).get("exact_layout"))
    for prompt in ([5, 6, 7], [40, 2, 9, 11]):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=16, speculative=False, exact_layout=exact))
        assert engine.generate(prompt, DecodeConfig(max_new_tokens=16, exact_layout=exact)).output_ids == \
            plain.output_ids


def test_a_calibrated_method_reads_the_targets_features(feature_stages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """AWQ's statistics of the draft's layers come from running it on the float target's features."""
    config = QuantizeConfig.from_text(output=tmp_path / "b", format="nbits", method="awq", graphs=("draft",),
                                      calib_samples=8)
    bundle = quantize_bundle(config, feature_stages(("surgery",)))
    layers = bundle.manifest.quantization.graphs["draft"].layers
    searched = [layer for layer in layers.values() if layer.alpha is not None]
    assert searched and all(np.isfinite(layer.alpha) for layer in searched)  # type: ignore[arg-type]
    assert dump(bundle.manifest.reports)["quantize"]["speculative"]["exact"]


def test_a_feature_draft_reads_the_targets_quantized_table(feature_stages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With embeddings quantized, the draft's table (the target's own) gets the target's codes, not a draft's
    4 bits: the compiled bundle then stores them once for both graphs."""
    import onnx

    from specdec.pipeline.compile import CompileConfig, GraphFlavour, compile_bundle

    config = QuantizeConfig.from_text(output=tmp_path / "q", format="w8a8", quantize_embeddings=True)
    quantized = quantize_bundle(config, feature_stages(("surgery",)))
    graphs = quantized.manifest.quantization.graphs  # type: ignore[union-attr]
    target, draft = ([record.bits for record in graphs[role].embeddings.values()] for role in ("target", "draft"))
    assert target == draft == [8]
    compiled = compile_bundle(CompileConfig(output=tmp_path / "c", target=GraphFlavour.cpu, max_context=64), quantized)

    def places(role: str) -> dict[str, str]:
        model = onnx.load(str(compiled.path / "cpu" / f"{role}.onnx"), load_external_data=False)
        return {t.name: {e.key: e.value for e in t.external_data}["offset"] for t in model.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL}

    draft_graph = onnx.load(str(compiled.path / "cpu" / "draft.onnx"), load_external_data=False).graph
    gathers = [node for node in draft_graph.node if node.op_type == "GatherBlockQuantized"]
    assert gathers
    target_places, draft_places = places("target"), places("draft")
    assert draft_places[gathers[0].input[0]] in set(target_places.values())  # the codes, stored once
