"""A graph plus its KV store behind one interface, so the engine does not care whether a bundle
has dynamic-shape graphs (export) or static bucketed ones (compile).

Masks are described, not built, by callers: every committed slot is visible; `scratch_visible`
[q, scratch] says which scratch slots each new token sees and `new_visible` [q, q] which of the
tokens fed together (causal for a prefill, ancestors for a tree, identity for a draft level).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from specdec.pipeline.engine.bundle_info import GraphInfo
from specdec.pipeline.engine.graph import Graph, SessionOptions
from specdec.pipeline.engine.kv import KVBuffers
from specdec.pipeline.engine.masks import hide_beyond_window
from specdec.pipeline.engine.tree import ancestor_matrix
from specdec.pipeline.records.kv_policy import KVPolicy


class Runner(Protocol):
    info: GraphInfo
    dtype: np.dtype
    kv_dtype: np.dtype  # of the KV rows (int8 under an int8 KV policy)
    has_prune: bool
    has_verify: bool
    # a call of one row computes bitwise as a row of a larger call (fused w8a8 targets): the exact
    # layout then needs no pad row
    single_row_exact: bool
    last_bytes_out: int

    @property
    def length(self) -> int: ...

    @property
    def scratch(self) -> int: ...

    @property
    def max_context(self) -> int: ...

    @property
    def kv_bytes(self) -> int: ...  # bytes of KV memory the runner holds now (allocated buffers)

    @property
    def kv_live_bytes(self) -> int: ...  # the bytes of the committed rows it keeps (what a reply uses)

    def reset(self) -> None: ...

    def forward(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        scratch_visible: np.ndarray,
        new_visible: np.ndarray,
        extra_inputs: dict[str, np.ndarray] | None = None,
        extra_outputs: tuple[str, ...] = (),
        with_logits: bool = True,
    ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]: ...

    def commit(self, keep: np.ndarray | list[int]) -> None: ...


def causal(q: int) -> np.ndarray:
    return np.tril(np.ones((q, q), dtype=bool))


def no_scratch(q: int) -> np.ndarray:
    return np.zeros((q, 0), dtype=bool)


def prefill(runner: Runner, ids: np.ndarray) -> None:
    """Reset `runner` and commit `ids` as its context: a causal prefill whose logits nobody reads."""
    runner.reset()
    runner.forward(ids, np.arange(ids.size), no_scratch(ids.size), causal(ids.size))
    runner.commit(np.arange(ids.size))


def build_mask(dtype: np.dtype, neg: float, committed: int, width: int, scratch_visible: np.ndarray,
               new_visible: np.ndarray, new_width: int | None = None) -> np.ndarray:
    """Additive mask [1, 1, q, width + new_width]: committed slots, visible scratch, visible new."""
    q = new_visible.shape[0]
    new_width = q if new_width is None else new_width
    mask = np.full((1, 1, q, width + new_width), neg, dtype=dtype)
    mask[0, 0, :, :committed] = 0
    scratch = scratch_visible.shape[1]
    if scratch:
        mask[0, 0, :, committed : committed + scratch][scratch_visible] = 0
    mask[0, 0, :, width : width + new_visible.shape[1]][new_visible] = 0
    return mask


def causal_mask(length: int, past: int, dtype: np.dtype, neg: float) -> np.ndarray:
    """Additive causal mask [1, 1, length, past + length] over a fully valid past."""
    return build_mask(dtype, neg, past, past, no_scratch(length), causal(length))


def tree_mask(parents: Sequence[int] | np.ndarray, past: int, dtype: np.dtype[Any]) -> np.ndarray:
    """Additive mask [1, 1, n, past + n] of a token tree (parents precede children) on a valid past:
    each node sees the past, its ancestors and itself. Used by the stages' validations."""
    visible = ancestor_matrix(np.asarray(parents, np.int64))
    return build_mask(dtype, np.finfo(dtype).min, past, past, no_scratch(visible.shape[0]), visible)


class DynamicRunner:
    """Dynamic-shape graph: the KV cache grows with every forward and shrinks at commit.

    A window KV `policy` is applied by the mask alone (every row is kept, the ones the policy
    drops are hidden): the reference the compiled policy's bounded buffers are checked against."""

    def __init__(self, info: GraphInfo, options: SessionOptions | None = None, policy: KVPolicy | None = None) -> None:
        self.info = info
        self.policy = policy or KVPolicy()
        self.graph = Graph(info, options)
        self.dtype = self.graph.dtype
        self.kv_dtype = self.dtype
        self.has_prune = self.graph.has_prune
        self.single_row_exact = False
        self.has_verify = self.graph.has_verify
        self.kv = KVBuffers(info)
        self._scratch_positions = np.zeros(0, np.int64)
        self.last_bytes_out = 0

    @property
    def length(self) -> int:
        return self.kv.length

    @property
    def scratch(self) -> int:
        return self.kv.scratch

    @property
    def max_context(self) -> int:
        return self.policy.positions(self.info.max_position_embeddings)

    @property
    def kv_bytes(self) -> int:
        return sum(layer.nbytes for layer in self.kv.layers)

    @property
    def kv_live_bytes(self) -> int:
        return self.kv_bytes

    def reset(self) -> None:
        self.kv = KVBuffers(self.info)
        self._scratch_positions = np.zeros(0, np.int64)

    def forward(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        scratch_visible: np.ndarray,
        new_visible: np.ndarray,
        extra_inputs: dict[str, np.ndarray] | None = None,
        extra_outputs: tuple[str, ...] = (),
        with_logits: bool = True,
    ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        width = self.kv.length + self.kv.scratch
        mask = build_mask(self.dtype, self.graph.mask_min, self.kv.length, width, scratch_visible, new_visible)
        # committed slot i holds position i; scratch slots hold the positions they were fed at
        past = np.concatenate([np.arange(self.kv.length), self._scratch_positions])
        if self.policy.windowed:
            keys = np.concatenate([past, np.asarray(positions).reshape(-1)])
            mask = hide_beyond_window(mask, positions, keys, self.policy.window, self.graph.mask_min,
                                      self.policy.sinks)
        logits, present, extras = self.graph.forward(ids, positions, mask, self.kv.layers, extra_inputs,
                                                     extra_outputs, with_logits, past_positions=past)
        self.kv.absorb(present)
        self._scratch_positions = np.concatenate([self._scratch_positions, np.asarray(positions).reshape(-1)])
        self.last_bytes_out = self.graph.last_bytes_out
        return logits, extras

    def commit(self, keep: np.ndarray | list[int]) -> None:
        self.kv.commit(keep)
        self._scratch_positions = np.zeros(0, np.int64)
