"""KV caches of the dynamic-shape graphs: per layer [1, kv_heads, length, head_dim] arrays.

Entries are either committed (the accepted sequence, slots 0..length-1) or scratch (fed this
round and not yet decided: draft-tree levels, the target's tree). A forward returns
`present = past + new`, so new entries join the scratch; `commit` keeps the committed slots
plus the chosen scratch slots and drops the rest. Keeping a contiguous prefix is a view.
"""

from __future__ import annotations

import numpy as np

from specdec.pipeline.engine.bundle_info import GraphInfo


class KVBuffers:
    def __init__(self, info: GraphInfo) -> None:
        shape = (1, info.num_kv_heads, 0, info.head_dim)
        self.layers: list[np.ndarray] = [np.zeros(shape, np.dtype(info.dtype)) for _ in range(2 * info.num_layers)]
        self.length = 0  # committed slots
        self.scratch = 0  # slots after them, fed but not yet committed

    def absorb(self, present: list[np.ndarray]) -> None:
        """Adopt a forward's `present` (past + new): the new entries become scratch."""
        self.scratch = int(present[0].shape[2]) - self.length
        self.layers = list(present)

    def commit(self, keep: np.ndarray | list[int]) -> None:
        """Keep the committed slots plus the scratch slots `keep` (in that order); drop the rest."""
        base = self.length
        index = np.asarray(keep, np.int64)
        if index.size and not np.array_equal(index, np.arange(index.size)):
            order = np.concatenate([np.arange(base), base + index])
            self.layers = [np.ascontiguousarray(layer[:, :, order]) for layer in self.layers]
        else:
            self.layers = [layer[:, :, : base + index.size] for layer in self.layers]
        self.length = base + int(index.size)
        self.scratch = 0
