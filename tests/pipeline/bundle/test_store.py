"""Bundles: atomic writes, hashes, lineage, schema checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.pipeline.bundle.store import (
    MANIFEST_SCHEMA,
    Bundle,
    BundleWriter,
    GraphSpec,
    Manifest,
    TokenizerSpec,
    sha256_file,
)
from specdec.pipeline.errors import BundleError, InputError


def _manifest() -> Manifest:
    graph = GraphSpec(file="target.onnx", architecture="llama", source="x", dtype="float32", num_layers=1,
                      num_kv_heads=1, head_dim=4, vocab_size=8, max_position_embeddings=32, inputs=[], outputs=[])
    return Manifest(graphs={"target": graph}, tokenizer=TokenizerSpec(vocab_size=8, eos_token_ids=[0]))


def _write(out: Path, content: bytes = b"graph", force: bool = False) -> Bundle:
    with BundleWriter(out, force=force) as writer:
        (writer.dir / "target.onnx").write_bytes(content)
        (writer.dir / "tokenizer").mkdir()
        (writer.dir / "tokenizer" / "tokenizer.json").write_text("{}")
        return writer.finish(_manifest(), stage="export", config={"a": 1}, inputs={"x": "y"})


def test_finish_records_hashes_and_lineage(tmp_path: Path) -> None:
    bundle = _write(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.manifest.files["target.onnx"].sha256 == sha256_file(tmp_path / "b" / "target.onnx")
    assert set(loaded.manifest.files) == {"target.onnx", "tokenizer/tokenizer.json"}
    assert loaded.stages() == ["export"]
    assert loaded.manifest.lineage[0].config == {"a": 1}
    assert loaded.manifest.schema_version == MANIFEST_SCHEMA
    assert bundle.manifest.fingerprint == loaded.manifest.fingerprint != ""
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary directory left behind"


def test_corrupt_file_is_named(tmp_path: Path) -> None:
    _write(tmp_path / "b")
    (tmp_path / "b" / "target.onnx").write_bytes(b"grapH")
    with pytest.raises(BundleError, match="'target.onnx' .* is corrupt"):
        Bundle.load(tmp_path / "b")


def test_missing_file_is_named(tmp_path: Path) -> None:
    _write(tmp_path / "b")
    (tmp_path / "b" / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(BundleError, match="missing 'tokenizer/tokenizer.json'"):
        Bundle.load(tmp_path / "b")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "b")
    manifest = tmp_path / "b" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["schema_version"] = MANIFEST_SCHEMA + 1
    manifest.write_text(json.dumps(data))
    with pytest.raises(BundleError, match="newer specdec"):
        Bundle.load(tmp_path / "b")


def test_unknown_manifest_key_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "b")
    manifest = tmp_path / "b" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["surprise"] = 1
    manifest.write_text(json.dumps(data))
    with pytest.raises(BundleError, match="surprise"):
        Bundle.load(tmp_path / "b")


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not exist"):
        Bundle.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="no manifest.json"):
        Bundle.load(tmp_path / "empty")


def test_existing_output_needs_force(tmp_path: Path) -> None:
    _write(tmp_path / "b", b"one")
    with pytest.raises(InputError, match="already exists.*--force"):
        _write(tmp_path / "b", b"two")
    _write(tmp_path / "b", b"two", force=True)
    assert (tmp_path / "b" / "target.onnx").read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


@pytest.mark.parametrize("failure", [RuntimeError("boom"), KeyboardInterrupt()])
def test_failure_leaves_nothing(tmp_path: Path, failure: BaseException) -> None:
    with pytest.raises(type(failure)), BundleWriter(tmp_path / "b") as writer:
        (writer.dir / "target.onnx").write_bytes(b"half")
        raise failure
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_previous_output(tmp_path: Path) -> None:
    _write(tmp_path / "b", b"old")
    with pytest.raises(RuntimeError), BundleWriter(tmp_path / "b", force=True) as writer:
        (writer.dir / "target.onnx").write_bytes(b"new")
        raise RuntimeError
    assert (tmp_path / "b" / "target.onnx").read_bytes() == b"old"


def test_output_inside_input_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "b")
    with pytest.raises(InputError, match="lies inside the input"):
        BundleWriter(tmp_path / "b" / "sub", sources=(tmp_path / "b",))
    with pytest.raises(InputError, match="is the input"):
        BundleWriter(tmp_path / "b", force=True, sources=(tmp_path / "b",))


def test_copy_from_copies_not_links(tmp_path: Path) -> None:
    source = _write(tmp_path / "a")
    with BundleWriter(tmp_path / "b") as writer:
        writer.copy_from(source)
        (writer.dir / "target.onnx").write_bytes(b"changed")
        writer.finish(source.manifest, stage="noop", config={}, inputs={})
    assert (tmp_path / "a" / "target.onnx").read_bytes() == b"graph"
    Bundle.load(tmp_path / "a")  # the input still verifies
    assert Bundle.load(tmp_path / "b").stages() == ["export", "noop"]


def test_manifest_errors_read_alike_on_host_and_device(tmp_path: Path) -> None:
    """One reader (records.manifest.read_manifest): the host's loader and the device runtime word errors alike."""
    from specdec.pipeline.engine.bundle_info import read_bundle

    _write(tmp_path / "b")
    manifest = tmp_path / "b" / "manifest.json"
    good = manifest.read_text()
    cases = [("{", "is not valid JSON"), ("[]", "has no schema_version"),
             ('{"schema_version": 1}', "'graphs': Field required"),
             (good.replace('"num_layers": 1', '"num_layers": "one"'),
              r"'graphs.target.num_layers': Input should be a valid int")]
    for text, message in cases:
        manifest.write_text(text)
        with pytest.raises(BundleError, match=message) as host:
            Bundle.load(tmp_path / "b")
        with pytest.raises(BundleError, match=message) as device:
            read_bundle(tmp_path / "b")
        assert host.value.one_line() == device.value.one_line()


def test_manifest_round_trips_byte_for_byte(tmp_path: Path) -> None:
    _write(tmp_path / "b")
    text = (tmp_path / "b" / "manifest.json").read_text()
    assert Bundle.load(tmp_path / "b").manifest.to_json() == text
    assert list(json.loads(text))[:4] == ["schema_version", "tool_version", "graphs", "tokenizer"]


def test_typed_sections_are_validated_alike_on_host_and_device(tmp_path: Path) -> None:
    from specdec.pipeline.engine.bundle_info import read_bundle

    _write(tmp_path / "b")
    raw = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert "plan" not in raw and raw["buckets"] is None  # schema 1's shape: no plan section until one is written
    raw["buckets"] = {"max_context": 64, "prefill_chunk": 8, "format": "onnx", "profile": "local-cpu",
                      "graphs": {"target": [{"q": "eight", "file": "t.onnx", "ort_file": None, "inputs": [],
                                             "outputs": []}]}}
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(BundleError, match=r"'buckets.graphs.target.0.q': Input should be a valid int"):
        Bundle.load(tmp_path / "b")
    with pytest.raises(BundleError, match=r"'buckets.graphs.target.0.q': Input should be a valid int"):
        read_bundle(tmp_path / "b")
