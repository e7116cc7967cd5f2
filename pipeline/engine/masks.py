"""The attention masks of a graph's layer groups, from one tree/causal mask and the positions.

A graph of the docs/design.md §2 contract takes `attention_mask` for its full-attention layers and
`sliding_attention_mask` for its windowed layers, each only if it has such layers (`mask_names`).
Both are additive [1, 1, q, keys]: the windowed one is the tree mask with every key at or beyond
the window hidden. Hugging Face's rule (`masking_utils.sliding_window_overlay`) is
`key > query - window` on positions: a query at position p sees p - W + 1 … p. In a tree a node
sees the window of its own position among its ancestors, and since key positions are what the
rule reads, it holds however the KV rows are laid out (compacted buffers, static buckets).
"""

from __future__ import annotations

import numpy as np

from specdec.pipeline.records.decoder import Decoder

FULL_MASK = "attention_mask"
SLIDING_MASK = "sliding_attention_mask"


def mask_names(decoder: Decoder | None) -> tuple[str, ...]:
    """The mask inputs of a graph of this decoder (a bundle without the record: full attention)."""
    if decoder is None or decoder.window is None:
        return (FULL_MASK,)
    return (FULL_MASK, SLIDING_MASK) if decoder.global_layers else (SLIDING_MASK,)


def hide_beyond_window(mask: np.ndarray, query_positions: np.ndarray, key_positions: np.ndarray, window: int,
                       neg: float, sinks: int = 0) -> np.ndarray:
    """A copy of the additive `mask` [..., q, keys] with every key at or beyond `window` positions
    before its query hidden, except the `sinks` first positions (a window KV policy's sinks).
    Keys already hidden stay hidden, whatever position they are given."""
    keys = np.asarray(key_positions).reshape(-1)
    far = (np.asarray(query_positions).reshape(-1)[:, None] - keys[None, :]) >= window
    if sinks:
        far &= keys[None, :] >= sinks
    out = mask.copy()
    out[..., far] = neg
    return out


def mask_feeds(names: tuple[str, ...] | list[str], mask: np.ndarray, query_positions: np.ndarray,
               key_positions: np.ndarray, window: int | None, neg: float) -> dict[str, np.ndarray]:
    """The feeds of the mask inputs `names` (those of them a graph has) from the tree mask `mask`."""
    feeds: dict[str, np.ndarray] = {}
    for name in names:
        if name == FULL_MASK:
            feeds[name] = mask
        elif name == SLIDING_MASK:
            if window is None:
                raise ValueError("the graph has a sliding_attention_mask input but no window is recorded")
            feeds[name] = hide_beyond_window(mask, query_positions, key_positions, window, neg)
    return feeds

