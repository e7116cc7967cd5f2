"""The npu flavour's runner under a window KV policy (records/kv_policy.py): a fixed ring of slots.

A window policy's static variants span one context: S + W + room for the rounds in flight
(compile/config.py `window_slots`). Rows are not kept in slot order. Each slot records the position
its row was written at and whether it is committed, scratch (fed this round, not yet decided) or
free; a call's new rows go into free slots, and a committed row no later query can see (a
position p ≥ S with p ≤ length − W: every later query sits at length or after) is free again. So a
step writes its row and moves nothing, and commit only relabels slots.

The masks are built from the slots' positions, as docs/kv-cache.md defines the policy: a query at
position p sees the sinks (positions 0 … S − 1) and p − W + 1 … p, among what it may see at all (the
committed rows, its visible scratch rows, its own ancestors). Keys were rotated with their absolute
position when written, so where a row sits never changes a result: the logits are the dynamic
graph's under the same mask (runner.DynamicRunner with the policy). Layers with a window of their
own keep theirs in `sliding_attention_mask` (no sinks; compile checks it is not wider than W).

A prompt longer than the free slots (or than the largest bucket) is fed in chunks committed as they
go, as the fused runner does: the commit after it must keep the prompt as a prefix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specdec.pipeline.engine.bundle_info import BundleInfo, GraphInfo
from specdec.pipeline.engine.chunked import is_causal, kept_past_chunks, visible_past_chunks
from specdec.pipeline.engine.graph import SessionOptions
from specdec.pipeline.engine.masks import SLIDING_MASK
from specdec.pipeline.engine.runner import causal, no_scratch
from specdec.pipeline.engine.static import StaticRunner, _Bucket
from specdec.pipeline.errors import BundleError, GenerationError, setting

FREE, COMMITTED, SCRATCH = 0, 1, 2


class StaticWindowRunner(StaticRunner):
    def __init__(self, info: GraphInfo, bundle: BundleInfo, options: SessionOptions | None = None) -> None:
        super().__init__(info, bundle, options)
        assert bundle.buckets is not None
        self.policy = bundle.buckets.kv_policy
        if not self.policy.windowed or len(self.contexts) != 1:
            raise BundleError(f"the {info.role} variants of a window policy must span one context, got "
                              f"{self.contexts}", "re-run `specdec compile`")
        self.slots = self.contexts[0]
        # the reply may reach the policy's positions (the graph's rotary is computed from them)
        self.capacity = self.policy.positions(bundle.buckets.max_context)
        self._state = np.zeros(self.slots, np.int8)
        self._position = np.full(self.slots, -1, np.int64)  # the position each slot's row was written at
        self._scratch_slots = np.zeros(0, np.int64)  # the slot of each scratch row, in feeding order
        self._provisional = 0  # rows of the last call committed already (a chunked prompt)
        self._own_window = info.window  # the model's own windowed layers (sliding_attention_mask)

    # -- Runner protocol ---------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self._length - self._provisional

    @property
    def scratch(self) -> int:
        return self._scratch + self._provisional

    @property
    def kv_live_bytes(self) -> int:
        row = 2 * self.info.num_layers * self._heads * self._head_dim * self.dtype.itemsize
        return int(self._live().sum()) * row

    def reset(self) -> None:
        super().reset()
        self._state.fill(FREE)
        self._position.fill(-1)
        self._scratch_slots = np.zeros(0, np.int64)
        self._provisional = 0

    def round_room(self, fed: int) -> int:
        """Rows a round can add after a causal call of `fed` rows on the committed ones (a draft's
        pending tokens and root): the slots left beside the sinks, the window and those rows (only
        the last chunk of them when they are fed in chunks)."""
        free = self.slots - self.policy.sinks - (self.policy.window - 1)
        held = fed if fed <= min(free, self.sizes[-1]) else (fed - 1) % self._chunk() + 1
        return free - held

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
        q = int(np.size(ids))
        positions = np.asarray(positions, np.int64).reshape(-1)
        scratch_visible = visible_past_chunks(scratch_visible, self._provisional)
        if self._length + self._scratch + q > self.capacity:
            raise GenerationError(f"the {self.info.role} reply reached the window policy's {self.capacity} positions",
                                  f"compile with a larger {setting('max_context')} or generate fewer tokens")
        if q > self.sizes[-1] or q > int(self._free().sum()):
            if not self._scratch and is_causal(new_visible) and np.array_equal(positions,
                                                                                self._length + np.arange(q)):
                return self._prompt_chunks(ids, positions, extra_inputs, extra_outputs, with_logits)
            if q > self.sizes[-1]:
                raise GenerationError(f"a tree of {q} nodes exceeds the largest bucket ({self.sizes[-1]})",
                                      f"lower {setting('tree_budget')} or compile with larger {setting('buckets')}")
            raise GenerationError(f"a {self.info.role} round of {self._scratch + q} rows does not fit the window "
                                  f"policy's {self.slots} slots", f"lower {setting('depth')} or {setting('width')}")
        size = next(size for size in self.sizes if size >= q)
        return self._run(self._bucket(size, self.slots), ids, positions, scratch_visible, new_visible,
                         extra_inputs or {}, extra_outputs, with_logits)

    def commit(self, keep: np.ndarray | list[int]) -> None:
        index = kept_past_chunks(np.asarray(keep, np.int64), self._provisional)
        self._provisional = 0
        self._commit_rows(index)

    # -- internals ------------------------------------------------------------------------------
    def _commit_rows(self, index: np.ndarray) -> None:
        kept = self._scratch_slots[index]
        self._state[self._scratch_slots] = FREE
        self._state[kept] = COMMITTED
        self._position[kept] = self._length + np.arange(index.size)  # committed slot i holds position i
        self._length += int(index.size)
        self._scratch = 0
        self._scratch_slots = np.zeros(0, np.int64)
        self._scratch_positions = np.zeros(0, np.int64)

    def _live(self) -> np.ndarray:
        """Committed slots a query at `length` or later can still see."""
        position = self._position
        live: np.ndarray = (self._state == COMMITTED) & ((position < self.policy.sinks)
                                                         | (position > self._length - self.policy.window))
        return live

    def _free(self) -> np.ndarray:
        free: np.ndarray = (self._state == FREE) | ((self._state == COMMITTED) & ~self._live())
        return free

    def _chunk(self) -> int:
        largest = self.prefill_chunk if self.prefill_chunk in self.sizes else self.sizes[-1]
        return min(largest, self.slots - self.policy.sinks - (self.policy.window - 1))

    def _store(self, bucket: _Bucket, q: int, positions: np.ndarray) -> None:
        slots = np.flatnonzero(self._free())[:q]
        if slots[-1] - slots[0] == q - 1:  # the usual case: one contiguous run of slots
            for buffer, new in zip(self.buffers, bucket.new_kv, strict=True):
                buffer[:, :, slots[0] : slots[0] + q] = new[:, :, :q]
        else:
            for buffer, new in zip(self.buffers, bucket.new_kv, strict=True):
                buffer[:, :, slots] = new[:, :, :q]
        self._state[slots] = SCRATCH
        self._position[slots] = positions
        self._scratch_slots = np.concatenate([self._scratch_slots, slots])
        self._scratch += q
        self._scratch_positions = np.concatenate([self._scratch_positions, positions])

    def _fill_masks(self, bucket: _Bucket, q: int, positions: np.ndarray, scratch_visible: np.ndarray,
                    new_visible: np.ndarray) -> None:
        """Columns: the ring's slots, then the call's rows; padded rows (at the last position) see
        only themselves, real rows never see them."""
        size, slots = bucket.q, bucket.context
        queries = np.full(size, positions[-1], np.int64)
        queries[:q] = positions
        keys = np.concatenate([self._position, queries])
        seen = np.zeros((size, slots + size), bool)
        seen[:q, :slots] = self._state == COMMITTED
        if self._scratch:
            seen[np.ix_(np.arange(q), self._scratch_slots)] = scratch_visible
        seen[:q, slots : slots + q] = new_visible
        padded = np.arange(q, size)
        seen[padded, slots + padded] = True
        distance = queries[:, None] - keys[None, :]
        policy = seen & ((keys[None, :] < self.policy.sinks) | (distance < self.policy.window))
        mask = bucket.mask[0, 0]
        mask.fill(self.mask_min)
        mask[policy] = 0
        if SLIDING_MASK in bucket.feeds:
            assert self._own_window is not None, "a graph with a sliding_attention_mask input has a recorded window"
            sliding = bucket.feeds[SLIDING_MASK][0, 0]
            sliding.fill(self.mask_min)
            sliding[seen & (distance < self._own_window)] = 0

    def _prompt_chunks(self, ids: np.ndarray, positions: np.ndarray, extra_inputs: dict[str, np.ndarray] | None,
                       extra_outputs: tuple[str, ...], with_logits: bool) -> tuple[np.ndarray | None, dict[str, Any]]:
        """A causal call longer than the free slots or the largest bucket (a prompt, a draft's pending
        tokens): fed in chunks, each one but the last committed as it goes. Only per-call scalars
        can be split like this."""
        if any(np.ndim(value) for value in (extra_inputs or {}).values()):
            raise GenerationError(f"a tree of {ids.size} nodes exceeds the window policy's slots",
                                  f"lower {setting('tree_budget')}")
        chunk = self._chunk()
        logits_parts: list[np.ndarray] = []
        extra_parts: dict[str, list[np.ndarray]] = {name: [] for name in extra_outputs}
        for start in range(0, ids.size, chunk):
            end = min(start + chunk, ids.size)
            rows = end - start
            size = next(size for size in self.sizes if size >= rows)
            logits, extras = self._run(self._bucket(size, self.slots), ids[start:end], positions[start:end],
                                       no_scratch(rows), causal(rows), extra_inputs or {}, extra_outputs, with_logits)
            if logits is not None:
                logits_parts.append(logits)
            for name, value in extras.items():
                if np.ndim(value) == 0 or value.shape[0] != rows:
                    raise GenerationError(f"'{name}' of a prompt fed in chunks has no row per token",
                                          "report this with SPECDEC_DEBUG=1 output")
                extra_parts[name].append(value)
            if end < ids.size:
                self._commit_rows(np.arange(rows))
                self._provisional += rows
        merged = {name: np.concatenate(parts) for name, parts in extra_parts.items()}
        return (np.concatenate(logits_parts) if with_logits else None), merged
