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
# Each grid point costs rows x K x N multiply-adds plus a rounding of the K x N weight. Wide layers
# search on fewer (evenly spaced) rows, never under 128, and past that on a sample of output
# columns: a block never spans columns, so each sampled column's rounding and loss are exactly what
# the full search would compute for it, and the loss over columns is a sum that an even sample
# estimates. Without it a tied 2048 x 128,256 head (Llama 3.2 1B) searched for over ten minutes;
# with it about one (benchmarks/RESULTS-archive.md, toolchain_scale.py at the Llama-3.2-1B shape).
_SEARCH_MACS = 4_000_000_000
_MIN_ROWS = 128
_MIN_COLUMNS = 4096


def channel_scales(mean_abs: np.ndarray, alpha: float) -> np.ndarray:
    scales = np.maximum(np.power(mean_abs.astype(np.float64), alpha), _MIN_SCALE)
    normalised: np.ndarray = scales / np.sqrt(scales.max() * scales.min())
    return normalised


def _evenly(count: int, keep: int) -> np.ndarray | None:
    """Indices of `keep` evenly spaced items out of `count`, None when all of them are kept."""
    return None if count <= keep else np.linspace(0, count - 1, keep).astype(np.int64)


def search_sample(rows: int, k: int, n: int) -> tuple[int, int]:
    """(rows, columns) the alpha search uses for a K x N layer with `rows` calibration rows."""
    kept_rows = min(rows, max(_MIN_ROWS, _SEARCH_MACS // (k * n)))
    kept_columns = min(n, max(_MIN_COLUMNS, _SEARCH_MACS // (kept_rows * k)))
    return kept_rows, kept_columns


def quantize(weight: np.ndarray, spec: QuantSpec, stats: LayerStats | None) -> QuantResult:
    if stats is None or stats.sample is None or stats.abs_sum is None:
        raise ValueError("AWQ needs calibration activations (mean |x| and a row sample) for every layer")
    k, n = weight.shape
    kept_rows, kept_columns = search_sample(stats.sample.shape[0], k, n)
    rows = stats.sample.astype(np.float32)
    row_index = _evenly(rows.shape[0], kept_rows)
    if row_index is not None:
        rows = rows[row_index]
    column_index = _evenly(n, kept_columns)
    w = weight.astype(np.float32, copy=False)
    searched = w if column_index is None else np.ascontiguousarray(w[:, column_index])
    reference = rows @ searched
    best: tuple[float, float, np.ndarray | None] | None = None
    losses: list[float] = []
    for step in range(GRID):
        alpha = step / GRID
        scales = channel_scales(stats.mean_abs, alpha)
        # The graph multiplies by 1/s in its own dtype: search with exactly that factor.
        inverse = None if alpha == 0 else (1.0 / scales).astype(spec.scale_dtype)
        result = round_to_nearest(searched, spec, input_scales=scales)
        applied = dequantize(result.codes, result.scales, result.zero_points, spec.block_size)
        scaled_rows = rows if inverse is None else rows * inverse.astype(np.float32)
        loss = float(np.sum(np.square((scaled_rows @ applied - reference).astype(np.float64))))
        losses.append(loss)
        if best is None or loss < best[0]:
            best = (loss, alpha, inverse)
    assert best is not None
    loss, alpha, inverse = best
    scales = channel_scales(stats.mean_abs, alpha)
    result = round_to_nearest(w, spec, input_scales=scales)
    info = {"alpha": alpha, "loss_vs_rtn": loss / losses[0] if losses[0] > 0 else 1.0,
            "search_rows": float(rows.shape[0]), "search_columns": float(searched.shape[1])}
    return QuantResult(result.codes, result.scales, result.zero_points, input_scale=inverse, info=info)
