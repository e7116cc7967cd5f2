"""records.manifest: what a compiled bundle's runtime opens, and the one reader's field checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.records.codec import RecordError, parse
from specdec.pipeline.records.manifest import BucketTable, BucketVariant, GraphSpec, OutputFormat


def _table(output_format: OutputFormat) -> BucketTable:
    def variant(q: int) -> BucketVariant:
        ort = f"buckets/target_q{q}_c64.ort" if output_format is not OutputFormat.onnx else None
        return BucketVariant(q, f"buckets/target_q{q}_c64.onnx", ort, [], [], context=64)

    return BucketTable(max_context=64, prefill_chunk=16, format=output_format, profile="local-cpu",
                       graphs={"target": [variant(1), variant(4)]}, weights={"target": "buckets/target.weights"})


@pytest.mark.parametrize("output_format", list(OutputFormat))
def test_runtime_files_are_the_ones_it_opens(output_format: OutputFormat) -> None:
    """`--format both` keeps the onnx variants and their shared weights in the bundle, but the runtime opens
    the .ort files, which carry their weights: the shared file is neither opened nor pushed."""
    table = _table(output_format)
    onnx_only = output_format is OutputFormat.onnx
    assert table.shared_weights("target") == ("buckets/target.weights" if onnx_only else None)
    assert ("buckets/target.weights" in table.files()) == onnx_only
    assert all(f.endswith(".onnx" if onnx_only else ".ort") for f in table.files() if "_q" in f)


def test_literal_fields_take_only_their_values() -> None:
    spec = {"file": "t.onnx", "architecture": "llama", "source": "x", "dtype": "float32", "num_layers": 1,
            "num_kv_heads": 1, "head_dim": 4, "vocab_size": 8, "max_position_embeddings": 32, "inputs": [],
            "outputs": []}
    assert parse(GraphSpec, spec).dtype == "float32"
    with pytest.raises(RecordError, match=r"'g.dtype': 'bfloat16' is not one of: float32, float16"):
        parse(GraphSpec, {**spec, "dtype": "bfloat16"}, "g")


def test_a_graph_records_its_source_format_and_older_bundles_load_without_it() -> None:
    from specdec.pipeline.records.codec import dump
    from specdec.pipeline.records.manifest import CheckpointFormat, SourceFormat

    spec = {"file": "t.onnx", "architecture": "llama", "source": "m.gguf", "dtype": "float32", "num_layers": 1,
            "num_kv_heads": 1, "head_dim": 4, "vocab_size": 8, "max_position_embeddings": 32, "inputs": [],
            "outputs": []}
    assert parse(GraphSpec, spec).source_format is None  # schema 5 and older: not recorded
    gguf = {"format": "gguf", "file_type": "MOSTLY_Q4_1", "tensor_types": {"Q4_1": 210, "F32": 61, "Q8_0": 1}}
    graph = parse(GraphSpec, {**spec, "source_format": gguf})
    assert graph.source_format == SourceFormat(CheckpointFormat.gguf, "MOSTLY_Q4_1", gguf["tensor_types"])
    assert graph.source_format.describe() == "GGUF MOSTLY_Q4_1 (210 Q4_1, 61 F32, 1 Q8_0 tensors)"
    assert dump(graph)["source_format"] == gguf
    assert dump(SourceFormat(CheckpointFormat.huggingface)) == {"format": "huggingface"}
    with pytest.raises(RecordError, match="'g.source_format.format'"):
        parse(GraphSpec, {**spec, "source_format": {"format": "safetensors"}}, "g")


def _manifest_file(root: Path, version: int, draft: dict[str, object] | None = None) -> Path:
    """A bundle directory holding only a manifest of `version` (a target, a draft and a tokenizer entry)."""
    import json

    def graph(role: str) -> dict[str, object]:
        return {"file": f"{role}.onnx", "architecture": "llama", "source": role, "dtype": "float32",
                "num_layers": 1, "num_kv_heads": 1, "head_dim": 4, "vocab_size": 8, "max_position_embeddings": 32,
                "inputs": [], "outputs": [], "source_format": {"format": "huggingface"}}

    raw: dict[str, object] = {"schema_version": version, "tool_version": "0.1.0",
                              "graphs": {"target": graph("target"), "draft": graph("draft")},
                              "tokenizer": {"vocab_size": 8, "eos_token_ids": [2]}}
    if draft is not None:
        raw["draft"] = draft
    root.mkdir()
    (root / "manifest.json").write_text(json.dumps(raw))
    return root


def test_a_schema_6_manifest_reads_as_a_model_draft_over_the_whole_vocabulary(tmp_path: Path) -> None:
    """Schema 7 added the `draft` record; a schema-6 bundle (GGUF sources, no record) reads with its defaults."""
    from specdec.pipeline.records.draft_spec import DraftKind
    from specdec.pipeline.records.manifest import MANIFEST_SCHEMA, read_manifest

    assert MANIFEST_SCHEMA == 7
    manifest = read_manifest(_manifest_file(tmp_path / "six", 6))
    assert manifest.schema_version == 6 and manifest.draft is None
    spec = manifest.draft_spec
    assert spec.kind is DraftKind.model and spec.vocab is None and spec.feature_layer is None
    assert manifest.graphs["target"].source_format is not None


def test_the_draft_vocabulary_file_is_under_the_path_policy(tmp_path: Path) -> None:
    from specdec.pipeline.errors import BundleError
    from specdec.pipeline.records.manifest import read_manifest

    record = {"kind": "feature", "feature_layer": 0, "hidden_size": 4, "vocab": {"file": "draft_vocab.npy", "size": 4}}
    manifest = read_manifest(_manifest_file(tmp_path / "seven", 7, record))
    assert ("draft.vocab.file", "draft_vocab.npy") in list(manifest.paths())
    escaping = {**record, "vocab": {"file": "../draft_vocab.npy", "size": 4}}
    with pytest.raises(BundleError, match=r"draft\.vocab\.file.*climbs out of the bundle"):
        read_manifest(_manifest_file(tmp_path / "out", 7, escaping))
