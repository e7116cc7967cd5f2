"""records.manifest: what a compiled bundle's runtime opens, and the one reader's field checks."""

from __future__ import annotations

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
