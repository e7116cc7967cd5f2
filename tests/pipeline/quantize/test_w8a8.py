"""`quantize --format w8a8` end to end on the tiny pair: graph, record, quality, fused compile, exactness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bundle import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.errors import InputError
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.runtime.engine import Engine
from specdec.pipeline.runtime.fused import FusedRunner
from specdec.pipeline.settings import bundle_requirements

SMALL: dict[str, Any] = {"calib_samples": 8, "calib_seq_len": 32, "eval_prompts": 3, "eval_new_tokens": 12}


@pytest.fixture(scope="module")
def w8a8(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    source = bundle_factory("llama")
    root = tmp_path_factory.mktemp("w8a8")
    quantized = quantize_bundle(QuantizeConfig(output=root / "q", format="w8a8", **SMALL), source)
    fused = compile_bundle(CompileConfig(output=root / "cpu", target=GraphFlavour.cpu, max_context=96,
                                         format=OutputFormat.onnx), quantized)
    return source, quantized, fused


def _ops(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def test_every_linear_layer_is_int8_matmulinteger(w8a8) -> None:  # type: ignore[no-untyped-def]
    source, bundle, _ = w8a8
    for role, linear_layers in (("target", 15), ("draft", 8)):
        path = bundle.path / f"{role}.onnx"
        onnx.checker.check_model(str(path), full_check=True)
        ops = _ops(path)
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
    report = w8a8[1].manifest.reports["quantize"]
    for graph in report["graphs"].values():
        assert abs(graph["perplexity_increase_pct"]) < 1.0
    spec = report["speculative"]
    assert spec["layout"] == "exact" and spec["lossless_prompts"] == spec["prompts"] == 3


def test_the_exact_layout_is_required(w8a8) -> None:  # type: ignore[no-untyped-def]
    """The matmuls are row-invariant; attention is not, and its last bits can move an int8 code."""
    assert bundle_requirements(w8a8[1].manifest.quantization) == {"exact_layout": True}


def test_fused_flavour_builds_it_and_speculation_equals_plain(w8a8) -> None:  # type: ignore[no-untyped-def]
    _, _, fused = w8a8
    ops = fused.manifest.buckets.fused["target"].ops
    layers = fused.manifest.graphs["target"].num_layers
    assert ops["MatMulInteger"] == 4 * layers + 1  # packed qkv, o, packed gate_up, down per layer; the head
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


def test_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="method gptq does not apply to format w8a8"):
        QuantizeConfig(output=tmp_path / "x", format="w8a8", method="gptq")
    with pytest.raises(InputError, match="w8a8_weight_bits 6 is not 7 or 8"):
        QuantizeConfig(output=tmp_path / "x", format="w8a8", w8a8_weight_bits=6)
    with pytest.raises(InputError, match="unknown weight format 'int3'"):
        QuantizeConfig(output=tmp_path / "x", format="int3")
    assert QuantizeConfig(output=tmp_path / "x").method_for("target").value == "awq"  # nbits default unchanged


def test_cli_and_inspect(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source: Bundle = bundle_factory("llama")
    out = tmp_path / "q"
    result = CliRunner().invoke(app, ["quantize", str(source.path), "-o", str(out), "--format", "w8a8",
                                      "--w8a8-weight-bits", "8", "--graphs", "draft", "--calib-samples", "4",
                                      "--calib-seq-len", "32"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "exact by construction" in result.output
    assert Bundle.load(out).manifest.quantization.graphs["draft"].weight_bits == 8
    shown = CliRunner().invoke(app, ["inspect", str(out)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "exact by construction" in shown.output
