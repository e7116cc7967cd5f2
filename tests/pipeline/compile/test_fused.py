"""`specdec compile --target cpu`: fused contrib-op graphs, the KV buffer in place, exact decoding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle, compile_settings
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.engine.runner import causal, no_scratch
from specdec.pipeline.errors import GenerationError, UnsupportedModelError
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

ARCHS = ("llama", "qwen2", "mistral")


def _cpu(bundle: Bundle, out: Path, **kwargs: object) -> Bundle:
    config = CompileConfig(output=out, target=GraphFlavour.cpu, max_context=96, format=OutputFormat.onnx, **kwargs)  # type: ignore[arg-type]
    return compile_bundle(config, bundle)


@pytest.fixture(scope="module")
def fused(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("fused")
    built = {arch: _cpu(bundle_factory(arch), root / arch) for arch in ARCHS}
    surgered = surgery_bundle(SurgeryConfig(output=root / "surgered"), bundle_factory("llama"))
    built["surgered"] = _cpu(surgered, root / "surgered-cpu")
    return built


def _prompts(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=int(rng.integers(1, 14))).tolist() for _ in range(count)]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_graph_is_fused_and_validated(fused, arch: str) -> None:  # type: ignore[no-untyped-def]
    bundle: Bundle = fused[arch]
    table = bundle.manifest.buckets
    assert table is not None and table.flavour is GraphFlavour.cpu and not table.graphs
    ops = table.fused["target"].ops
    layers = bundle.manifest.graphs["target"].num_layers
    assert ops["com.microsoft.GroupQueryAttention"] == layers
    assert ops["com.microsoft.SkipSimplifiedLayerNormalization"] == 2 * layers
    assert "Expand" not in ops and "Softmax" not in ops  # no generic attention left
    report = dump(bundle.manifest.reports)["compile"]
    assert max(report["max_abs_diff"].values()) <= 1e-5
    assert report["invariance"]["chain"]  # the exact layout holds on this machine's kernels


@pytest.mark.parametrize("arch", [*ARCHS, "surgered"])
def test_greedy_speculative_equals_plain(fused, arch: str) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(fused[arch].path)
    assert isinstance(engine.target, FusedRunner)
    accepted = []
    for prompt in _prompts(5, engine.vocab):
        for exact in (False, True):
            plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False, exact_layout=exact))
            spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20, exact_layout=exact))
            assert spec.output_ids == plain.output_ids
            accepted.append(spec.mean_accepted_len)
    assert np.mean(accepted) > 1.0


def test_same_tokens_as_the_dynamic_bundle(fused, bundle_factory) -> None:  # type: ignore[no-untyped-def]
    dynamic, compiled = Engine(bundle_factory("llama").path), Engine(fused["llama"].path)
    for prompt in _prompts(4, dynamic.vocab, seed=3):
        config = DecodeConfig(max_new_tokens=24, speculative=False)
        assert compiled.generate(prompt, config).output_ids == dynamic.generate(prompt, config).output_ids


def test_exact_layout_trees_are_chains_and_plain_steps_are_padded(fused) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(fused["llama"].path)
    reply = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=16, exact_layout=True, tree_budget=8, width=3))
    for stats in reply.speculative_rounds:
        assert stats.tree_size == stats.tree_depth + 1  # a single path
    calls: list[int] = []
    forward = engine.target.forward

    def spy(ids, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(int(np.size(ids)))
        return forward(ids, *args, **kwargs)

    engine.target.forward = spy  # type: ignore[method-assign]
    engine.generate([5], DecodeConfig(max_new_tokens=6, speculative=False, exact_layout=True))
    assert calls and min(calls) >= 2  # never a single row, prefill of one token included


def test_the_kv_buffer_is_updated_in_place(fused) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(fused["llama"].path)
    runner = engine.target
    assert isinstance(runner, FusedRunner)
    pointers = [b.ctypes.data for b in runner.buffers]
    runner.reset()
    runner.forward(np.arange(1, 9), np.arange(8), no_scratch(8), causal(8))
    runner.commit(np.arange(8))
    before = [b[:, :, :8].copy() for b in runner.buffers]
    tail = [b[:, :, 12:].copy() for b in runner.buffers]
    runner.forward(np.array([3, 4, 5]), 8 + np.array([0, 1, 1]), no_scratch(3),
                   np.array([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool))
    runner.commit([0, 2])  # keep the root and its second child
    assert [b.ctypes.data for b in runner.buffers] == pointers  # never reallocated
    assert all(np.array_equal(b[:, :, :8], old) for b, old in zip(runner.buffers, before, strict=True))
    assert all(np.array_equal(b[:, :, 12:], old) for b, old in zip(runner.buffers, tail, strict=True))
    assert runner.length == 10


def test_ort_format_and_the_flavour_default_from_the_profile(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    compiled = compile_bundle(CompileConfig(output=tmp_path / "c", max_context=96), bundle_factory("llama"))
    table = compiled.manifest.buckets
    assert table is not None and table.flavour is GraphFlavour.cpu  # local-cpu's compile.target
    assert table.fused["target"].runtime_file.endswith(".ort")
    engine = Engine(compiled.path)
    assert engine.generate([5, 6], DecodeConfig(max_new_tokens=8)).output_ids == \
        engine.generate([5, 6], DecodeConfig(max_new_tokens=8, speculative=False)).output_ids


def test_a_compiled_bundle_keeps_one_copy_of_the_weights(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """By default only what the runner opens: the fused .ort graphs, not the dynamic graphs nor a .onnx
    twin; a device push carries the same files."""
    source = bundle_factory("llama")
    compiled = compile_bundle(CompileConfig(output=tmp_path / "c", max_context=96), source)
    assert compiled.manifest.buckets is not None and compiled.manifest.buckets.format is OutputFormat.ort
    graphs = sorted(rel for rel in compiled.manifest.files if rel.endswith((".onnx", ".ort", ".data")))
    assert graphs == ["cpu/draft.ort", "cpu/target.ort"] == compiled.runner_files()
    assert not (compiled.path / "target.onnx").exists() and (source.path / "target.onnx").is_file()
    assert compiled.runner_bytes() < source.runner_bytes() * 1.2  # the weights once (plus the rotary tables)
    both = compile_bundle(CompileConfig(output=tmp_path / "both", max_context=96, format=OutputFormat.both), source)
    assert sorted(rel for rel in both.manifest.files if rel.startswith("cpu/") and not rel.endswith(".config")) == [
        "cpu/draft.onnx", "cpu/draft.ort", "cpu/target.onnx", "cpu/target.ort"]  # asked for: both kept
    assert both.runner_files() == graphs


def test_a_tied_head_reads_the_embedding_table(fused, bundle_factory) -> None:  # type: ignore[no-untyped-def]
    """qwen2's tiny model ties its embeddings: the fused graph's Gather and its head's Gemm read one
    initializer (no transposed copy), onnxruntime runs it, and it decodes as the dynamic graph does."""
    import onnx

    bundle: Bundle = fused["qwen2"]
    model = onnx.load(str(bundle.path / bundle.manifest.buckets.fused["target"].file))  # type: ignore[union-attr]
    table = next(n.input[0] for n in model.graph.node if n.op_type == "Gather" and n.input[1] == "input_ids")
    readers = sorted(n.op_type for n in model.graph.node if table in n.input)
    assert readers == ["Gather", "Gemm"]
    spec = bundle.manifest.graphs["target"]
    square = {(spec.vocab_size, 64), (64, spec.vocab_size)}
    assert sum(tuple(init.dims) in square for init in model.graph.initializer) == 1  # the table, once
    untied = onnx.load(str(fused["llama"].path / fused["llama"].manifest.buckets.fused["target"].file))  # type: ignore[union-attr]
    assert "Gemm" not in {n.op_type for n in untied.graph.node}  # llama's tiny model has its own head
    prompt = [5, 6, 7]
    compiled, dynamic = Engine(bundle.path), Engine(bundle_factory("qwen2").path)
    assert compiled.generate(prompt, DecodeConfig(max_new_tokens=12)).output_ids == \
        dynamic.generate(prompt, DecodeConfig(max_new_tokens=12, speculative=False)).output_ids


def test_unsupported_architecture(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsupportedModelError, match="--target npu"):
        _cpu(bundle_factory("gpt2"), tmp_path / "x")
    assert not (tmp_path / "x").exists()
    fallback = compile_bundle(CompileConfig(output=tmp_path / "y", max_context=96, format=OutputFormat.onnx,
                                            buckets=(4, 8), draft_buckets=(1, 4), prefill_chunk=16),
                              bundle_factory("gpt2"))
    assert fallback.manifest.buckets is not None and fallback.manifest.buckets.flavour is GraphFlavour.npu
    # the lineage records what was built (the profile asked for cpu), so a pipeline re-run can reuse it
    assert fallback.manifest.lineage[-1].config["target"] == "npu"
    settings = compile_settings(CompileConfig(output=tmp_path / "z"), bundle_factory("gpt2").manifest)
    assert settings.flavour is GraphFlavour.npu and settings.warnings
    assert settings.max_context <= bundle_factory("gpt2").manifest.graphs["target"].max_position_embeddings


def test_reused_call_slots_give_the_same_results_as_fresh_bindings(fused) -> None:  # type: ignore[no-untyped-def]
    """A call size's bindings are reused: a caller's op inputs must not leak into the next call."""
    path = fused["surgered"].path

    def step(runner: FusedRunner, extra: dict[str, np.ndarray] | None) -> tuple[np.ndarray, int]:
        runner.reset()
        runner.forward(np.arange(1, 6), np.arange(5), no_scratch(5), causal(5))
        runner.commit(np.arange(5))
        logits, extras = runner.forward(np.array([7, 0]), 5 + np.arange(2), no_scratch(2), np.eye(2, dtype=bool),
                                        extra_inputs=extra, extra_outputs=("next_token",))
        assert logits is not None
        runner.commit([0])
        return logits, int(extras["next_token"])

    reused = Engine(path).target
    assert isinstance(reused, FusedRunner)
    clean = step(reused, None)
    sampled = {"tree_parent": np.array([-1, -1]), "tree_depth": np.zeros(2, np.int64),
               "uniforms": np.full((2, 1), 0.999), "temperature": np.array(5.0, np.float32),
               "mode": np.array(1, np.int64)}
    assert step(reused, sampled)[1] != clean[1]  # a draw far in the tail of a hot distribution
    again = step(reused, None)
    fresh = step(Engine(path).target, None)  # type: ignore[arg-type]
    assert np.array_equal(again[0], fresh[0]) and again[1] == fresh[1] == clean[1]
    assert again[1] == int(np.argmax(again[0][0]))  # the defaults (greedy) are back


@pytest.mark.parametrize("rows", [1, 2])
def test_greedy_root_step_is_forward_and_commit(fused, rows: int) -> None:  # type: ignore[no-untyped-def]
    """The plain-step fast path gives the generic call's token and KV rows bit for bit, also after a
    chain call left its ids and op inputs in the slot of the same size."""
    path = fused["surgered"].path
    fast, generic = Engine(path).target, Engine(path).target
    assert isinstance(fast, FusedRunner) and isinstance(generic, FusedRunner)
    visible = causal(1) if rows == 1 else np.eye(2, dtype=bool)
    for runner in (fast, generic):
        runner.forward(np.arange(1, 6), np.arange(5), no_scratch(5), causal(5))
        runner.commit(np.arange(5))
    chain = {"tree_parent": np.array([-1, 0]), "tree_depth": np.array([0, 1]), "uniforms": np.full((2, 1), 0.5),
             "temperature": np.array(2.0, np.float32), "mode": np.array(1, np.int64)}
    fast.forward(np.array([9, 11]), 5 + np.arange(2), no_scratch(2), causal(2), extra_inputs=chain)
    fast.commit([0, 1])
    generic.forward(np.array([9, 11]), 5 + np.arange(2), no_scratch(2), causal(2))
    generic.commit([0, 1])
    token = 7
    for _ in range(6):
        _, extras = generic.forward(np.array([token] + [0] * (rows - 1)), generic.length + np.arange(rows),
                                    no_scratch(rows), visible, extra_outputs=("next_token",), with_logits=False)
        generic.commit([0])
        expected = int(extras["next_token"])
        assert fast.greedy_root_step(token, rows) == expected
        assert fast.length == generic.length
        token = expected
    for mine, theirs in zip(fast.buffers, generic.buffers, strict=True):
        assert np.array_equal(mine[:, :, : fast.length], theirs[:, :, : generic.length])


def test_prompts_of_any_length_share_one_rebound_slot(fused) -> None:  # type: ignore[no-untyped-def]
    """Prompts re-bind one slot per length (shorter after longer, and longer again): each prefill
    gives a fresh runner's logits, and steps after it keep their own slots."""
    path = fused["surgered"].path
    shared = Engine(path).target
    assert isinstance(shared, FusedRunner)
    for length in (9, 70, 3, 33, 80):
        ids = (np.arange(length) * 7 + 3) % 250 + 1
        fresh = Engine(path).target
        results = []
        for runner in (shared, fresh):
            runner.reset()
            logits, _ = runner.forward(ids, np.arange(length), no_scratch(length), causal(length))
            runner.commit(np.arange(length))
            step, _ = runner.forward(np.array([5]), np.array([length]), no_scratch(1), causal(1))
            runner.commit([0])
            results.append((logits, step))
        assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])
    assert sorted(shared._slots) == [1]  # only the step's size: prompts did not each leave a slot


def test_direct_calls_fall_back_to_the_public_iobinding_api() -> None:
    """Without onnxruntime's private pybind attributes the public calls are used, same arguments."""
    from specdec.pipeline.engine.fused_binding import _direct_calls

    calls: list[tuple[object, ...]] = []

    class PublicBinding:
        def bind_input(self, *args: object) -> None:
            calls.append(("in", *args))

        def bind_output(self, *args: object) -> None:
            calls.append(("out", *args))

    class PublicSession:
        def run_with_iobinding(self, binding: object) -> None:
            calls.append(("run", binding))

    binding = PublicBinding()
    bind_input, bind_output, run = _direct_calls(PublicSession(), binding)
    bind_input("mask", np.float32, [1, 2], 1234)
    bind_output("logits", np.float32, [1, 3], 5678)
    run()
    assert calls == [("in", "mask", "cpu", 0, np.float32, [1, 2], 1234),
                     ("out", "logits", "cpu", 0, np.float32, [1, 3], 5678), ("run", binding)]


def test_a_full_kv_buffer_is_a_clear_error_on_both_call_paths(fused) -> None:  # type: ignore[no-untyped-def]
    runner = Engine(fused["surgered"].path).target
    assert isinstance(runner, FusedRunner)
    room = runner.capacity - 1
    runner.forward(np.arange(room) % 200 + 1, np.arange(room), no_scratch(room), causal(room))
    runner.commit(np.arange(room))
    with pytest.raises(GenerationError, match=f"KV buffer of {runner.capacity} slots is full"):
        runner.greedy_root_step(5, 2)
    with pytest.raises(GenerationError, match="larger --max-context"):
        runner.forward(np.array([5, 0]), room + np.arange(2), no_scratch(2), np.eye(2, dtype=bool))
    assert runner.greedy_root_step(5, 1) >= 0 and runner.length == runner.capacity  # the last slot still fits


def test_the_int8_compute_tolerance_scales_with_the_formats_own_logits_error() -> None:
    from specdec.pipeline.compile.fused.validate import (
        INT8_COMPUTE_TOLERANCE,
        format_logits_error,
        int8_tolerance,
        tolerance_basis,
    )

    assert int8_tolerance(None) == int8_tolerance(float("nan")) == INT8_COMPUTE_TOLERANCE == 2e-2
    assert int8_tolerance(0.01) == 2e-2  # a small format error keeps the fixed floor
    assert int8_tolerance(0.149) == pytest.approx(0.0745)  # the fused 1.24B target's 0.0517 passes
    assert int8_tolerance(0.149) >= 0.0517 > int8_tolerance(None)
    from specdec.pipeline.records.codec import from_dict
    from specdec.pipeline.records.reports import Reports

    use = {"source": "x", "samples": 1, "seq_len": 8, "tokens": 8}
    reports = from_dict(Reports, {"quantize": {
        "calibration": use, "eval": {"source": "x", "windows": 1, "tokens": 8},
        "graphs": {"target": {"logits_error": 0.149}, "draft": {"perplexity_after": 2.0}},
        "total": {"bytes_before": 2, "bytes_after": 1, "size_ratio": 0.5}}})
    assert format_logits_error(reports, "target") == 0.149
    assert format_logits_error(reports, "draft") is None and format_logits_error(Reports(), "target") is None
    assert "0.149" in tolerance_basis(True, 0.149) and "0.5" in tolerance_basis(True, 0.149)
    assert "no quantization logits error" in tolerance_basis(True, None) and tolerance_basis(False, 0.149) == ""
