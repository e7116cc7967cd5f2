"""The rules of a prompt fed in chunks that are committed as they go (the fused runner under a
window, and the static window ring): later calls see every committed chunk, and `commit` keeps the
chunks as a prefix. Shared so both runners enforce the same contract with the same errors."""

from __future__ import annotations

import numpy as np

from specdec.pipeline.errors import GenerationError


def is_causal(visible: np.ndarray) -> bool:
    return bool(np.array_equal(visible, np.tri(visible.shape[0], dtype=bool)))


def visible_past_chunks(scratch_visible: np.ndarray, provisional: int) -> np.ndarray:
    """`scratch_visible` without the columns of the `provisional` rows already committed in chunks,
    which every later row must see."""
    if not provisional:
        return scratch_visible
    if not scratch_visible[:, :provisional].all():
        raise GenerationError("a call hides part of a prompt fed in chunks", "commit the prompt before drafting on it")
    return scratch_visible[:, provisional:]


def kept_past_chunks(index: np.ndarray, provisional: int) -> np.ndarray:
    """The rows of `index` after the `provisional` chunked rows, which it must keep as a prefix."""
    if not provisional:
        return index
    if index.size < provisional or not np.array_equal(index[:provisional], np.arange(provisional)):
        raise GenerationError("a prompt fed in chunks must be kept as a prefix", "commit the prompt's rows in order")
    return index[provisional:] - provisional


def row_axis(value: np.ndarray, rows: int) -> int | None:
    """The axis of `value` that holds a call's `rows` (0, or 1 behind a batch of one: [1, rows, ...]);
    None when it has none."""
    if value.ndim >= 1 and value.shape[0] == rows:
        return 0
    if value.ndim >= 2 and value.shape[0] == 1 and value.shape[1] == rows:
        return 1
    return None
