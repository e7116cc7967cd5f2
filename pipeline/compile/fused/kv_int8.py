"""Static scales of an int8 KV cache (records/kv_policy.py `int8`).

onnxruntime's GroupQueryAttention (checked on 1.32, CPU) takes int8 past/present buffers with
`k_quant_type`/`v_quant_type` PER_CHANNEL and float scales [kv_heads, 1, head_dim]: it quantizes
each row it writes (round, saturate to ±127) and dequantizes the cache inside the attention. The
scales are inputs, not computed per row, so they are calibrated here: the float fused graph runs
the calibration text the way the runtime does, and each layer's scale is the largest magnitude
its keys (already rotated, as the cache holds them) and values reach per head and channel, / 127.
A row beyond it saturates; the quality report measures what that and the rounding cost.
"""

from __future__ import annotations

import numpy as np

from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.engine.runner import causal, no_scratch

FLOOR = 1e-6  # a channel that never moves still needs a positive scale


def calibrate_scales(runner: FusedRunner, tokens: list[int], max_context: int,
                     windows: int = 4) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer, (key scale, value scale) [kv_heads, 1, head_dim] float32, from up to `windows`
    prefills of `max_context` tokens of `tokens` through the float graph `runner`."""
    length = min(max_context, len(tokens))
    peaks: list[np.ndarray] | None = None
    for start in range(0, len(tokens) - length + 1, length)[:windows]:
        ids = np.asarray(tokens[start : start + length], np.int64)
        runner.reset()
        runner.forward(ids, np.arange(length), no_scratch(length), causal(length), with_logits=False)
        # every layer is a full-attention one here, or its rows start at its group's base: take the held rows
        rows = [np.abs(buffer[0, :, : min(length, buffer.shape[2])]).max(axis=1, keepdims=True)
                for buffer in runner.buffers]
        peaks = rows if peaks is None else [np.maximum(a, b) for a, b in zip(peaks, rows, strict=True)]
    runner.reset()
    assert peaks is not None
    scales = [np.maximum(peak, FLOOR).astype(np.float32) / 127 for peak in peaks]
    return [(scales[2 * layer], scales[2 * layer + 1]) for layer in range(len(scales) // 2)]
