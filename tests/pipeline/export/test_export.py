"""`export_bundle` on tiny random-init checkpoints of every registered architecture."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.export import stage as export_stage
from specdec.pipeline.records.codec import dump

ARCHS = ["llama", "qwen2", "gpt2"]


@pytest.mark.parametrize("arch", ARCHS)
def test_export_writes_contract_and_validates(bundle_factory, arch: str) -> None:  # type: ignore[no-untyped-def]
    bundle: Bundle = bundle_factory(arch)
    manifest = Bundle.load(bundle.path).manifest
    assert set(manifest.graphs) == {"target", "draft"}
    target = manifest.graphs["target"]
    names = [t.name for t in target.inputs]
    assert names[:3] == ["input_ids", "position_ids", "attention_mask"]
    assert names[3:] == [f"past_key_values.{i}.{kv}" for i in range(target.num_layers) for kv in ("key", "value")]
    assert [t.name for t in target.outputs] == ["logits"] + [
        f"present.{i}.{kv}" for i in range(target.num_layers) for kv in ("key", "value")]
    mask = next(t for t in target.inputs if t.name == "attention_mask")
    assert mask.shape[:2] == [1, 1] and all(isinstance(d, str) for d in mask.shape[2:])
    assert manifest.graphs["draft"].num_layers < target.num_layers
    validation = dump(manifest.reports)["export"]["validation"]
    for role in ("target", "draft"):
        checks = {(c["case"], c["output"]): c["max_abs_diff"] for c in validation[role]["checks"]}
        assert set(checks) == {(case, out) for case in ("prefill", "tree", "decode") for out in ("logits", "present")}
        assert checks[("tree", "logits")] < 1e-4
    assert (bundle.path / "tokenizer" / "tokenizer.json").is_file()
    assert manifest.tokenizer.eos_token_ids == [0]
    assert manifest.lineage[0].stage == "export"
    assert any(key.startswith("target/") for key in manifest.lineage[0].inputs)


def test_qwen2_tied_embeddings_export(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    bundle: Bundle = bundle_factory("qwen2")
    assert bundle.manifest.graphs["target"].architecture == "qwen2"


def test_gqa_geometry_recorded(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    graph = bundle_factory("llama").manifest.graphs["target"]
    assert (graph.num_kv_heads, graph.head_dim) == (2, 16)  # 4 query heads share 2 KV heads


def test_validation_catches_a_wrong_graph(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Validation compares with an independent PyTorch run, so a graph from another model fails."""
    from specdec.pipeline.checkpoints.source import CheckpointSource
    from specdec.pipeline.errors import ValidationError
    from specdec.pipeline.export import checkpoint, validate

    target, _ = pair_factory("llama")
    other, _ = pair_factory("llama", seed=7)
    bundle = export_bundle(ExportConfig(target=str(other), draft=str(other), output=tmp_path / "b", validate=False))
    config, arch = checkpoint.load_config(CheckpointSource(str(target)), "target")
    model = checkpoint.load_model(CheckpointSource(str(target)), "target", config, "float32")
    checks = validate.validate_graph(model, bundle.path / "target.onnx", arch.geometry(config), arch, "float32", 300)
    with pytest.raises(ValidationError, match="differs from PyTorch"):
        validate.enforce(checks, "target.onnx")
    assert dump(bundle.manifest.reports)["export"]["validation"] == "skipped (--no-validate)"


@pytest.mark.slow
def test_float16_export(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    bundle = export_bundle(ExportConfig(target=str(target), draft=str(draft), output=tmp_path / "b",
                                        dtype=export_stage.DType.float16))
    assert bundle.manifest.graphs["target"].dtype == "float16"
    assert next(t for t in bundle.manifest.graphs["target"].inputs if t.name == "attention_mask").dtype == "float16"
