"""The KV buffers of a fused graph, one group per kind of layer: full-attention and windowed.

A fused graph (compile/fused/builder.py) gives each group its own GroupQueryAttention inputs: an
attention bias, `seqlens_k` and `total_sequence_length` (the windowed group's prefixed
`sliding_`). GroupQueryAttention attends over rows 0 … total - 1 of a layer's buffer and writes a
call's q new rows at total - q … total - 1, so each group keeps its rows contiguous:

- full-attention layers: row i holds slot i (the committed slots, then the scratch ones), in one
  buffer of the runner's capacity (the compiled max context);
- windowed layers (window W): the rows hold the committed slots `base` … length - 1 followed by
  the scratch slots. Before a call that would not fit, the rows no query can see any more (committed
  positions more than W - 1 before the call's and every later query) are dropped by moving the
  rest to the front, so the buffer needs about W + the largest round of rows, not the context:
  `window_capacity`. Each move copies at most W - 1 + scratch rows and then leaves room for
  W + 64 more, about one row copied per decoded token.

A window KV policy (records/kv_policy.py) makes the full-attention layers a windowed group too,
with S sink slots: their rows 0 … S - 1 hold slots 0 … S - 1 for good, and the moves keep them
(the rows after them hold `base` … length - 1). Such a group keeps the graph's full-attention
inputs (no prefix): the graph is the same, only which rows are kept and seen changes.

Keys carry their position in their rotation (GroupQueryAttention rotates k before storing it)
and the masks are built from positions (engine/masks.py), so where a row sits never changes a
result. GroupQueryAttention's own `local_window_size` is not used: it windows by row index, which
is not the position for a tree's nodes (and not after a move); its `sliding_window_cache`
(onnxruntime 1.32) evicts by a row-count formula, so dropping a rejected tree's rows would mean
re-laying its buffer the same way, and it needs the newest onnxruntime. The exact window is in
the bias, and the moves are the runner's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Metadata of a fused graph (compile/fused/builder.py) its runner reads:
# GroupQueryAttention sees a call's rows and one zero pad row after them, so onnxruntime's
# single-row attention path (a GEMV whose sums differ in the last bits) is never taken; the pad
# row's key and value land in the row after the call's, so every KV buffer holds one spare row.
PAD_ROW_KEY = "specdec.attention_pad_row"
# Every op of the graph computes a row bitwise alike whatever rows share the call, a single row
# included (w8a8 matmuls and the pad row): plain steps need no pad row in the exact layout.
SINGLE_ROW_EXACT_KEY = "specdec.single_row_exact"

# Rows beyond the window a windowed buffer holds for the rounds between moves (draft levels, a
# tree, their scratch); a longer causal call (a prompt) is fed in chunks, anything else grows it.
ROUND_ROWS = 64


def window_capacity(window: int, capacity: int, sinks: int = 0) -> int:
    return min(capacity, sinks + 2 * window + ROUND_ROWS)


@dataclass
class LayerGroup:
    layers: list[int]
    window: int | None
    capacity: int
    shape: tuple[int, int, int]  # (kv_heads, capacity, head_dim) of each buffer
    dtype: np.dtype
    prefix: str  # "" for full attention, "sliding_" for the windowed layers
    buffers: list[np.ndarray] = field(default_factory=list)  # key and value per layer, in layer order
    values: list[Any] = field(default_factory=list)  # the OrtValues over `buffers`
    base: int = 0  # windowed: the first committed slot after the sinks still held
    sinks: int = 0  # windowed: slots 0 … sinks - 1 stay in rows 0 … sinks - 1 (a window KV policy)
    spare_rows: int = 0  # rows after `capacity` the graph writes into (PAD_ROW_KEY), never a slot

    @classmethod
    def make(cls, layers: list[int], window: int | None, capacity: int, kv_heads: int, head_dim: int,
             dtype: np.dtype, sinks: int = 0, prefix: str | None = None, spare_rows: int = 0) -> LayerGroup:
        size = capacity if window is None else window_capacity(window, capacity, sinks)
        if prefix is None:
            prefix = "" if window is None else "sliding_"
        group = cls(layers, window, size, (kv_heads, size, head_dim), dtype, prefix, sinks=sinks,
                    spare_rows=spare_rows)
        group.allocate(size)
        return group

    def allocate(self, size: int, keep_rows: int = 0) -> None:
        """(Re)allocate every buffer with `size` rows, keeping the first `keep_rows`."""
        import onnxruntime as ort

        old = self.buffers
        self.capacity = size
        self.shape = (self.shape[0], size, self.shape[2])
        rows = size + self.spare_rows
        self.buffers = [np.zeros((1, self.shape[0], rows, self.shape[2]), self.dtype)
                        for _ in range(2 * len(self.layers))]
        for new, previous in zip(self.buffers, old, strict=False):
            new[:, :, :keep_rows] = previous[:, :, :keep_rows]
        self.values = [ort.OrtValue.ortvalue_from_numpy(buffer) for buffer in self.buffers]

    @property
    def names(self) -> list[str]:
        """The graph's KV names of this group's buffers, in `buffers` order."""
        return [f"{layer}.{kind}" for layer in self.layers for kind in ("key", "value")]

    @property
    def bias(self) -> str:
        return f"{self.prefix}attention_bias"

    @property
    def row_bytes(self) -> int:
        """Bytes of one slot across this group's key and value buffers."""
        return 2 * len(self.layers) * self.shape[0] * self.shape[2] * self.dtype.itemsize

    @property
    def held_sinks(self) -> int:
        """Sink rows before the `base` … slots (fewer than `sinks` while nothing was dropped)."""
        return min(self.sinks, self.base)

    def live_rows(self, length: int) -> int:
        """The committed slots this group still holds."""
        return self.held_sinks + length - self.base

    def rows(self, length: int, scratch: int) -> int:
        return self.live_rows(length) + scratch

    def key_positions(self, length: int) -> np.ndarray:
        """The position of each committed row (committed slot i holds position i)."""
        return np.concatenate([np.arange(self.held_sinks), np.arange(self.base, length)])

    def keep_from(self, length: int, first_query: int) -> int:
        """The first committed slot after the sinks a query at `first_query` or later (and every
        later call's, at `length` or later) can see; at least one committed row stays, so a call
        on a non-empty past is never taken for a first prompt."""
        assert self.window is not None
        start = min(length, first_query) - (self.window - 1)
        return max(self.base, min(start, length - 1)) if length else 0

    def drop_before(self, slot: int, length: int, scratch: int) -> None:
        """Move the rows of slots `slot` … to just after the sinks (windowed layers)."""
        if slot <= self.base:
            return
        rows = self.rows(length, scratch)
        source = self.held_sinks + slot - self.base  # the row of slot `slot`
        target = min(self.sinks, slot)  # the sink rows that stay in front
        if source > target:
            for buffer in self.buffers:
                buffer[:, :, target : target + rows - source] = buffer[:, :, source:rows]
        self.base = slot

    def commit(self, length: int, index: np.ndarray) -> None:
        """Keep the scratch rows `index` (increasing) after the committed ones."""
        start = self.live_rows(length)
        if index.size and (int(index[-1]) != index.size - 1 or (
                index.size > 2 and not np.array_equal(index, np.arange(index.size)))):
            rows = start + index
            for buffer in self.buffers:
                buffer[:, :, start : start + index.size] = buffer[:, :, rows]

    def reset(self) -> None:
        self.base = 0  # stale rows beyond `total` are never read
