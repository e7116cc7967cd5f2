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
    compiled = bundle.manifest.reports.compile
    assert compiled is not None and set(compiled.max_abs_diff) == {"target", "draft"}
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
    compiled = bundle.manifest.reports.compile
    assert compiled is not None and compiled.max_abs_diff["draft"] < 1e-5
    ops = bundle.manifest.buckets.fused["draft"].ops
    assert ops["SimplifiedLayerNormalization"] >= 2 and ops["Concat"] >= 1


def test_the_npu_flavour_refuses_feature_drafts(feature_stages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsupportedModelError, match="cannot run a feature draft yet.*--target cpu"):
        compile_bundle(CompileConfig(output=tmp_path / "b", target=GraphFlavour.npu), feature_stages(("surgery",)))
    assert not (tmp_path / "b").exists()


def _external(path: Path) -> set[tuple[str, str, str]]:
    """(file, offset, length) of each initializer the graph at `path` keeps in external data."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    places = ({entry.key: entry.value for entry in tensor.external_data} for tensor in model.graph.initializer
              if tensor.data_location == onnx.TensorProto.EXTERNAL)
    return {(place["location"], place.get("offset", "0"), place["length"]) for place in places}


def test_the_fused_target_and_feature_draft_store_what_they_share_once(feature_stages, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The draft reads the target's embedding table: one copy in cpu/shared.weights, which both graphs reference
    (ONNX files by default, since ORT format cannot reference external data; an .ort of each says so)."""
    source = feature_stages(("surgery",))
    bundle = compile_bundle(CompileConfig(output=tmp_path / "b", target=GraphFlavour.cpu, max_context=128), source)
    table = bundle.manifest.buckets
    assert table is not None and table.format is OutputFormat.onnx
    assert table.weights == {"target": "cpu/shared.weights", "draft": "cpu/shared.weights"}
    assert "cpu/shared.weights" in bundle.runner_files()
    target, draft = (_external(bundle.path / table.fused[role].file) for role in ("target", "draft"))
    spec = source.manifest.graphs["target"]
    embedding_bytes = str(spec.vocab_size * bundle.manifest.draft_spec.hidden_size * 4)  # type: ignore[operator]
    assert any(length == embedding_bytes for _, _, length in target & draft)
    engine, prompt = Engine(bundle.path), [5, 6, 7]
    assert engine.generate(prompt, DecodeConfig(max_new_tokens=12)).output_ids == \
        engine.generate(prompt, DecodeConfig(max_new_tokens=12, speculative=False)).output_ids
    ort = compile_bundle(CompileConfig(output=tmp_path / "ort", target=GraphFlavour.cpu, max_context=128,
                                       format=OutputFormat.ort), source)
    assert ort.manifest.buckets is not None and not ort.manifest.buckets.weights
    assert not (ort.path / "cpu" / "shared.weights").exists()
    report = ort.manifest.reports.compile
    assert report is not None and any("each .ort file holds its own copy" in note for note in report.notes)
