"""`quantize --format w8a8` end to end on the tiny pair: graph, record, quality, fused compile, exactness."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from support.quantized import op_types, quantized_and_fused
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, compile_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.engine.int8_range import x86_without_vnni
from specdec.pipeline.errors import InputError
from specdec.pipeline.generate.stage import GenerateConfig, Generator, generate_settings
from specdec.pipeline.quantize import QuantizeConfig
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import load_device
from specdec.pipeline.settings.resolve import bundle_requirements
from specdec.pipeline.tune import TuneConfig, tune_bundle


@pytest.fixture(scope="module")
def w8a8(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    source = bundle_factory("llama")
    root = tmp_path_factory.mktemp("w8a8")
    return source, *quantized_and_fused(source, root, format="w8a8")


def test_every_linear_layer_is_int8_matmulinteger(w8a8) -> None:  # type: ignore[no-untyped-def]
    source, bundle, _ = w8a8
    for role, linear_layers in (("target", 15), ("draft", 8)):
        path = bundle.path / f"{role}.onnx"
        onnx.checker.check_model(str(path), full_check=True)
        ops = op_types(path)
        assert ops.count("MatMulInteger") == linear_layers and "MatMulNBits" not in ops
        assert ops.count("MatMul") == 2 * source.manifest.graphs[role].num_layers  # attention only
        assert all(opset.domain in ("", "ai.onnx", "com.endpoint.ai") for opset in onnx.load(str(path)).opset_import)
    quantization = bundle.manifest.quantization
    assert quantization.format == "w8a8" and quantization.row_invariant
    target = quantization.graphs["target"]
    assert (target.method, target.group_size, target.weight_bits, target.summary["int8"]) == ("rtn", "channel", 7, 15)
    assert all(layer.weight_rel_error < 0.03 for layer in target.layers.values())
    assert bundle.manifest.lineage[-1].config["format"] == "w8a8"


def test_quality_perplexity_within_one_percent_and_lossless(w8a8) -> None:  # type: ignore[no-untyped-def]
    report = dump(w8a8[1].manifest.reports)["quantize"]
    for graph in report["graphs"].values():
        assert abs(graph["perplexity_increase_pct"]) < 1.0
        assert 0 < graph["logits_error"] < 1  # what compile scales its int8-compute tolerance by
    spec = report["speculative"]
    assert spec["layout"] == "exact" and spec["lossless_prompts"] == spec["prompts"] == 3


def test_the_exact_layout_is_required(w8a8) -> None:  # type: ignore[no-untyped-def]
    """The matmuls are row-invariant; attention is not, and its last bits can move an int8 code."""
    assert bundle_requirements(w8a8[1].manifest.quantization) == {"exact_layout": True}


def test_fused_flavour_builds_it_and_speculation_equals_plain(w8a8) -> None:  # type: ignore[no-untyped-def]
    _, _, fused = w8a8
    ops = fused.manifest.buckets.fused["target"].ops
    layers = fused.manifest.graphs["target"].num_layers
    # packed qkv, o, packed gate_up, down per layer; the head: the contrib form (int8_matmul.emit)
    assert ops["com.microsoft.MatMulIntegerToFloat"] == 4 * layers + 1 and "MatMulInteger" not in ops
    engine = Engine(fused.path)
    assert isinstance(engine.target, FusedRunner)
    rng = np.random.default_rng(0)
    accepted = []
    for _ in range(4):
        prompt = rng.integers(1, engine.vocab, size=int(rng.integers(2, 12))).tolist()
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False, exact_layout=True))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20, exact_layout=True))
        assert spec.output_ids == plain.output_ids
        accepted.append(spec.mean_accepted_len)
    assert np.mean(accepted) > 1.0


def test_tune_plans_for_it_and_generate_with_the_plan_is_lossless(w8a8, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`tune` measures the w8a8 bundle's own cost curve and stores a plan; decoding with it equals plain."""
    tuned, plan = tune_bundle(TuneConfig(output=tmp_path / "tuned", decode=DecodeOptions(max_new_tokens=12)), w8a8[2])
    stored = Bundle.load(tuned.path).manifest.plan
    assert stored is not None and stored.for_device(plan.device) == plan
    assert plan.plain_step_ms > 0 and len(plan.verify_ms) > 1 and plan.exact_layout
    # speculative=True: the plan's tree even where it predicts that plain decoding is as fast
    settings = generate_settings(GenerateConfig(decode=DecodeOptions(max_new_tokens=16, speculative=True)), tuned,
                                 load_device("local-cpu"),
                                 None)
    assert settings.plan == plan and settings.config.exact_layout
    engine = Generator(tuned).engine
    plain = replace(settings.config, speculative=False)
    for prompt in ([5, 6, 7], [11, 3, 9, 2], [1]):
        assert engine.generate(prompt, settings.config).output_ids == engine.generate(prompt, plain).output_ids


def test_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="method gptq does not apply to format w8a8"):
        QuantizeConfig.from_text(output=tmp_path / "x", format="w8a8", method="gptq")
    with pytest.raises(InputError, match="w8a8_weight_bits 6 is not 7 or 8"):
        QuantizeConfig.from_text(output=tmp_path / "x", format="w8a8", w8a8_weight_bits=6)
    with pytest.raises(InputError, match="unknown weight format 'int3'"):
        QuantizeConfig.from_text(output=tmp_path / "x", format="int3")
    assert QuantizeConfig.from_text(output=tmp_path / "x", format="nbits").method_for("target").value == "awq"


def test_cli_and_inspect(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source: Bundle = bundle_factory("llama")
    out = tmp_path / "q"
    command = ["quantize", str(source.path), "-o", str(out), "--format", "w8a8", "--w8a8-weight-bits", "8",
               "--graphs", "draft", "--calib-samples", "4", "--calib-seq-len", "32"]
    if x86_without_vnni():  # 8-bit weights would saturate here: the quality check refuses to run them
        refused = CliRunner().invoke(app, command, env={"COLUMNS": "250"})
        assert refused.exit_code == 3 and "--w8a8-weight-bits 7" in refused.output
        command[command.index("8")] = "7"
    result = CliRunner().invoke(app, command, env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "exact by construction" in result.output
    bits = int(command[command.index("--w8a8-weight-bits") + 1])
    assert Bundle.load(out).manifest.quantization.graphs["draft"].weight_bits == bits
    shown = CliRunner().invoke(app, ["inspect", str(out)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "exact by construction" in shown.output


@pytest.mark.slow
def test_npu_flavour_carries_it_and_speculation_equals_plain(w8a8, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The static flavour keeps the standard-op form; NNAPI and CoreML report MatMulInteger unsupported."""
    config = CompileConfig(output=tmp_path / "npu", target=GraphFlavour.npu, buckets=(4, 8), draft_buckets=(1, 4),
                           max_context=96, context_buckets=(96,))
    static = compile_bundle(config, w8a8[1])
    readiness = dump(static.manifest.reports)["compile"]["readiness"]
    assert all("ai.onnx:MatMulInteger" in r["providers"]["NNAPI"]["unsupported_ops"] for r in readiness.values())
    engine = Engine(static.path)
    for prompt in ([5, 6, 7], [11, 3]):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=12, speculative=False, exact_layout=True))
        assert engine.generate(prompt, DecodeConfig(max_new_tokens=12, exact_layout=True)).output_ids == \
            plain.output_ids


def test_fused_target_computes_a_single_row_exactly(w8a8) -> None:  # type: ignore[no-untyped-def]
    """The attention pad row: plain steps of one row equal chain rows bit for bit, so the exact layout pads nothing."""
    _, _, fused = w8a8
    assert dump(fused.manifest.reports)["compile"]["invariance"]["single_row"]
    engine = Engine(fused.path)
    assert engine.target.single_row_exact and not engine.drafter.runner.single_row_exact  # type: ignore[union-attr]
    exact = DecodeConfig(max_new_tokens=20, exact_layout=True)
    assert engine.root_rows(exact) == 1
    rng = np.random.default_rng(3)
    for _ in range(3):
        prompt = rng.integers(1, engine.vocab, size=int(rng.integers(1, 12))).tolist()
        one_row = engine.generate(prompt, replace(exact, speculative=False))
        engine.target.single_row_exact = False  # type: ignore[misc]  # the padded steps, as before the pad row
        padded = engine.generate(prompt, replace(exact, speculative=False))
        engine.target.single_row_exact = True  # type: ignore[misc]
        assert one_row.output_ids == padded.output_ids == engine.generate(prompt, exact).output_ids


def test_a_tree_near_the_context_end_fits_the_rotary_tables(w8a8) -> None:  # type: ignore[no-untyped-def]
    """GroupQueryAttention checks a call's rows and its pad row against the rotary tables (`max_context`
    rows), so the fused target's usable context ends one slot earlier; a reply near it used to die mid-generation
    in the tree layout (onnxruntime: "cos_cache dimension 0 shall not be less than total_sequence_length")."""
    _, _, fused = w8a8
    engine = Engine(fused.path)
    assert engine.target.max_context == fused.manifest.buckets.max_context - 1  # type: ignore[union-attr]
    prompt = list(range(5, 5 + engine.max_context - 12))
    replies = [engine.generate(prompt, DecodeConfig(max_new_tokens=30, exact_layout=layout, speculative=speculate))
               for layout, speculate in ((False, True), (True, True), (True, False))]
    assert {reply.stop_reason for reply in replies} == {"max_context"}
    assert replies[0].output_ids == replies[1].output_ids == replies[2].output_ids
