"""The `w8a8` linear layer: per-channel int8 weights x per-row dynamic uint8 activations.

    y = (MatMulInteger(q(x), W_int8, a_zero_point=128) as float) * row_scale * column_scale

- weights: symmetric per output column, `codes = round(W / s_col)` in [-weight_max, weight_max],
  `s_col = max|W[:, n]| / weight_max`; no zero point (MatMulInteger's b_zero_point defaults to 0).
- activations: each row on its own, `s_row = max(max|x_row| / 127, tiny)`,
  `q(x) = round(x / s_row) + 128` as uint8 (|x / s_row| <= 127, so no clip is needed).
- the product is accumulated in int32 (no rounding) and rescaled per row and per column.

Every step is either elementwise, per row or exact integer arithmetic, so a row's output cannot
depend on the other rows of a call: speculation over this format is exact by construction (the
invariance test in tests/pipeline/test_int8_matmul.py checks it bitwise against batches of 2..64).
The graph uses standard ops only (opset 13+), so any onnxruntime runs it.

Why not onnxruntime's contrib ops: `DynamicQuantizeMatMul` and `DynamicQuantizeLinear` +
`MatMulIntegerToFloat` quantize the activations with ONE scale for the whole tensor, so a row's
codes depend on the largest value among the other rows of the call: not row-invariant, and
speculative output would drift from plain output.

Why weight_max is a choice (7 or 8 bits): x86 CPUs without VNNI multiply uint8 x int8 with AVX2's
`vpmaddubsw`, which adds two products into a saturating int16: 2 x 255 x 127 overflows it, 2 x 255
x 63 does not. With 7-bit weights (+-63) no kernel saturates; CPUs with VNNI (AVX-VNNI,
AVX512-VNNI: 32-bit accumulation) and arm64 (sdot/udot, smmla) are exact with the full +-127.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.graphs.query import MS_DOMAIN

ACTIVATION_ZERO_POINT = 128
ACTIVATION_MAX = 127
# weight bits -> largest |code|; 7 bits is safe on every CPU, 8 bits needs VNNI or arm64 (docstring)
WEIGHT_MAX = {7: 63, 8: 127}
_TINY = np.finfo(np.float32).tiny
_CHUNK = 1 << 22  # weight values per chunk of quantize_columns


@dataclass(frozen=True)
class Int8Columns:
    """A w8a8 weight: int8 codes [K, N] and one float32 scale per output column [N]."""

    codes: np.ndarray
    scales: np.ndarray
    weight_max: int

    @property
    def K(self) -> int:
        return int(self.codes.shape[0])

    @property
    def N(self) -> int:
        return int(self.codes.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes)

    def dequantized(self, columns: slice = slice(None)) -> np.ndarray:
        weight: np.ndarray = (self.codes[:, columns].astype(np.float32) * self.scales[None, columns]).astype(np.float32)
        return weight


def quantize_columns(weight: np.ndarray, weight_bits: int) -> Int8Columns:
    """Round-to-nearest per output column of W [K, N] (x @ W)."""
    limit = WEIGHT_MAX[weight_bits]
    k, n = weight.shape
    codes = np.empty((k, n), np.int8)
    scales = np.empty(n, np.float32)
    step = max(1, _CHUNK // max(k, 1))  # a 128k-token head's float temporaries would be GBs each
    for start in range(0, n, step):
        part = slice(start, min(start + step, n))
        w = weight[:, part].astype(np.float32)
        peak = np.abs(w).max(axis=0)
        scales[part] = np.where(peak > 0, peak / np.float32(limit), np.float32(1.0))
        codes[:, part] = np.clip(np.rint(w / scales[None, part]), -limit, limit)
    return Int8Columns(codes, scales, limit)


def concatenate(parts: list[Int8Columns]) -> Int8Columns:
    """Layers sharing an input side by side: each column keeps its own codes and scale."""
    return Int8Columns(np.concatenate([p.codes for p in parts], axis=1), np.concatenate([p.scales for p in parts]),
                       max(p.weight_max for p in parts))


def reference(x: np.ndarray, weight: Int8Columns) -> np.ndarray:
    """What the emitted graph computes, in numpy (float32 steps in the graph's order)."""
    x = x.astype(np.float32)
    row = np.maximum(np.abs(x).max(axis=-1, keepdims=True) / np.float32(ACTIVATION_MAX), np.float32(_TINY))
    codes = np.rint(x / row).astype(np.int64)  # the +128 / -128 of the zero point cancel exactly
    acc = codes @ weight.codes.astype(np.int64)
    out: np.ndarray = ((acc.astype(np.float32) * row) * weight.scales).astype(np.float32)
    return out


def emit(x: str, out: str, weight: Int8Columns, prefix: str, name: Callable[[str], str],
         bias: str | None = None, contrib: bool = False) -> tuple[list[onnx.NodeProto], list[TensorProto]]:
    """Nodes and initializers computing `out = x @ W (+ bias)` in the w8a8 format.

    `name(base)` returns a name unused in the target graph (the caller's namer); the int8 codes are
    the initializer `{prefix}.qweight8` and the column scales `{prefix}.column_scales` (read()).

    `contrib` (the fused cpu flavour, onnxruntime only): the same values bit for bit in three nodes
    fewer. `QuantizeLinear` with step 1 and zero point 128 is Round, Add and Cast in one (both round
    half to even; the codes are in range), and com.microsoft `MatMulIntegerToFloat` with both scales 1
    is MatMulInteger and the Cast (an int32 sum times 1.0 is exact). The row and column rescaling
    stay two Muls: the op takes one A scale per tensor, and folding the column scales into it would
    change the rounding order. A plain step runs ~200 fewer nodes on a 16-layer target. The portable
    graph keeps the standard form: other runtimes may lack the contrib op.
    """
    inits = [numpy_helper.from_array(weight.codes, name(f"{prefix}.qweight8")),
             numpy_helper.from_array(weight.scales.astype(np.float32), name(f"{prefix}.column_scales")),
             numpy_helper.from_array(np.array([-1], np.int64), name(f"{prefix}.last_axis")),
             numpy_helper.from_array(np.array(ACTIVATION_MAX, np.float32), name(f"{prefix}.act_max")),
             numpy_helper.from_array(np.array(_TINY, np.float32), name(f"{prefix}.tiny")),
             numpy_helper.from_array(np.array(ACTIVATION_ZERO_POINT, np.float32), name(f"{prefix}.zero_point_f")),
             numpy_helper.from_array(np.array(ACTIVATION_ZERO_POINT, np.uint8), name(f"{prefix}.zero_point"))]
    codes, scales, axis, act_max, tiny, zp_float, zp = (i.name for i in inits)
    nodes: list[onnx.NodeProto] = []

    def node(op: str, inputs: list[str], tag: str, domain: str = "", **attrs: object) -> str:
        output = out if tag == "out" else name(f"{prefix}/{tag}")
        made = helper.make_node(op, inputs, [output], name=name(f"{prefix}/{tag}_node"), domain=domain)
        made.attribute.extend(helper.make_attribute(key, value) for key, value in attrs.items())
        nodes.append(made)
        return output

    peak = node("ReduceMax", [node("Abs", [x], "abs"), axis], "row_max", keepdims=1)
    row = node("Max", [node("Div", [peak, act_max], "row_scale_raw"), tiny], "row_scale")
    scaled = node("Div", [x, row], "scaled")
    if contrib:
        inits.append(numpy_helper.from_array(np.array(1.0, np.float32), name(f"{prefix}.unit_scale")))
        unit = inits[-1].name
        quantized = node("QuantizeLinear", [scaled, unit, zp], "x_uint8")
        acc_float = node("MatMulIntegerToFloat", [quantized, codes, unit, unit, zp], "acc_float", domain=MS_DOMAIN)
    else:
        shifted = node("Add", [node("Round", [scaled], "rounded"), zp_float], "shifted")
        quantized = node("Cast", [shifted], "x_uint8", to=TensorProto.UINT8)
        acc = node("MatMulInteger", [quantized, codes, zp], "acc_int32")
        acc_float = node("Cast", [acc], "acc_float", to=TensorProto.FLOAT)
    rescaled = node("Mul", [acc_float, row], "row_rescaled")
    node("Mul", [rescaled, scales], "out" if bias is None else "product")
    if bias is not None:
        nodes.append(helper.make_node("Add", [nodes[-1].output[0], bias], [out], name=name(f"{prefix}/bias_node")))
    return nodes, inits


def read(matmul: onnx.NodeProto, constant: Callable[[str], np.ndarray | None],
         consumers: Callable[[str], list[onnx.NodeProto]]) -> tuple[Int8Columns, str] | None:
    """The weight of an emitted w8a8 layer from its MatMulInteger node, and the layer's output name
    before any bias (the column-scale Mul's output); None if the node is not such a layer."""
    codes = constant(matmul.input[1]) if len(matmul.input) > 1 else None
    if codes is None or codes.dtype != np.int8 or codes.ndim != 2:
        return None
    chain = [matmul]
    for op in ("Cast", "Mul", "Mul"):
        after = [n for n in consumers(chain[-1].output[0]) if n.op_type == op]
        if len(after) != 1:
            return None
        chain.append(after[0])
    last = chain[-1]
    scales = next((value for value in (constant(i) for i in last.input) if value is not None), None)
    if scales is None or scales.shape != (codes.shape[1],):
        return None
    limit = int(np.abs(codes.astype(np.int16)).max()) if codes.size else 0
    return Int8Columns(codes, scales.astype(np.float32), 63 if limit <= 63 else 127), last.output[0]
