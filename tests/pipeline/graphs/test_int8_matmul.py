"""The w8a8 linear layer on onnxruntime: equal to its numpy reference, row-invariant, never saturating."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from specdec.pipeline.engine.int8_range import x86_without_vnni
from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.graphs.query import unique_name


def _session(weight: int8_matmul.Int8Columns, bias: np.ndarray | None = None,  # type: ignore[no-untyped-def]
             contrib: bool = False):
    import onnxruntime as ort

    taken: set[str] = {"x", "y"}
    inits: list[onnx.TensorProto] = []
    bias_name = None
    if bias is not None:
        inits.append(onnx.numpy_helper.from_array(bias, "bias"))
        bias_name = "bias"
    nodes, more = int8_matmul.emit("x", "y", weight, "layer", lambda base: unique_name(base, taken), bias=bias_name,
                                   contrib=contrib)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "q", weight.K])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "q", weight.N])
    graph = helper.make_graph(nodes, "w8a8", [x], [y], inits + more)
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("com.microsoft", 1)] if contrib else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    if not contrib:  # onnx has no schema for onnxruntime's contrib ops
        onnx.checker.check_model(model, full_check=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]), model


@pytest.mark.parametrize("contrib", [False, True], ids=["standard", "contrib"])
@pytest.mark.parametrize("bits", [7, 8])
def test_graph_equals_reference_bitwise_and_is_close_to_float(bits: int, contrib: bool) -> None:
    if bits == 8 and x86_without_vnni():
        pytest.skip("8-bit weights saturate AVX2's int16 pair sums on x86 without VNNI; the runtime refuses them "
                    "here (tests/pipeline/quantize/test_w8a8.py::test_cli_and_inspect checks the refusal)")
    rng = np.random.default_rng(bits)
    weight = (rng.standard_normal((256, 96)) * 0.05).astype(np.float32)
    columns = int8_matmul.quantize_columns(weight, bits)
    assert int(np.abs(columns.codes.astype(np.int16)).max()) == int8_matmul.WEIGHT_MAX[bits]
    session, _ = _session(columns, contrib=contrib)
    x = rng.standard_normal((1, 40, 256)).astype(np.float32)
    x[0, 3] = 0.0  # an all-zero row: scale falls back to `tiny`, output exactly 0
    got = session.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, int8_matmul.reference(x, columns))
    assert not got[0, 3].any()
    exact = x @ weight
    assert np.abs(got - exact).max() / np.abs(exact).max() < (0.03 if bits == 7 else 0.015)


@pytest.mark.parametrize("contrib", [False, True], ids=["standard", "contrib"])
def test_a_row_alone_equals_the_same_row_in_any_batch(contrib: bool) -> None:
    """Row invariance, bitwise: random rows alone vs inside calls of 2..64 rows in random order."""
    rng = np.random.default_rng(0)
    columns = int8_matmul.quantize_columns((rng.standard_normal((512, 384)) * 0.02).astype(np.float32), 7)
    session, _ = _session(columns, bias=rng.standard_normal(384).astype(np.float32), contrib=contrib)
    rows = (rng.standard_normal((64, 512)) * rng.uniform(0.01, 30, (64, 1))).astype(np.float32)
    alone = np.stack([session.run(None, {"x": rows[None, [i]]})[0][0, 0] for i in range(64)])
    for size in (2, 3, 4, 7, 8, 16, 31, 32, 64):
        for _ in range(3):
            pick = rng.choice(64, size, replace=False)
            batch = session.run(None, {"x": rows[None, pick]})[0][0]
            np.testing.assert_array_equal(batch, alone[pick])


@pytest.mark.parametrize("contrib", [False, True], ids=["standard", "contrib"])
def test_seven_bit_weights_never_saturate(contrib: bool) -> None:
    """Adversarial rows (255 wherever a column's codes are positive) against +-63 codes: the int32
    result equals exact integer arithmetic (AVX2's vpmaddubsw pairs stay within int16)."""
    rng = np.random.default_rng(1)
    codes = rng.integers(-63, 64, (1024, 64)).astype(np.int8)
    codes[:, :4] = 63
    columns = int8_matmul.Int8Columns(codes, np.ones(64, np.float32), 63)
    session, _ = _session(columns, contrib=contrib)
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


_SATURATION_PROBE = """
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(0)
for limit in (127, 63):
    codes = rng.integers(-limit, limit + 1, (256, 16)).astype(np.int8)
    codes[:, :4] = limit
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w", "za"], ["y"])], "probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, ["m", 256])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["m", 16])],
        [numpy_helper.from_array(codes, "w"), numpy_helper.from_array(np.array(128, np.uint8), "za")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rows = np.where(codes[:, :8].T > 0, 255, 1).astype(np.uint8)
    exact = (rows.astype(np.int64) - 128) @ codes.astype(np.int64)
    print(limit, bool(np.array_equal(session.run(None, {"a": rows})[0], exact)))
"""


@pytest.mark.slow
def test_on_an_avx2_cpu_without_vnni_only_seven_bit_weights_are_exact() -> None:
    """The reason for --w8a8-weight-bits 7: on an emulated Haswell (AVX2, no VNNI) onnxruntime's
    uint8 x int8 kernel saturates int16 pair sums with +-127 weights and is exact with +-63."""
    import shutil
    import subprocess
    import sys

    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-x86_64 is not installed")
    run = subprocess.run([qemu, "-cpu", "Haswell", sys.executable, "-c", _SATURATION_PROBE], capture_output=True,
                         text=True, timeout=600, check=True)
    assert run.stdout.split() == ["127", "False", "63", "True"]


def test_the_runtime_refuses_eight_bit_weights_on_x86_without_vnni() -> None:
    from specdec.pipeline.engine.int8_range import check_weight_range
    from specdec.pipeline.errors import BundleError
    from specdec.pipeline.records.manifest import GraphQuantization, Quantization

    def bundle(bits: int, fmt: str = "w8a8") -> Quantization:
        graph = GraphQuantization(method="rtn", group_size="channel", symmetric=True, accuracy_level=0, embeddings={},
                                  summary={}, layers={}, weight_bits=bits)
        return Quantization(format=fmt, domain="ai.onnx", graphs={"target": graph})

    haswell = "processor : 0\nflags : fpu sse2 avx avx2 fma\n"
    with pytest.raises(BundleError, match="saturate this CPU"):
        check_weight_range(bundle(8), machine="x86_64", cpuinfo=haswell)
    check_weight_range(bundle(7), machine="x86_64", cpuinfo=haswell)
    check_weight_range(bundle(8), machine="x86_64", cpuinfo="flags : avx2 avx_vnni\n")
    check_weight_range(bundle(8), machine="aarch64", cpuinfo="Features : asimd asimddp\n")
    check_weight_range(None, machine="x86_64", cpuinfo=haswell)
