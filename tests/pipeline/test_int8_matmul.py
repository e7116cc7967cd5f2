"""The w8a8 linear layer on onnxruntime: equal to its numpy reference, row-invariant, never saturating."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from specdec.pipeline import int8_matmul
from specdec.pipeline.graph_query import unique_name


def _session(weight: int8_matmul.Int8Columns, bias: np.ndarray | None = None):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    taken: set[str] = {"x", "y"}
    inits: list[onnx.TensorProto] = []
    bias_name = None
    if bias is not None:
        inits.append(onnx.numpy_helper.from_array(bias, "bias"))
        bias_name = "bias"
    nodes, more = int8_matmul.emit("x", "y", weight, "layer", lambda base: unique_name(base, taken), bias=bias_name)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "q", weight.K])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "q", weight.N])
    graph = helper.make_graph(nodes, "w8a8", [x], [y], inits + more)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]), model


@pytest.mark.parametrize("bits", [7, 8])
def test_graph_equals_reference_bitwise_and_is_close_to_float(bits: int) -> None:
    rng = np.random.default_rng(bits)
    weight = (rng.standard_normal((256, 96)) * 0.05).astype(np.float32)
    columns = int8_matmul.quantize_columns(weight, bits)
    assert int(np.abs(columns.codes.astype(np.int16)).max()) == int8_matmul.WEIGHT_MAX[bits]
    session, _ = _session(columns)
    x = rng.standard_normal((1, 40, 256)).astype(np.float32)
    x[0, 3] = 0.0  # an all-zero row: scale falls back to `tiny`, output exactly 0
    got = session.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, int8_matmul.reference(x, columns))
    assert not got[0, 3].any()
    exact = x @ weight
    assert np.abs(got - exact).max() / np.abs(exact).max() < (0.03 if bits == 7 else 0.015)


def test_a_row_alone_equals_the_same_row_in_any_batch() -> None:
    """Row invariance, bitwise: random rows alone vs inside calls of 2..64 rows in random order."""
    rng = np.random.default_rng(0)
    columns = int8_matmul.quantize_columns((rng.standard_normal((512, 384)) * 0.02).astype(np.float32), 7)
    session, _ = _session(columns, bias=rng.standard_normal(384).astype(np.float32))
    rows = (rng.standard_normal((64, 512)) * rng.uniform(0.01, 30, (64, 1))).astype(np.float32)
    alone = np.stack([session.run(None, {"x": rows[None, [i]]})[0][0, 0] for i in range(64)])
    for size in (2, 3, 4, 7, 8, 16, 31, 32, 64):
        for _ in range(3):
            pick = rng.choice(64, size, replace=False)
            batch = session.run(None, {"x": rows[None, pick]})[0][0]
            np.testing.assert_array_equal(batch, alone[pick])


def test_seven_bit_weights_never_saturate() -> None:
    """Adversarial rows (255 wherever a column's codes are positive) against +-63 codes: the int32
    result equals exact integer arithmetic (AVX2's vpmaddubsw pairs stay within int16)."""
    rng = np.random.default_rng(1)
    codes = rng.integers(-63, 64, (1024, 64)).astype(np.int8)
    codes[:, :4] = 63
    columns = int8_matmul.Int8Columns(codes, np.ones(64, np.float32), 63)
    session, _ = _session(columns)
    x = np.where(codes[:, :16].T > 0, 127.0, -127.0).astype(np.float32)[None]
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], int8_matmul.reference(x, columns))


def test_read_recovers_what_emit_wrote() -> None:
    rng = np.random.default_rng(2)
    columns = int8_matmul.quantize_columns(rng.standard_normal((64, 32)).astype(np.float32), 7)
    _, model = _session(columns)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    matmul = next(n for n in model.graph.node if n.op_type == "MatMulInteger")
    read = int8_matmul.read(matmul, inits.get, lambda name: consumers.get(name, []))
    assert read is not None and read[1] == "y"
    np.testing.assert_array_equal(read[0].codes, columns.codes)
    np.testing.assert_array_equal(read[0].scales, columns.scales)
    assert read[0].weight_max == 63
    both = int8_matmul.concatenate([columns, columns])
    assert both.N == 64 and both.K == 64
