"""What every quantizer takes and returns, and the blockwise scale / zero-point rule they share.

The rule mirrors onnxruntime's MLAS packer (`range2scalezp` / `range2scale` in
`blockwise_quant`) operation for operation in float32, so numpy RTN codes are bit-identical to
ORT's C++ RTN (a test checks it) and GPTQ/AWQ differ from RTN only by their algorithm, never by
a different rounding convention:

- asymmetric: the range is widened to include 0, scale = (max - min) / (2^bits - 1),
  zero point = round(-min / scale);
- symmetric: scale = -(the value of largest magnitude) / 2^(bits-1), zero point 2^(bits-1)
  (so that value lands exactly on code 0; the scale may be negative, which MatMulNBits accepts);
- code = clamp(round(w * (1 / scale) + zero point)), rounding half away from zero like roundf.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from specdec.pipeline.quantize.packing import dequantize, max_code, symmetric_zero_point

HESSIAN = "hessian"  # GPTQ: the sum of x^T x over calibration rows
ACTIVATIONS = "activations"  # AWQ: mean |x| per input channel and a sample of rows
ERROR_CHUNK = 1 << 20  # weight values per chunk of QuantResult.relative_error


@dataclass(frozen=True)
class QuantSpec:
    bits: int
    block_size: int
    symmetric: bool
    scale_dtype: type[np.floating] = np.float32  # the graph's activation dtype


@dataclass
class LayerStats:
    """Calibration statistics of one layer input (shared by layers reading the same tensor)."""

    width: int
    rows: int = 0
    xtx: np.ndarray | None = None  # [K, K] float32
    abs_sum: np.ndarray | None = None  # [K] float64
    sample: np.ndarray | None = None  # [R, K] float32

    @property
    def hessian(self) -> np.ndarray:
        if self.xtx is None or self.rows == 0:
            raise ValueError("no x^T x was collected for this layer")
        return 2.0 * self.xtx.astype(np.float64) / self.rows

    @property
    def mean_abs(self) -> np.ndarray:
        if self.abs_sum is None or self.rows == 0:
            raise ValueError("no activations were collected for this layer")
        return self.abs_sum / self.rows


@dataclass(frozen=True)
class QuantResult:
    codes: np.ndarray  # uint8 [K, N]
    scales: np.ndarray  # [N, k_blocks] in the spec's scale dtype
    zero_points: np.ndarray  # uint8 [N, k_blocks]
    input_scale: np.ndarray | None = None  # [K]: the layer input is multiplied by this first (AWQ's 1/s)
    info: dict[str, float] = field(default_factory=dict)

    def effective_weight(self, block_size: int) -> np.ndarray:
        """The W[K, N] the quantized layer applies: diag(input_scale) @ dequantize(...)."""
        weight = dequantize(self.codes, self.scales, self.zero_points, block_size).astype(np.float64)
        if self.input_scale is not None:
            weight = self.input_scale.astype(np.float64)[:, None] * weight
        return weight

    def relative_error(self, weight: np.ndarray, block_size: int) -> float:
        """||effective_weight - weight|| / ||weight||, without effective_weight's float64 copy."""
        n = weight.shape[1]
        scales, zero_points = self.scales.reshape(n, -1), self.zero_points.reshape(n, -1)
        factor = None if self.input_scale is None else self.input_scale.astype(np.float32)[:, None]

        def columns(part: slice) -> np.ndarray:
            approx = dequantize(self.codes[:, part], scales[part], zero_points[part], block_size)
            return approx if factor is None else approx * factor

        return relative_error(weight, columns)


def relative_error(weight: np.ndarray, approx: Callable[[slice], np.ndarray]) -> float:
    """||A - W|| / ||W|| for W [K, N], A's columns from `approx(columns)`, in float32 column chunks.

    A 1B model's tied head is 2048 x 128,256: a float64 copy of it, of its approximation and of
    their difference is 6 GB; chunks of ERROR_CHUNK values stay small and only the sums are float64."""
    k, n = weight.shape
    step = max(1, ERROR_CHUNK // max(k, 1))
    error, norm = 0.0, 0.0
    for start in range(0, n, step):
        part = slice(start, min(start + step, n))
        exact = weight[:, part].astype(np.float32)
        difference = approx(part).astype(np.float32) - exact
        error += float(np.einsum("ij,ij->", difference, difference, dtype=np.float64))
        norm += float(np.einsum("ij,ij->", exact, exact, dtype=np.float64))
    return math.sqrt(error / norm) if norm else 0.0


@dataclass(frozen=True)
class Algorithm:
    name: str
    needs: frozenset[str]
    run: Callable[[np.ndarray, QuantSpec, LayerStats | None], QuantResult]


def _roundf(values: np.ndarray) -> np.ndarray:
    """Half away from zero, like C's roundf."""
    if values.dtype == np.float32:
        # In float32, which halves the memory traffic of the float64 form below (the rounding was a
        # third of an AWQ search): rint rounds ties to even, and x - rint(x) is exact for float32 x
        # (two floats within a factor of two), so the ties are found exactly and moved away from zero.
        nearest = np.rint(values)
        tie = np.abs(values - nearest) == np.float32(0.5)
        rounded: np.ndarray = np.where(tie, values + np.copysign(np.float32(0.5), values), nearest)
        return rounded
    # float64 so |x| + 0.5 is exact for float32 x
    wide = values.astype(np.float64)
    return np.sign(wide) * np.floor(np.abs(wide) + 0.5)


def fit_params(groups: np.ndarray, spec: QuantSpec) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point of each group along the last axis: ([...] float32, [...] float32)."""
    values = groups.astype(np.float32)
    low, high = values.min(axis=-1), values.max(axis=-1)
    if spec.symmetric:
        extreme = np.where(np.abs(high) > np.abs(low), high, low)
        scale = (extreme / np.float32(-symmetric_zero_point(spec.bits))).astype(np.float32)
        zero = np.full(scale.shape, symmetric_zero_point(spec.bits), np.float32)
    else:
        low, high = np.minimum(low, np.float32(0)), np.maximum(high, np.float32(0))
        scale = ((high - low) / np.float32(max_code(spec.bits))).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            zero_fp = np.where(scale != 0, np.float32(0) - low / scale, low).astype(np.float32)
        zero = np.clip(_roundf(zero_fp), 0, max_code(spec.bits)).astype(np.float32)
    # Codes are computed with the scale as stored (fp16 graphs store fp16 scales), as MLAS does.
    return scale.astype(spec.scale_dtype).astype(np.float32), zero


def quantize_with(values: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int) -> np.ndarray:
    """Codes of `values` under given scale and zero point (broadcasting), as uint8."""
    scale32 = np.asarray(scale, np.float32)
    with np.errstate(divide="ignore"):
        reciprocal = np.where(scale32 != 0, np.float32(1) / scale32, np.float32(0)).astype(np.float32)
    scaled = (values.astype(np.float32) * reciprocal).astype(np.float32) + np.asarray(zero, np.float32)
    codes: np.ndarray = np.clip(_roundf(scaled.astype(np.float32)), 0, max_code(bits)).astype(np.uint8)
    return codes


# Output columns rounded at a time: each column's blocks are independent, and the rounding's
# float64 temporaries (about 10 bytes a weight each) on a whole 2048 x 128,256 head peaked past
# 20 GiB in an AWQ run at the Llama-3.2-1B shape.
RTN_COLUMNS = 4096


def round_to_nearest(weight: np.ndarray, spec: QuantSpec,
                     input_scales: np.ndarray | None = None) -> QuantResult:
    """Plain blockwise RTN in numpy (bit-identical to ORT's C++ packer); AWQ's inner quantizer.
    `input_scales` [K]: round diag(s) W instead (as float32 of the float64 product), a chunk at a time."""
    k, n = weight.shape
    blocks = k // spec.block_size
    codes = np.empty((k, n), np.uint8)
    scales = np.empty((n, blocks), np.float32)
    zeros = np.empty((n, blocks), np.float32)
    for start in range(0, n, RTN_COLUMNS):
        part = weight[:, start:start + RTN_COLUMNS]
        if input_scales is not None:
            part = part * input_scales[:, None]
        count = part.shape[1]
        groups = part.astype(np.float32).T.reshape(count, blocks, spec.block_size)
        scale, zero = fit_params(groups, spec)
        chunk = quantize_with(groups, scale[..., None], zero[..., None], spec.bits)
        codes[:, start:start + count] = chunk.reshape(count, k).T
        scales[start:start + count], zeros[start:start + count] = scale, zero
    return QuantResult(codes, scales.astype(spec.scale_dtype), zeros.astype(np.uint8))
