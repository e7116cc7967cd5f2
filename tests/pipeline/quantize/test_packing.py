"""Our MatMulNBits packer against onnxruntime's packer (bytes) and its kernel (numbers)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.quantize.algorithms import QuantSpec
from specdec.pipeline.quantize.algorithms.rtn import quantize as ort_rtn
from specdec.pipeline.quantize.packing import dequantize, pack, unpack


def _ort_pack(weight: np.ndarray, bits: int, block: int, symmetric: bool) -> tuple[np.ndarray, ...]:
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits

    k, n = weight.shape
    blocks, per_byte = k // block, 8 // bits
    packed = np.zeros((n, blocks, block * bits // 8), np.uint8)
    scales = np.zeros((n, blocks), weight.dtype)
    zero_points = np.zeros((n, (blocks + per_byte - 1) // per_byte), np.uint8)
    (quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits)(packed, weight, scales, zero_points, block, n, k,
                                                                     symmetric)
    return packed, scales, zero_points


CASES = [(bits, symmetric, dtype) for bits in (4, 8) for symmetric in (False, True)
         for dtype in (np.float32, np.float16)]


@pytest.mark.parametrize(("bits", "symmetric", "dtype"), CASES)
def test_repacking_ort_rtn_codes_is_byte_identical(bits: int, symmetric: bool, dtype: type[np.floating]) -> None:
    rng = np.random.default_rng(bits + 2 * symmetric)
    k, n, block = 96, 40, 32  # three blocks per column: an odd count exercises zero-point padding
    weight = (rng.standard_t(4, size=(k, n)) * 0.05).astype(dtype)
    weight[:, 5] = 0.0  # an all-zero column: scale 0
    packed, scales, zero_points = _ort_pack(weight, bits, block, symmetric)
    codes, zero = unpack(packed, None if symmetric else zero_points, K=k, N=n, bits=bits, block_size=block)
    ours = pack(codes, scales, None if symmetric else zero, bits=bits, block_size=block)
    assert ours.weight.tobytes() == packed.tobytes()
    assert ours.scales.tobytes() == scales.reshape(-1).tobytes()
    if symmetric:
        assert ours.zero_points is None
    else:
        assert ours.zero_points is not None and ours.zero_points.tobytes() == zero_points.reshape(-1).tobytes()
    # The RTN quantizer hands the same arrays on.
    result = ort_rtn(weight, QuantSpec(bits, block, symmetric, dtype))
    assert np.array_equal(result.codes, codes) and np.array_equal(result.zero_points, zero)


def _matmul_nbits(k: int, n: int, bits: int, block: int, packed: object, accuracy_level: int) -> ort.InferenceSession:
    inits = [numpy_helper.from_array(packed.weight, "B"), numpy_helper.from_array(packed.scales, "scales")]  # type: ignore[attr-defined]
    inputs = ["A", "B", "scales"]
    if packed.zero_points is not None:  # type: ignore[attr-defined]
        inits.append(numpy_helper.from_array(packed.zero_points, "zero_points"))  # type: ignore[attr-defined]
        inputs.append("zero_points")
    node = helper.make_node("MatMulNBits", inputs, ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], inits)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.checker.check_model(model, full_check=True)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(("bits", "symmetric"), [(4, False), (4, True), (8, False), (8, True)])
def test_kernel_computes_x_times_dequantized_codes(bits: int, symmetric: bool) -> None:
    """Arbitrary codes (not from any quantizer) through our packer and ORT's kernel = X @ dequantize."""
    rng = np.random.default_rng(7)
    k, n, block = 192, 24, 64
    codes = rng.integers(0, 1 << bits, size=(k, n)).astype(np.uint8)
    scales = rng.uniform(0.001, 0.02, size=(n, k // block)).astype(np.float32)
    zero = (np.full((n, k // block), 1 << (bits - 1), np.uint8) if symmetric
            else rng.integers(0, 1 << bits, size=(n, k // block)).astype(np.uint8))
    packed = pack(codes, scales, None if symmetric else zero, bits=bits, block_size=block)
    x = rng.normal(size=(5, k)).astype(np.float32)
    got = _matmul_nbits(k, n, bits, block, packed, accuracy_level=0).run(None, {"A": x})[0]
    want = x.astype(np.float64) @ dequantize(codes, scales, zero, block).astype(np.float64)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_pack_rejects_bad_shapes() -> None:
    codes = np.zeros((64, 4), np.uint8)
    with pytest.raises(ValueError, match="does not divide"):
        pack(codes, np.ones((4, 2), np.float32), None, bits=4, block_size=48)
    with pytest.raises(ValueError, match="exceed 15"):
        pack(codes + 16, np.ones((4, 2), np.float32), None, bits=4, block_size=32)
    with pytest.raises(ValueError, match="supports"):
        pack(codes, np.ones((4, 2), np.float32), None, bits=3, block_size=32)


@pytest.mark.parametrize("k", [96, 100])  # a whole number of blocks (the broadcast path), and a ragged last block
def test_dequantize_is_codes_minus_zero_point_times_scale_per_block(k: int) -> None:
    rng = np.random.default_rng(7)
    n, block = 24, 32
    blocks = -(-k // block)
    codes = rng.integers(0, 16, size=(k, n), dtype=np.uint8)
    scales = rng.random((n, blocks)).astype(np.float16)
    zeros = rng.integers(0, 16, size=(n, blocks), dtype=np.uint8)
    got = dequantize(codes, scales, zeros, block)
    block_of = np.arange(k) // block
    expected = (codes.astype(np.float32) - zeros.astype(np.float32).T[block_of]) * scales.astype(np.float32).T[block_of]
    assert got.dtype == np.float32 and np.array_equal(got, expected)
