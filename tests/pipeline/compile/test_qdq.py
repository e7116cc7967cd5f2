"""`specdec compile --target npu --activations static-qdq` (compile/static/qdq.py): a w8a8 bundle's
linear layers in QDQ form with calibrated constant activation scales, measured lossy against dynamic
w8a8, row-invariant, and speculative output equal to plain output of the compiled bundle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.quantized import SMALL, op_types
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.compile import CompileConfig, GraphFlavour, compile_bundle
from specdec.pipeline.compile.config import Activations
from specdec.pipeline.compile.static import qdq
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.invariance import measure
from specdec.pipeline.engine.static import StaticRunner
from specdec.pipeline.errors import InputError
from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig

NPU = {"target": GraphFlavour.npu, "buckets": (4, 8), "draft_buckets": (1, 4), "max_context": 96,
       "prefill_chunk": 16, "context_buckets": (48, 96)}


@pytest.fixture(scope="module")
def compiled(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("qdq")
    w8a8 = quantize_bundle(QuantizeConfig.from_text(output=root / "q", format="w8a8", **SMALL), bundle_factory("llama"))
    static = compile_bundle(CompileConfig(output=root / "npu", activations=Activations.static_qdq, **NPU), w8a8)  # type: ignore[arg-type]
    return w8a8, static


def _single_linear(weight: int8_matmul.Int8Columns) -> onnx.ModelProto:
    """x [B, K] -> w8a8 linear -> y: the emitted pattern, alone in a graph."""
    nodes, inits = int8_matmul.emit("x", "y", weight, "layer", lambda base: base)
    graph = helper.make_graph(nodes, "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", weight.K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", weight.N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_rewrite_is_the_qdq_product_and_row_independent() -> None:
    rng = np.random.default_rng(0)
    weight = int8_matmul.quantize_columns(rng.normal(size=(16, 8)).astype(np.float32), 7)
    model = _single_linear(weight)
    assert qdq.rewrite(model, {"layer.qweight8": 0.02}) == 1
    onnx.checker.check_model(model, full_check=True)
    assert sorted(n.op_type for n in model.graph.node) == ["DequantizeLinear", "DequantizeLinear", "MatMul",
                                                           "QuantizeLinear"]
    weights_dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "layer.qweight8")
    assert helper.get_attribute_value(weights_dq.attribute[0]) == 1  # per output column
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.normal(size=(64, 16)).astype(np.float32)
    batch = session.run(None, {"x": x})[0]
    codes = np.clip(np.rint(x / np.float32(0.02)), -128, 127)  # uint8 with zero point 128
    expected = (codes * np.float32(0.02)) @ weight.dequantized()
    np.testing.assert_allclose(batch, expected, rtol=1e-5, atol=1e-5)
    for size in (1, 2, 7, 64):  # a row alone, and in batches of other rows
        rows = rng.choice(64, size=size, replace=False)
        assert np.array_equal(session.run(None, {"x": x[rows]})[0], batch[rows])


def test_variants_carry_qdq_and_no_dynamic_quantization(compiled) -> None:  # type: ignore[no-untyped-def]
    _, static = compiled
    for role, linears, inputs in (("target", 15, 9), ("draft", 8, 5)):  # q/k/v and gate/up share an input
        for variant in static.manifest.buckets.graphs[role]:
            ops = op_types(static.path / variant.file)
            assert not {"MatMulInteger", "ReduceMax", "Round"} & set(ops)
            assert ops.count("QuantizeLinear") == inputs
            assert ops.count("DequantizeLinear") == inputs + linears
    model = onnx.load(str(static.path / static.manifest.buckets.graphs["target"][0].file))
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear":  # a constant per-tensor scale and the w8a8 zero point
            assert numpy_helper.to_array(inits[node.input[1]]).shape == ()
            assert numpy_helper.to_array(inits[node.input[2]]).item() == qdq.ACTIVATION_ZERO_POINT
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            assert inits[node.input[0]].data_type == TensorProto.INT8


def test_lossy_error_is_measured_and_the_tolerance_recorded(compiled) -> None:  # type: ignore[no-untyped-def]
    _, static = compiled
    report = dump(static.manifest.reports)["compile"]
    qdq_report = report["activations"]
    assert qdq_report["mode"] == "static-qdq" and qdq_report["lossy_vs"] == "dynamic w8a8"
    for graph in qdq_report["graphs"].values():
        assert 0 < graph["max_logits_error"] < 0.1 and graph["greedy_mismatch_rate"] < 0.1
        assert abs(graph["perplexity_qdq"] / graph["perplexity_w8a8"] - 1) < 0.01
    assert set(qdq_report["validation"]) == set(report["max_abs_diff"])
    for name, check in qdq_report["validation"].items():
        assert check["format_error"] <= report["max_abs_diff"][name] + 0.02 <= check["tolerance"] + 0.02
        assert check["tolerance"] >= 0.02 + check["format_error"] + check["padding_error"] - 1e-9
    assert static.manifest.lineage[-1].config["activations"] == "static-qdq"


def test_readiness_compares_the_matmulinteger_form(compiled) -> None:  # type: ignore[no-untyped-def]
    _, static = compiled
    report = dump(static.manifest.reports)["compile"]
    before = report["activations"]["readiness_matmulinteger"]
    assert set(before) == {"target_q1_c48", "draft_q1_c48"}
    for name, was in before.items():
        now = report["readiness"][name]["providers"]["NNAPI"]
        assert "ai.onnx:MatMulInteger" in was["NNAPI"]["unsupported_ops"]
        assert not {"ai.onnx:MatMulInteger", "ai.onnx:QuantizeLinear", "ai.onnx:DequantizeLinear"} & \
            set(now["unsupported_ops"])
        assert now["share"] > was["NNAPI"]["share"]
    shown = CliRunner().invoke(app, ["inspect", str(static.path), "--mobile"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "lossy vs dynamic w8a8" in shown.output and "MatMulInteger form -> QDQ form: NNAPI" in shown.output


def test_row_invariant_and_speculation_equals_plain(compiled) -> None:  # type: ignore[no-untyped-def]
    _, static = compiled
    graphs = dump(static.manifest.reports)["compile"]["activations"]["graphs"]
    assert graphs["target"]["invariance"] == {"single_row": True, "chain": True, "tree": True, "max_tree_diff": 0.0}
    engine = Engine(static.path)
    assert isinstance(engine.target, StaticRunner)
    found = measure(engine.target, engine.vocab)  # the compiled variants themselves, q=1 against q=8
    assert found.single_row and found.chain and found.tree
    accepted = []
    for prompt in ([5, 6, 7], [11, 3], list(range(1, 30))):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=24, speculative=False))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=24))
        assert spec.output_ids == plain.output_ids
        accepted.append(spec.mean_accepted_len)
    assert np.mean(accepted) > 1.0


def test_static_qdq_needs_the_npu_flavour_and_a_w8a8_bundle(compiled, bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w8a8, _ = compiled
    with pytest.raises(InputError, match="activations static-qdq is built for the npu flavour only"):
        compile_bundle(CompileConfig(output=tmp_path / "cpu", target=GraphFlavour.cpu,
                                     activations=Activations.static_qdq), w8a8)
    with pytest.raises(InputError, match="rewrites the w8a8 format, and the bundle is not quantized"):
        compile_bundle(CompileConfig(output=tmp_path / "float", activations=Activations.static_qdq, **NPU),  # type: ignore[arg-type]
                       bundle_factory("llama"))
    shown = CliRunner().invoke(app, ["compile", str(w8a8.path), "-o", str(tmp_path / "cli"), "--target", "cpu",
                                     "--activations", "static-qdq"])
    assert shown.exit_code != 0 and "--activations static-qdq is built for the npu flavour only" in shown.output


def test_cli_compiles_static_qdq_and_says_it_is_lossy(compiled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    w8a8, _ = compiled
    shown = CliRunner().invoke(app, ["compile", str(w8a8.path), "-o", str(tmp_path / "npu"), "--target", "npu",
                                     "--activations", "static-qdq", "--buckets", "4", "--draft-buckets", "1",
                                     "--prefill-chunk", "4", "--max-context", "32", "--context-buckets", "32"],
                               env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "lossy vs dynamic w8a8" in shown.output and "MatMulInteger form -> QDQ form" in shown.output
    assert "within its format's own measured difference" in shown.output


def test_int8_variants_add_what_the_padded_dynamic_graph_moves(compiled, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Default (MatMulInteger) form: each variant's tolerance adds the dynamic graph's own difference over the
    variant's padded buffer, measured on the same inputs (0.097 at the 1.24B shape, context 512)."""
    w8a8, _ = compiled
    grid = {**NPU, "buckets": (4,), "draft_buckets": (1,), "context_buckets": (96,)}
    npu = compile_bundle(CompileConfig(output=tmp_path / "npu", **grid), w8a8)  # type: ignore[arg-type]
    report = dump(npu.manifest.reports)["compile"]
    assert "activations" not in report and set(report["validation"]) == set(report["max_abs_diff"])
    for name, check in report["validation"].items():
        assert check["format_error"] is None and 0 <= check["padding_error"] < 0.05, (name, check)
        assert check["tolerance"] >= 0.02 + check["padding_error"] - 1e-9
        assert report["max_abs_diff"][name] <= check["tolerance"]
