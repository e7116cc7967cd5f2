"""Round-to-nearest with onnxruntime's own C++ blockwise packer (the field's reference RTN).

ORT's `quantize_matmul_{4,8}bits` writes MatMulNBits tensors directly; we unpack them to codes so
every method hands the same arrays to our packer (which reproduces ORT's bytes exactly).
"""

from __future__ import annotations

import numpy as np

from specdec.pipeline.quantize.algorithms.base import LayerStats, QuantResult, QuantSpec
from specdec.pipeline.quantize.packing import unpack


def quantize(weight: np.ndarray, spec: QuantSpec, stats: LayerStats | None = None) -> QuantResult:
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits

    k, n = weight.shape
    blocks = k // spec.block_size
    per_byte = 8 // spec.bits
    dtype = np.dtype(spec.scale_dtype)
    packed = np.zeros((n, blocks, spec.block_size * spec.bits // 8), np.uint8)
    scales = np.zeros((n, blocks), dtype)
    zero_points = np.zeros((n, (blocks + per_byte - 1) // per_byte), np.uint8)
    routine = quantize_matmul_4bits if spec.bits == 4 else quantize_matmul_8bits
    routine(packed, np.ascontiguousarray(weight, dtype), scales, zero_points, spec.block_size, n, k, spec.symmetric)
    codes, zero = unpack(packed, None if spec.symmetric else zero_points, K=k, N=n, bits=spec.bits,
                         block_size=spec.block_size)
    return QuantResult(codes, scales, zero)
