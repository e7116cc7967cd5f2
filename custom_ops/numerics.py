"""Tempered softmax helpers shared by the op references: float32, log space, never NaN.

+inf is clamped to the largest float32 and scaling is clamped again, so huge logits at tiny
temperatures stay finite; a row that is entirely -inf is treated as uniform.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
F32_MAX = np.finfo(np.float32).max
# Below this the tempered softmax is a one-hot in float32 anyway; the floor avoids dividing by 0.
TEMPERATURE_FLOOR = 1e-6


def scale(logits: np.ndarray, temperature: float) -> np.ndarray:
    x = np.minimum(np.atleast_2d(np.asarray(logits, F32)), F32_MAX)
    with np.errstate(over="ignore"):
        scaled: np.ndarray = np.minimum(x / F32(max(float(temperature), TEMPERATURE_FLOOR)), F32_MAX).astype(F32)
    return scaled


def log_softmax(scaled: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax of already scaled logits."""
    row_max = scaled.max(axis=-1, keepdims=True)
    dead = np.isneginf(row_max)
    with np.errstate(over="ignore", invalid="ignore"):
        shifted = np.where(dead, F32(0), scaled) - np.where(dead, F32(0), row_max)
        lse = np.log(np.exp(shifted).sum(axis=-1, keepdims=True, dtype=F32))
    result: np.ndarray = (shifted - lse).astype(F32)
    return result


def softmax(scaled: np.ndarray) -> np.ndarray:
    result: np.ndarray = np.exp(log_softmax(scaled)).astype(F32)
    return result
