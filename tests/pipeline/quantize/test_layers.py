"""Finding, naming and rewriting linear layers on a small hand-built graph of every exported form."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.graphs.query import find_layers, load_weight
from specdec.pipeline.quantize.algorithms import LayerStats, QuantSpec, awq, rtn
from specdec.pipeline.quantize.layers import Rewrite, apply_rewrites
from specdec.pipeline.quantize.packing import pack

K, V = 64, 40


def _scopes(module: str, op: str) -> onnx.StringStringEntryProto:
    entry = onnx.StringStringEntryProto()
    entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(["", "model", module, op])
    return entry


def _model() -> onnx.ModelProto:
    """x -> MatMul(W1) -> Gemm(W2, b) -> Gemm(W3, transB) -> MatMul(Transpose(E)) = logits; Gather(E) = emb."""
    rng = np.random.default_rng(0)
    inits = {name: rng.normal(size=shape).astype(np.float32) * 0.2 for name, shape in
             (("W1", (K, K)), ("W2", (K, K)), ("b2", (K,)), ("W3", (K, K)), ("E", (V, K)))}
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
        helper.make_node("Gemm", ["h", "W2", "b2"], ["g"], name="gemm2"),
        helper.make_node("Gemm", ["g", "W3"], ["t"], name="gemm3", transB=1),
        helper.make_node("Transpose", ["E"], ["E_t"], name="tr", perm=[1, 0]),
        helper.make_node("MatMul", ["t", "E_t"], ["logits"], name="head"),
        helper.make_node("Gather", ["E", "ids"], ["emb"], name="embed"),
        helper.make_node("MatMul", ["x", "xt"], ["gram"], name="not_a_layer"),
        helper.make_node("Transpose", ["x"], ["xt"], name="tx"),
    ]
    nodes = [*nodes[:-2], nodes[-1], nodes[-2]]  # Transpose(x) before its MatMul
    for node, (module, op) in zip(nodes[:5], [("model.model.layers.0.mlp.up_proj", "linear"),
                                               ("model.transformer.h.0.mlp.c_fc", "addmm"),
                                               ("model.transformer.h.0.mlp.c_proj", "addmm_1"),
                                               ("model.lm_head", "t"), ("model.lm_head", "linear_1")], strict=True):
        node.metadata_props.append(_scopes(module, op))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, K]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
         for n, shape in (("logits", [2, V]), ("emb", [3, K]), ("gram", [2, 2]))],
        [numpy_helper.from_array(array, name) for name, array in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_find_layers_names_and_forms() -> None:
    layers = {layer.name: layer for layer in find_layers(_model())}
    assert list(layers) == ["model.layers.0.mlp.up_proj", "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj",
                            "lm_head"]
    assert layers["transformer.h.0.mlp.c_fc"].bias == "b2" and layers["transformer.h.0.mlp.c_fc"].op == "Gemm"
    assert layers["transformer.h.0.mlp.c_proj"].transposed  # Gemm transB=1
    head = layers["lm_head"]
    assert head.transposed and head.via_transpose == "E_t" and (head.K, head.N) == (K, V)
    np.testing.assert_array_equal(load_weight(_model(), head), numpy_helper.to_array(_model().graph.initializer[4]).T)


def test_names_fall_back_to_the_initializer() -> None:
    model = _model()
    for node in model.graph.node:
        del node.metadata_props[:]
    assert [layer.name for layer in find_layers(model)] == ["W1", "W2", "W3", "E"]


@pytest.mark.parametrize("with_awq", [False, True])
def test_rewrite_runs_and_matches_the_dequantized_weights(with_awq: bool) -> None:
    model = _model()
    layers = find_layers(model)
    rng = np.random.default_rng(1)
    rewrites, effective = [], []
    for layer in layers:
        weight = load_weight(model, layer)
        spec = QuantSpec(4, 32, False)
        if with_awq:
            x = rng.normal(size=(256, layer.K)).astype(np.float32)
            x[:, 5] *= 20
            stats = LayerStats(layer.K, rows=256, abs_sum=np.abs(x).sum(0).astype(np.float64), sample=x)
            result = awq.quantize(weight, spec, stats)
        else:
            result = rtn.quantize(weight, spec)
        rewrites.append(Rewrite(layer, pack(result.codes, result.scales, result.zero_points, bits=4, block_size=32),
                                result.input_scale, accuracy_level=0))
        effective.append(result.effective_weight(32))
    float_model = _model()
    apply_rewrites(model, rewrites)
    onnx.checker.check_model(model, full_check=True)

    ops = [node.op_type for node in model.graph.node]
    assert ops.count("MatMulNBits") == 4 and "Gemm" not in ops
    assert ops.count("Mul") == (4 if with_awq else 0) and ops.count("Add") == 1  # Gemm's bias
    assert "tr" not in {node.name for node in model.graph.node}  # the head's Transpose is dead
    names = {init.name for init in model.graph.initializer}
    assert {"W1", "W2", "W3"}.isdisjoint(names) and "E" in names  # the tied table still feeds Gather
    assert model.graph.node[0].metadata_props[0].key == "pkg.torch.onnx.name_scopes"

    feeds = {"x": rng.normal(size=(2, K)).astype(np.float32), "ids": np.array([0, 5, 39], np.int64)}
    got = dict(zip(["logits", "emb", "gram"], ort.InferenceSession(model.SerializeToString()).run(None, feeds),
                   strict=True))
    want = dict(zip(["logits", "emb", "gram"], ort.InferenceSession(float_model.SerializeToString()).run(None, feeds),
                    strict=True))
    h = feeds["x"].astype(np.float64) @ effective[0]
    g = h @ effective[1] + numpy_helper.to_array(float_model.graph.initializer[2])
    reference = (g @ effective[2]) @ effective[3]
    np.testing.assert_allclose(got["logits"], reference, atol=1e-4 * np.abs(reference).max())
    np.testing.assert_array_equal(got["emb"], want["emb"])
    np.testing.assert_array_equal(got["gram"], want["gram"])
