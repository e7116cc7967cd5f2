"""`specdec surgery` on exported bundles: in-graph ops, unchanged outputs, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.errors import BundleError
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle


@pytest.fixture(scope="module")
def surgered(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    source = bundle_factory("llama")
    return source, surgery_bundle(SurgeryConfig(output=tmp_path_factory.mktemp("s") / "b"), source)


def test_ops_are_model_local_functions(surgered) -> None:  # type: ignore[no-untyped-def]
    _, bundle = surgered
    for role, op in (("draft", "DynamicTreePrune"), ("target", "BlockSparseVerify")):
        model = onnx.load(str(bundle.path / f"{role}.onnx"))
        onnx.checker.check_model(model, full_check=True)
        assert [n.op_type for n in model.graph.node if n.domain == "com.endpoint.ai"] == [op]
        assert op in {f.name for f in model.functions}
        assert any(o.domain == "com.endpoint.ai" and o.version == 1 for o in model.opset_import)
        ort.InferenceSession(str(bundle.path / f"{role}.onnx"))  # no registration, no custom-op library
    record = dump(bundle.manifest.custom_ops)
    assert record["domain"] == "com.endpoint.ai" and record["graphs"]["target"]["outputs"] == [
        "accepted", "accepted_len", "next_token"]
    assert bundle.stages() == ["export", "surgery"]
    Bundle.load(surgered[0].path)  # the input bundle is untouched


@pytest.mark.parametrize("config", [
    {"max_new_tokens": 24},
    {"max_new_tokens": 24, "temperature": 0.8, "mode": "match", "seed": 4},
    {"max_new_tokens": 24, "temperature": 0.8, "mode": "rrs", "seed": 4, "top_k": 30},
    {"max_new_tokens": 24, "temperature": 1.1, "top_p": 0.9, "seed": 2, "speculative": False},
])
def test_outputs_equal_before_and_after(surgered, config) -> None:  # type: ignore[no-untyped-def]
    before, after = (Engine(b.path) for b in surgered)
    assert after.target.has_verify and after.drafter.runner.has_prune
    for prompt in ([5, 6, 7], [1], list(range(3, 15))):
        a = before.generate(prompt, DecodeConfig(**config))
        b = after.generate(prompt, DecodeConfig(**config))
        assert a.output_ids == b.output_ids


def test_logits_stay_in_the_graph(surgered) -> None:  # type: ignore[no-untyped-def]
    before, after = (Engine(b.path) for b in surgered)
    vocab = before.vocab
    a = before.generate([5, 6, 7], DecodeConfig(max_new_tokens=20))
    b = after.generate([5, 6, 7], DecodeConfig(max_new_tokens=20))
    for ra, rb in zip(a.speculative_rounds, b.speculative_rounds, strict=True):
        # the target's [n, vocab] logits and the draft's logits no longer leave onnxruntime
        assert ra.bytes_out - rb.bytes_out >= ra.tree_size * vocab * 4


def test_second_surgery_is_refused(surgered, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BundleError, match="already has the custom ops"):
        surgery_bundle(SurgeryConfig(output=tmp_path / "again"), surgered[1])
    assert not (tmp_path / "again").exists()


def test_graph_without_logits_is_refused(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "b"
    shutil.copytree(bundle_factory("llama").path, copy)
    model = onnx.load(str(copy / "draft.onnx"))
    next(o for o in model.graph.output if o.name == "logits").name = "scores"
    for node in model.graph.node:
        node.output[:] = ["scores" if o == "logits" else o for o in node.output]
    onnx.save(model, str(copy / "draft.onnx"))
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["files"]["draft.onnx"]  # keep the loader's hash check out of the way
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="draft.onnx does not qualify for DynamicTreePrune: it has no 'logits'"):
        surgery_bundle(SurgeryConfig(output=tmp_path / "out"), Bundle.load(copy))
    assert not (tmp_path / "out").exists()


def test_newer_schema_is_refused(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "b"
    shutil.copytree(bundle_factory("llama").path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["schema_version"] = 99
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="newer specdec"):
        surgery_bundle(SurgeryConfig(output=tmp_path / "out"), Bundle.load(copy))


def test_survives_onnxsim_and_ort_format(surgered, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import onnxsim

    from specdec.pipeline.graphs.files import external_files

    _, bundle = surgered
    original = ort.InferenceSession(str(bundle.path / "target.onnx"))
    simplified, ok = onnxsim.simplify(onnx.load(str(bundle.path / "target.onnx")))
    assert ok and "BlockSparseVerify" in {f.name for f in simplified.functions}
    for name in ("target.onnx", *external_files(bundle.path / "target.onnx")):  # shared.data: the pair's tensors
        shutil.copy(bundle.path / name, tmp_path / name)
    subprocess.run([sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(tmp_path),
                    "--optimization_style", "Fixed"], check=True, capture_output=True)
    sessions = [ort.InferenceSession(simplified.SerializeToString()),
                ort.InferenceSession(str(tmp_path / "target.ort"))]
    rng = np.random.default_rng(0)
    n, past = 5, 3
    feeds = {i.name: np.zeros([1, i.shape[1], past, i.shape[3]], np.float32) for i in original.get_inputs()
             if i.name.startswith("past_key_values")}
    feeds.update({"input_ids": rng.integers(0, 300, (1, n)), "position_ids": np.arange(past, past + n)[None],
                  "attention_mask": np.zeros((1, 1, n, past + n), np.float32),
                  "tree_parent": np.array([-1, 0, 1, 2, 3]), "tree_depth": np.arange(n), "uniforms": rng.random((n, 1)),
                  "temperature": np.array(0.0, np.float32), "mode": np.array(0), "top_k": np.array(0),
                  "top_p": np.array(1.0, np.float32)})
    outputs = ["accepted", "accepted_len", "next_token"]
    want = original.run(outputs, feeds)
    for sess in sessions:
        got = sess.run(outputs, feeds)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_target_only_bundle_gets_the_verify_op_and_speculates_with_lookup(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, _ = pair_factory("llama")
    exported = export_bundle(ExportConfig(target=str(target), output=tmp_path / "e", validate=False))
    bundle = surgery_bundle(SurgeryConfig(output=tmp_path / "s"), exported)
    assert set(bundle.manifest.graphs) == {"target"} and set(dump(bundle.manifest.custom_ops)["graphs"]) == {"target"}
    engine = Engine(bundle.path)
    assert engine.target.has_verify and engine.drafter is None
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    for config in ({}, {"temperature": 0.8, "mode": "match", "seed": 3}):  # verified in the graph
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False, **config))  # type: ignore[arg-type]
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20, drafter="lookup", **config))  # type: ignore[arg-type]
        assert spec.output_ids == plain.output_ids and spec.speculative_rounds
