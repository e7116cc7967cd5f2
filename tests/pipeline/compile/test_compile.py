"""`specdec compile`: static buckets, equal outputs, ORT format, readiness, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from specdec.pipeline.bundle import Bundle
from specdec.pipeline.compile import CompileConfig, OutputFormat, compile_bundle
from specdec.pipeline.errors import BundleError, GenerationError, InputError
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.manifest import GraphFlavour
from specdec.pipeline.runtime.config import DecodeConfig
from specdec.pipeline.runtime.engine import Engine
from specdec.pipeline.runtime.static import StaticRunner
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

SMALL = {"target": GraphFlavour.npu, "buckets": (4, 8, 16), "draft_buckets": (1, 4), "max_context": 96,
         "prefill_chunk": 16}


@pytest.fixture(scope="module")
def bundles(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("compile")
    exported = bundle_factory("llama")
    surgered = surgery_bundle(SurgeryConfig(output=root / "surgered"), exported)
    compiled = compile_bundle(CompileConfig(output=root / "compiled", **SMALL), surgered)  # type: ignore[arg-type]
    plain = compile_bundle(CompileConfig(output=root / "plain", format=OutputFormat.onnx, **SMALL), exported)  # type: ignore[arg-type]
    return {"exported": exported, "surgered": surgered, "compiled": compiled, "plain": plain}


def test_every_variant_is_static_and_loads(bundles) -> None:  # type: ignore[no-untyped-def]
    compiled: Bundle = bundles["compiled"]
    table = dump(compiled.manifest.buckets)
    assert table["max_context"] == 96
    assert [v["q"] for v in table["graphs"]["target"]] == [1, 4, 8, 16]
    assert [v["q"] for v in table["graphs"]["draft"]] == [1, 4, 16]
    for variants in table["graphs"].values():
        for variant in variants:
            for key in ("file", "ort_file"):
                path = compiled.path / variant[key]
                session = ort.InferenceSession(str(path))  # stock onnxruntime, both formats
                for value in [*session.get_inputs(), *session.get_outputs()]:
                    assert all(isinstance(d, int) for d in value.shape), (path.name, value.name, value.shape)
            past = next(t for t in variant["inputs"] if t["name"] == "past_key_values.0.key")
            assert past["shape"][2] == 96
    readiness = compiled.manifest.reports["compile"]["readiness"]
    assert all(not r["dynamic_dims"] for r in readiness.values())
    assert readiness["target_q8"]["providers"]["NNAPI"]["nodes"] > 0
    assert "not checked here" in readiness["target_q8"]["providers"]["XNNPACK"]["status"]


def test_custom_op_functions_survive_compile(bundles) -> None:  # type: ignore[no-untyped-def]
    compiled: Bundle = bundles["compiled"]
    for role, op in (("target", "BlockSparseVerify"), ("draft", "DynamicTreePrune")):
        model = onnx.load(str(compiled.path / "buckets" / f"{role}_q4.onnx"))
        assert [n.op_type for n in model.graph.node if n.domain == "com.endpoint.ai"] == [op]
        assert op in {f.name for f in model.functions}
        onnx.checker.check_model(model, full_check=True)


def test_buckets_match_the_dynamic_graph(bundles) -> None:  # type: ignore[no-untyped-def]
    diffs = bundles["compiled"].manifest.reports["compile"]["max_abs_diff"]
    assert diffs and max(diffs.values()) <= 1e-5


@pytest.mark.parametrize("config", [
    {"max_new_tokens": 30},
    {"max_new_tokens": 30, "temperature": 0.8, "mode": "match", "seed": 1},
    {"max_new_tokens": 30, "temperature": 0.8, "mode": "rrs", "seed": 1},
    {"max_new_tokens": 30, "temperature": 0.9, "seed": 5, "speculative": False},
])
def test_compiled_output_equals_uncompiled(bundles, config) -> None:  # type: ignore[no-untyped-def]
    for dynamic_key, static_key in (("surgered", "compiled"), ("exported", "plain")):
        dynamic, static = Engine(bundles[dynamic_key].path), Engine(bundles[static_key].path)
        assert isinstance(static.target, StaticRunner)
        for prompt in ([5, 6, 7], list(range(1, 40))):  # the long prompt needs prefill chunks
            expected = dynamic.generate(prompt, DecodeConfig(**config)).output_ids
            assert static.generate(prompt, DecodeConfig(**config)).output_ids == expected


def test_rounds_do_not_copy_the_kv_cache(bundles) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundles["compiled"].path)
    target = engine.target
    assert isinstance(target, StaticRunner)
    buffers = [id(b) for b in target.buffers]
    engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=12, tree_budget=8))
    engine.generate(list(range(1, 50)), DecodeConfig(max_new_tokens=12, tree_budget=8))
    assert [id(b) for b in target.buffers] == buffers  # the same preallocated buffers throughout
    assert target.padding_waste > 0 and target.rows_computed > 0
    # what leaves onnxruntime for a 4-node tree is the same at context 3 and at context 60
    moved = []
    for context in (3, 60):
        target.reset()
        target.forward(np.arange(context), np.arange(context), np.zeros((context, 0), bool),
                       np.tril(np.ones((context, context), bool)), with_logits=False)
        target.commit(np.arange(context))
        target.forward(np.arange(4), context + np.arange(4), np.zeros((4, 0), bool), np.eye(4, dtype=bool),
                       with_logits=False)
        moved.append(target.last_bytes_out)
    assert moved[0] == moved[1]


def test_context_limits(bundles) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundles["compiled"].path)
    with pytest.raises(GenerationError, match="context is 96"):
        engine.generate([5] * 100, DecodeConfig())
    reply = engine.generate([5] * 80, DecodeConfig(max_new_tokens=50))
    assert reply.stop_reason == "max_context"
    plain = Engine(bundles["surgered"].path).generate([5] * 80, DecodeConfig(max_new_tokens=len(reply.output_ids)))
    assert reply.output_ids == plain.output_ids


@pytest.mark.parametrize("overrides,message", [
    ({"buckets": (8, 4)}, "increasing"),
    ({"buckets": (0, 4)}, "at least 1"),
    ({"max_context": 12, "buckets": (4, 8, 16)}, "not larger than the largest bucket"),
    ({"max_context": 4096}, "exceeds the target's 512 positions"),
])
def test_bad_compile_options(bundles, tmp_path: Path, overrides, message) -> None:  # type: ignore[no-untyped-def]
    options = {**SMALL, **overrides}
    with pytest.raises(InputError, match=message):
        compile_bundle(CompileConfig(output=tmp_path / "out", **options), bundles["exported"])  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_compiling_twice_is_refused(bundles, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BundleError, match="already compiled"):
        compile_bundle(CompileConfig(output=tmp_path / "again", **SMALL), bundles["compiled"])  # type: ignore[arg-type]


def test_tree_larger_than_every_bucket(bundles) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundles["compiled"].path)
    reply = engine.generate([5, 6], DecodeConfig(max_new_tokens=8, tree_budget=16, width=8))
    assert reply.output_ids  # 16 nodes fit the largest bucket exactly
    with pytest.raises(GenerationError, match="exceeds the largest bucket"):
        engine.generate([5, 6], DecodeConfig(max_new_tokens=8, tree_budget=40, width=8, depth=6))
    np.testing.assert_equal(engine.max_context, 96)
