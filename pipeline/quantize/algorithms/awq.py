"""AWQ (Lin et al., 2024): activation-aware per-input-channel scales searched on calibration data.

Input channels that carry large activations matter most to the output; scaling their weights up
by s before rounding shrinks their relative rounding error, and dividing the input by s keeps
the product unchanged: x W = (x diag(1/s)) (diag(s) W). With s = mean|x|^alpha, normalised so
sqrt(max(s) min(s)) = 1, alpha is searched on a grid of 20 points in [0, 1) to minimise
||X W - X diag(1/s) Q(diag(s) W)||^2 on a sample of calibration rows; alpha = 0 is plain RTN, so
the search never does worse than RTN on those rows.

The original folds 1/s into the preceding norm or linear layer. On an exported graph that
producer varies by architecture (RMSNorm, LayerNorm, a shared input of q/k/v), so the layer gets
its own `Mul(x, 1/s)` in front of MatMulNBits instead: one path for every architecture at the
cost of an elementwise multiply. AWQ's weight-clipping search is not implemented.
"""

from __future__ import annotations

import numpy as np

from specdec.pipeline.quantize.algorithms.base import LayerStats, QuantResult, QuantSpec, round_to_nearest
from specdec.pipeline.quantize.packing import dequantize

GRID = 20
_MIN_SCALE = 1e-4
# Each grid point costs rows x K x N multiply-adds; a 150k-token head would take minutes with
# every sampled row, so wide layers search on fewer (evenly spaced) rows, never under 128.
_SEARCH_MACS = 4_000_000_000
_MIN_ROWS = 128


def channel_scales(mean_abs: np.ndarray, alpha: float) -> np.ndarray:
    scales = np.maximum(np.power(mean_abs.astype(np.float64), alpha), _MIN_SCALE)
    normalised: np.ndarray = scales / np.sqrt(scales.max() * scales.min())
    return normalised


def quantize(weight: np.ndarray, spec: QuantSpec, stats: LayerStats | None) -> QuantResult:
    if stats is None or stats.sample is None or stats.abs_sum is None:
        raise ValueError("AWQ needs calibration activations (mean |x| and a row sample) for every layer")
    k, n = weight.shape
    keep = max(_MIN_ROWS, _SEARCH_MACS // (k * n))
    rows = stats.sample.astype(np.float32)
    if rows.shape[0] > keep:
        rows = rows[np.linspace(0, rows.shape[0] - 1, keep).astype(np.int64)]
    w = weight.astype(np.float32)
    reference = rows @ w
    best: tuple[float, float, QuantResult, np.ndarray | None] | None = None
    losses: list[float] = []
    for step in range(GRID):
        alpha = step / GRID
        scales = channel_scales(stats.mean_abs, alpha)
        # The graph multiplies by 1/s in its own dtype: search with exactly that factor.
        inverse = None if alpha == 0 else (1.0 / scales).astype(spec.scale_dtype)
        result = round_to_nearest((w * scales[:, None]).astype(np.float32), spec)
        applied = dequantize(result.codes, result.scales, result.zero_points, spec.block_size)
        scaled_rows = rows if inverse is None else rows * inverse.astype(np.float32)
        loss = float(np.sum(np.square((scaled_rows @ applied - reference).astype(np.float64))))
        losses.append(loss)
        if best is None or loss < best[0]:
            best = (loss, alpha, result, inverse)
    assert best is not None
    loss, alpha, result, inverse = best
    info = {"alpha": alpha, "loss_vs_rtn": loss / losses[0] if losses[0] > 0 else 1.0}
    return QuantResult(result.codes, result.scales, result.zero_points, input_scale=inverse, info=info)
