"""`specdec compile --target npu`: static q × context variants, shared weights, equal outputs, ORT format,
readiness, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, OutputFormat, compile_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.static import StaticRunner
from specdec.pipeline.errors import BundleError, GenerationError, InputError
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.manifest import GraphFlavour
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

SMALL = {"target": GraphFlavour.npu, "buckets": (4, 8, 16), "draft_buckets": (1, 4), "max_context": 96,
         "prefill_chunk": 16, "context_buckets": (32, 64, 128)}  # 128 is capped: buckets 32, 64, 96
CONTEXTS = [32, 64, 96]


@pytest.fixture(scope="module")
def bundles(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("compile")
    exported = bundle_factory("llama")
    surgered = surgery_bundle(SurgeryConfig(output=root / "surgered"), exported)
    compiled = compile_bundle(CompileConfig(output=root / "compiled", format=OutputFormat.both, **SMALL), surgered)  # type: ignore[arg-type]
    plain = compile_bundle(CompileConfig(output=root / "plain", format=OutputFormat.onnx, **SMALL), exported)  # type: ignore[arg-type]
    return {"exported": exported, "surgered": surgered, "compiled": compiled, "plain": plain}


def test_every_variant_is_static_and_loads(bundles) -> None:  # type: ignore[no-untyped-def]
    compiled: Bundle = bundles["compiled"]
    table = dump(compiled.manifest.buckets)
    assert table["max_context"] == 96
    for role, queries in (("target", [1, 4, 8, 16]), ("draft", [1, 4, 16])):
        assert [(v["q"], v["context"]) for v in table["graphs"][role]] == [(q, c) for c in CONTEXTS for q in queries]
        assert compiled.manifest.buckets.contexts(role) == CONTEXTS  # type: ignore[union-attr]
        assert compiled.manifest.buckets.sizes(role) == queries  # type: ignore[union-attr]
    for variants in table["graphs"].values():
        for variant in variants:
            for key in ("file", "ort_file"):
                path = compiled.path / variant[key]
                session = ort.InferenceSession(str(path))  # stock onnxruntime, both formats
                for value in [*session.get_inputs(), *session.get_outputs()]:
                    assert all(isinstance(d, int) for d in value.shape), (path.name, value.name, value.shape)
            past = next(t for t in variant["inputs"] if t["name"] == "past_key_values.0.key")
            mask = next(t for t in variant["inputs"] if t["name"] == "attention_mask")
            assert past["shape"][2] == variant["context"] and mask["shape"][3] == variant["context"] + variant["q"]
    readiness = dump(compiled.manifest.reports)["compile"]["readiness"]
    assert all(not r["dynamic_dims"] for r in readiness.values())
    assert readiness["target_q8_c32"]["providers"]["NNAPI"]["nodes"] > 0
    assert "not checked here" in readiness["target_q8_c32"]["providers"]["XNNPACK"]["status"]


def test_float_variants_keep_the_strict_check(bundles) -> None:  # type: ignore[no-untyped-def]
    report = dump(bundles["compiled"].manifest.reports)["compile"]
    assert "validation" not in report  # no int8 rounding: no padded-graph term in the tolerance
    assert max(report["max_abs_diff"].values()) <= 1e-5


def test_onnx_variants_share_one_weights_file_per_role(bundles) -> None:  # type: ignore[no-untyped-def]
    compiled: Bundle = bundles["compiled"]
    table = compiled.manifest.buckets
    assert table is not None and table.weights == {"target": "buckets/target.weights", "draft": "buckets/draft.weights"}
    sizes = dump(compiled.manifest.reports)["compile"]["sizes"]
    for role, data in table.weights.items():
        shared = (compiled.path / data).stat().st_size
        assert shared == sizes[role]["shared_weights_bytes"]
        # every variant references the same tensors: the file holds them once, not once per variant
        assert sizes[role]["inline_weights_bytes"] >= sizes[role]["variants"] * shared * 0.9
        params = compiled.manifest.graphs[role].parameters * 4
        assert 0.9 * params <= shared <= 1.2 * params
        for variant in table.graphs[role]:
            model = onnx.load(str(compiled.path / variant.file), load_external_data=False)
            locations = {entry.value for tensor in model.graph.initializer for entry in tensor.external_data
                         if entry.key == "location"}
            assert locations == {Path(data).name}, variant.file
            assert (compiled.path / variant.file).stat().st_size < shared / 4  # the graph alone
    # ORT format cannot reference the shared file: each .ort holds the weights, and compile says so
    assert any("ORT format cannot reference" in note for note in dump(compiled.manifest.reports)["compile"]["notes"])
    ort_file = compiled.path / table.graphs["target"][0].ort_file  # type: ignore[operator]
    assert ort_file.stat().st_size > 0.9 * (compiled.path / table.weights["target"]).stat().st_size
    # a runtime runs from the .ort files here, so it needs no weights file; an onnx bundle does
    assert not any(f.endswith(".weights") for f in table.files())
    plain = bundles["plain"].manifest.buckets
    assert {"buckets/target.weights", "buckets/draft.weights"} <= set(plain.files())
    assert dump(bundles["plain"].manifest.reports)["compile"]["notes"] == []


def test_custom_op_functions_survive_compile(bundles) -> None:  # type: ignore[no-untyped-def]
    compiled: Bundle = bundles["compiled"]
    for role, op in (("target", "BlockSparseVerify"), ("draft", "DynamicTreePrune")):
        model = onnx.load(str(compiled.path / "buckets" / f"{role}_q4_c64.onnx"))
        assert [n.op_type for n in model.graph.node if n.domain == "com.endpoint.ai"] == [op]
        assert op in {f.name for f in model.functions}
        onnx.checker.check_model(model, full_check=True)


def test_buckets_match_the_dynamic_graph(bundles) -> None:  # type: ignore[no-untyped-def]
    diffs = dump(bundles["compiled"].manifest.reports)["compile"]["max_abs_diff"]
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
    blocks = [b.ctypes.data for b in target.buffers]
    views: dict[int, list[int]] = {}
    moves: list[tuple[int, int]] = []
    forward = target.forward

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        before = (target.context, target.context_moves)
        result = forward(*args, **kwargs)
        seen = views.setdefault(target.context, [id(b) for b in target.buffers])
        assert [id(b) for b in target.buffers] == seen  # one set of views per context bucket, never rebuilt
        if target.context != before[0]:
            moves.append((before[0], target.context))
            assert target.context_moves == before[1] + 1 and target.context > before[0]
        else:
            assert target.context_moves == before[1]  # no copy of the cache within a bucket
        return result

    target.forward = spy  # type: ignore[method-assign]
    engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=40, tree_budget=8))
    assert (32, 64) in moves  # the reply outgrew the smallest bucket
    engine.generate(list(range(1, 50)), DecodeConfig(max_new_tokens=30, tree_budget=8))
    assert target.context == 96 and set(views) == set(CONTEXTS)
    # every bucket's buffers are views of the same preallocated blocks, never reallocated
    assert [b.ctypes.data for b in target.buffers] == blocks
    assert all(b.base is not None for b in target.buffers)
    target.reset()
    assert target.context == 32  # a new prompt starts from the smallest bucket
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


def test_moving_up_a_bucket_keeps_every_row(bundles) -> None:  # type: ignore[no-untyped-def]
    target = Engine(bundles["compiled"].path).target
    assert isinstance(target, StaticRunner)
    target.reset()
    target.forward(np.arange(20), np.arange(20), np.zeros((20, 0), bool), np.tril(np.ones((20, 20), bool)),
                   with_logits=False)
    target.commit(np.arange(18))  # 18 committed rows
    target.forward(np.arange(4), 18 + np.arange(4), np.zeros((4, 0), bool), np.eye(4, dtype=bool), with_logits=False)
    rng = np.random.default_rng(0)
    for buffer in target.buffers:  # distinct values in every valid row of every head
        buffer[:, :, :22] = rng.normal(size=buffer[:, :, :22].shape)
    valid = [b[:, :, :22].copy() for b in target.buffers]
    assert target.context == 32
    # 22 rows + 16 new ones do not fit 32 slots: the call moves to 64 first
    target.forward(np.arange(16), 22 + np.arange(16), np.ones((16, 4), bool), np.eye(16, dtype=bool),
                   with_logits=False)
    assert target.context == 64 and target.scratch == 20
    for buffer, rows in zip(target.buffers, valid, strict=True):
        np.testing.assert_array_equal(buffer[:, :, :22], rows)


def test_schema_2_bundles_run_on_one_context_bucket(bundles, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A bundle compiled before context buckets: no `context` per variant, no weights table."""
    old = tmp_path / "old"
    shutil.copytree(bundles["plain"].path, old)
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["schema_version"] = 2
    table = manifest["buckets"]
    table["graphs"] = {role: [v for v in variants if v.pop("context") == 96]
                       for role, variants in table["graphs"].items()}
    del table["weights"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    engine = Engine(old)
    assert isinstance(engine.target, StaticRunner) and engine.target.contexts == [96]
    new = Engine(bundles["plain"].path)
    for prompt in ([5, 6, 7], list(range(1, 40))):
        config = DecodeConfig(max_new_tokens=20)
        assert engine.generate(prompt, config).output_ids == new.generate(prompt, config).output_ids
    assert engine.target.context_moves == 0


def test_context_limits(bundles) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundles["compiled"].path)
    with pytest.raises(InputError, match="context is 96"):
        engine.generate([5] * 100, DecodeConfig())
    reply = engine.generate([5] * 80, DecodeConfig(max_new_tokens=50))
    assert reply.stop_reason == "max_context"
    plain = Engine(bundles["surgered"].path).generate([5] * 80, DecodeConfig(max_new_tokens=len(reply.output_ids)))
    assert reply.output_ids == plain.output_ids


@pytest.mark.parametrize("overrides,message", [
    ({"buckets": (8, 4)}, "increasing"),
    ({"buckets": (0, 4)}, "at least 1"),
    ({"max_context": 24, "buckets": (4, 8, 32)}, "not larger than the largest bucket"),
    ({"max_context": 12}, "max_context 12 is too small: a compiled bundle holds at least 20 positions"),
    ({"max_context": 4096}, "exceeds the target's 512 positions"),
    ({"context_buckets": (64, 32)}, "context_buckets must be increasing"),
    ({"context_buckets": (0, 32)}, "at least 1"),
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


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_greedy_speculative_equals_plain_across_context_buckets(bundle_factory, tmp_path: Path,
                                                               arch: str) -> None:  # type: ignore[no-untyped-def]
    exported = bundle_factory(arch)
    compiled = compile_bundle(CompileConfig(output=tmp_path / "npu", **SMALL), exported)  # type: ignore[arg-type]
    assert compiled.manifest.buckets is not None and compiled.manifest.buckets.format is OutputFormat.onnx
    engine, dynamic = Engine(compiled.path), Engine(exported.path)
    rng = np.random.default_rng(4)
    accepted = []
    for length in (3, 12, 30):  # replies that start in the 32-slot bucket, and some that start above it
        prompt = rng.integers(1, engine.vocab, size=length).tolist()
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=40, speculative=False))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=40))
        reference = dynamic.generate(prompt, DecodeConfig(max_new_tokens=40, speculative=False))
        assert spec.output_ids == plain.output_ids == reference.output_ids
        accepted.append(spec.mean_accepted_len)
    assert isinstance(engine.target, StaticRunner) and engine.target.context_moves > 0
    assert np.mean(accepted) > 1.0


def test_ort_format_drops_the_onnx_side_and_its_weights(bundles, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    options = {**SMALL, "buckets": (4,), "draft_buckets": (1,), "prefill_chunk": 4, "max_context": 32,
               "context_buckets": (16,)}
    compiled = compile_bundle(CompileConfig(output=tmp_path / "ort", format=OutputFormat.ort, **options),  # type: ignore[arg-type]
                              bundles["exported"])
    table = compiled.manifest.buckets
    assert table is not None and not table.weights and table.contexts("target") == [16, 32]
    assert table.files() and all(f.endswith(".ort") for f in table.files())
    left = {path.suffix for path in (compiled.path / "buckets").iterdir()}
    assert ".onnx" not in left and ".weights" not in left
    assert any("ORT format cannot reference" in note for note in dump(compiled.manifest.reports)["compile"]["notes"])
    reply = Engine(compiled.path).generate([5, 6, 7], DecodeConfig(max_new_tokens=20))
    expected = Engine(bundles["exported"].path).generate([5, 6, 7], DecodeConfig(max_new_tokens=20))
    assert reply.output_ids == expected.output_ids
