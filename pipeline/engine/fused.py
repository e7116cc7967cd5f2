"""Runner for the fused CPU flavour: GroupQueryAttention graphs over one in-place KV buffer per layer.

Every layer's key and value live in a preallocated [1, kv_heads, rows, head_dim] buffer that is
bound, through onnxruntime IO binding, as both the graph's past input and its present output.
GroupQueryAttention attends only over the first `total` rows and writes a call's q new rows at
`total - q … total - 1` itself, so a decoding step copies nothing that grows with the context: the
buffers are bound once, and per call only the token ids, positions, each layer group's [q, total]
mask and two length scalars are fed. Scratch rows (draft levels, the target's tree) sit after the
committed ones; `commit` moves the accepted rows down, a copy of a few rows per layer.

Full-attention layers and windowed layers are two groups with their own inputs and buffers
(engine/fused_kv.py): the windowed layers hold about their window, not the context. A causal
call longer than their buffer allows (a long prompt) is fed in chunks; the chunks before the last
are committed as they go (`commit` then has to keep them: a prompt is always kept as a prefix).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specdec.pipeline.engine.bundle_info import GraphInfo
from specdec.pipeline.engine.chunked import is_causal, kept_past_chunks, row_axis, visible_past_chunks
from specdec.pipeline.engine.fused_binding import NUMPY_TYPES, OWN_SLOT_ROWS, CallSlot, RowInputs
from specdec.pipeline.engine.fused_kv import PAD_ROW_KEY, SINGLE_ROW_EXACT_KEY, LayerGroup
from specdec.pipeline.engine.graph import OP_INPUT_NAMES, ROW_INPUT_NAMES, SessionOptions, make_session
from specdec.pipeline.engine.masks import hide_beyond_window
from specdec.pipeline.engine.runner import build_mask, causal, no_scratch
from specdec.pipeline.errors import GenerationError, setting
from specdec.pipeline.records.kv_policy import KVDtype, KVPolicy


class FusedRunner:
    def __init__(self, info: GraphInfo, path: Any, capacity: int, options: SessionOptions | None = None,
                 policy: KVPolicy | None = None) -> None:
        """`capacity`: the compiled max context; under a window `policy` the reply may reach the
        policy's positions instead (the graph's rotary tables were built that long)."""
        self.info = info
        policy = policy or KVPolicy()
        self.policy = policy
        capacity = policy.positions(capacity)
        # an int8 policy's graphs read and write int8 rows (GroupQueryAttention scales them), a float16 one's half
        self.kv_dtype = np.dtype(np.int8) if policy.quantized else np.dtype(np.float16) \
            if policy.dtype is KVDtype.float16 else np.dtype(info.dtype)
        self.session = make_session(path, options or SessionOptions(), threads_by_size=False)
        inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = {o.name for o in self.session.get_outputs()}
        self.has_prune = "cand_ids" in self.outputs
        self.has_verify = "next_token" in self.outputs
        metadata = self.session.get_modelmeta().custom_metadata_map  # kept by the ORT format too
        self.single_row_exact = metadata.get(SINGLE_ROW_EXACT_KEY) == "1"
        spare_rows = 1 if metadata.get(PAD_ROW_KEY) == "1" else 0  # the row the attention pad row writes
        self.op_inputs = [name for name in inputs if name in OP_INPUT_NAMES]
        # inputs with a row per query token besides the ids and positions (a feature draft's features)
        self.row_inputs: RowInputs = [(name, tuple(int(d) for d in value.shape[2:]), NUMPY_TYPES[value.type])
                                      for name, value in inputs.items() if name in ROW_INPUT_NAMES]
        self.dtype = np.dtype(info.dtype)
        self.mask_min = float(np.finfo(self.dtype).min)
        self.capacity = capacity
        # GroupQueryAttention checks every call's rows (the pad row included) against its rotary tables,
        # which compile builds `capacity` positions long: a call must end `spare_rows` before them, or
        # onnxruntime fails mid-reply ("cos_cache dimension 0 shall not be less than total_sequence_length").
        self.positions = capacity - spare_rows
        windows = info.decoder.windows if info.decoder is not None else [None] * info.num_layers
        self.groups: list[LayerGroup] = []
        for window in sorted({*windows}, key=lambda w: w or 0):
            # a window policy bounds the full-attention layers (with its sinks) on their own inputs
            bounded = window is None and policy.windowed
            group = LayerGroup.make([i for i, w in enumerate(windows) if w == window],
                                    policy.window if bounded else window, capacity, info.num_kv_heads,
                                    info.head_dim, self.kv_dtype, sinks=policy.sinks if bounded else 0,
                                    prefix="" if window is None else "sliding_", spare_rows=spare_rows)
            if group.bias not in inputs:
                raise GenerationError(f"the fused {info.role} graph has no input '{group.bias}' for its layers "
                                      f"{group.layers}", "re-run `specdec compile` with this specdec version")
            self.groups.append(group)
        self._windowed = [group for group in self.groups if group.window is not None]
        # Every other output (logits, the custom ops' results) goes into numpy arrays preallocated
        # per call size: binding memory we own avoids wrapping every bound output per call, which
        # costs more than the small outputs themselves.
        kv_names = {f"present.{name}" for group in self.groups for name in group.names}
        self.free_outputs = [(o.name, o.shape, NUMPY_TYPES[o.type]) for o in self.session.get_outputs()
                             if o.name not in kv_names]
        self._slots: dict[int, CallSlot] = {}
        self._wide: CallSlot | None = None  # calls of more rows (prompts), re-bound per size
        # A step sees every committed slot: its mask is a prefix of this zero row, bound in place.
        self._visible_row = np.zeros(capacity, self.dtype)
        # a windowed step's mask, rewritten per step: one per group (a call binds every group's at once)
        self._window_rows = [np.zeros(capacity, self.dtype) for _ in self.groups]
        self._length = 0
        self._scratch = 0
        self._scratch_positions = np.zeros(0, np.int64)  # the position each scratch slot was fed at
        self._provisional = 0  # rows of the last call committed already (a chunked prompt)
        self.last_bytes_out = 0

    @property
    def buffers(self) -> list[np.ndarray]:
        """Each layer's key and value buffer, in layer order (a windowed layer's rows start at its
        group's `base`)."""
        by_layer = {layer: group.buffers[2 * i: 2 * i + 2] for group in self.groups
                    for i, layer in enumerate(group.layers)}
        return [buffer for layer in sorted(by_layer) for buffer in by_layer[layer]]

    # -- Runner protocol ---------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self._length - self._provisional

    @property
    def scratch(self) -> int:
        return self._scratch + self._provisional

    @property
    def max_context(self) -> int:
        return self.positions

    @property
    def kv_bytes(self) -> int:
        return sum(buffer.nbytes for group in self.groups for buffer in group.buffers)

    @property
    def kv_live_bytes(self) -> int:
        return sum(group.live_rows(self.length) * group.row_bytes for group in self.groups)

    def reset(self) -> None:
        # Stale rows beyond `total` are never read (GQA attends over the valid length only).
        self._length = self._scratch = self._provisional = 0
        self._scratch_positions = np.zeros(0, np.int64)
        for group in self.groups:
            group.reset()

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
        self._check_room(self._length + self._scratch + q)
        if self._windowed and not self._fits(q, int(positions.min())):
            if not self._scratch and is_causal(new_visible) and np.array_equal(
                    positions, self._length + np.arange(q)):
                return self._chunked(ids, positions, extra_inputs, extra_outputs, with_logits)
            self._grow(q, int(positions.min()))
        return self._run(ids, positions, scratch_visible, new_visible, extra_inputs, extra_outputs, with_logits)

    def _run(self, ids: np.ndarray, positions: np.ndarray, scratch_visible: np.ndarray, new_visible: np.ndarray,
             extra_inputs: dict[str, np.ndarray] | None, extra_outputs: tuple[str, ...],
             with_logits: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        q = int(ids.size)
        past = self._length + self._scratch
        if self._windowed:
            self._make_room(q, int(positions.min()))
        slot = self._slot(q, prompt=past == 0)
        slot.ids[0] = ids
        slot.positions[0] = positions
        totals, masks = [], []
        for group in self.groups:
            committed = group.live_rows(self._length)
            width = committed + self._scratch
            if group.window is None and q == 1 and not self._scratch and bool(new_visible[0, 0]):
                mask = self._visible_row  # nothing in scratch: the row sees every slot
            else:
                mask = build_mask(self.dtype, self.mask_min, committed, width, scratch_visible, new_visible)
                if group.window is not None:
                    keys = np.concatenate([group.key_positions(self._length), self._scratch_positions, positions])
                    mask = hide_beyond_window(mask, positions, keys, group.window, self.mask_min, group.sinks)
            totals.append(width + q)
            masks.append(mask)
        slot.call(totals, masks, extra_inputs)
        arrays = slot.outputs
        names = (["logits"] if with_logits else []) + list(extra_outputs)
        result = {name: arrays[name].copy() for name in names}
        self._scratch += q
        if self._windowed:  # what the windowed layers' masks need to know of the scratch rows
            self._scratch_positions = np.concatenate([self._scratch_positions, positions])
        logits = result.pop("logits")[0] if with_logits else None
        self.last_bytes_out = (logits.nbytes if logits is not None else 0) + sum(v.nbytes for v in result.values())
        return logits, result

    def greedy_root_step(self, token: int, rows: int) -> int:
        """A plain greedy step, the hot path of plain decoding: `token` (and `rows - 1` pad rows, which
        see only the committed slots and themselves) in one call, BlockSparseVerify's greedy default
        picks the next token, the token's row is committed. The same call as `forward` + `commit([0])`
        with the op's defaults, minus their per-call numpy work — tens of microseconds, a tenth of a
        step on a small target."""
        past = self._length
        total = past + rows
        if self._scratch or self._provisional:
            raise RuntimeError("a root step needs an empty scratch: commit the last call first")
        self._check_room(total)
        if self._windowed:
            if not self._fits(rows, past):
                self._grow(rows, past)
            self._make_room(rows, past)
        slot = self._slot(rows)
        slot.ids[0, 0] = token
        slot.positions[0, 0] = past
        if rows > 1:
            slot.positions[0, 1:] = range(past + 1, total)
            slot.ids[0, 1:] = 0
        totals, masks = [], []
        for group, window_row in zip(self.groups, self._window_rows, strict=True):
            committed = group.live_rows(past)
            if group.window is None and rows == 1:
                mask = self._visible_row
            elif group.window is None:  # every row sees the committed slots; each new row hides the others
                mask = np.zeros((rows, committed + rows), self.dtype)
                mask[:, committed:] = self.mask_min
                mask[:, committed:].flat[:: rows + 1] = 0
            elif group.sinks and rows == 1:  # a window policy's step: the sinks, then the window, in place
                mask = window_row
                mask[: committed + 1] = 0
                start, end = max(group.sinks, group.base), past + 1 - group.window  # hidden slots start … end - 1
                if end > start:
                    mask[group.held_sinks + start - group.base : group.held_sinks + end - group.base] = self.mask_min
            elif group.sinks:  # a window policy's group: sinks and window from the rows' positions
                mask = hide_beyond_window(
                    build_mask(self.dtype, self.mask_min, committed, committed, no_scratch(rows),
                               np.eye(rows, dtype=bool))[0, 0],
                    past + np.arange(rows), np.concatenate([group.key_positions(past), past + np.arange(rows)]),
                    group.window, self.mask_min, group.sinks)
            elif rows == 1:  # the window of the one row, written in place
                mask = window_row
                mask[: committed + 1] = 0
                mask[: max(past + 1 - group.window - group.base, 0)] = self.mask_min
            else:
                mask = np.full((rows, committed + rows), self.mask_min, self.dtype)
                for row in range(rows):
                    first = max(past + row + 1 - group.window - group.base, 0)
                    mask[row, first:committed] = 0
                    mask[row, committed + row] = 0
            totals.append(committed + rows)
            masks.append(mask)
        slot.call(totals, masks, None)
        self._length = past + 1
        next_token = slot.outputs["next_token"]
        self.last_bytes_out = next_token.nbytes
        return int(next_token)

    def _check_room(self, total: int) -> None:
        """Before the call: the rows it reaches fit the KV buffer and the rotary tables (`positions`)."""
        if total > self.positions:
            raise GenerationError(f"the {self.info.role} KV buffer of {self.positions} slots is full",
                                  "compile with a larger --max-context or generate fewer tokens")

    # -- the windowed layers' rows ------------------------------------------------------------
    def _needed_rows(self, group: LayerGroup, q: int, first_query: int) -> int:
        keep = group.keep_from(self._length, first_query)
        return min(group.sinks, keep) + self._length - keep + self._scratch + q

    def _fits(self, q: int, first_query: int) -> bool:
        return all(self._needed_rows(group, q, first_query) <= group.capacity for group in self._windowed)

    def _make_room(self, q: int, first_query: int) -> None:
        """Drop the windowed rows no query can see any more, when a call would not fit otherwise."""
        for group in self._windowed:
            if group.rows(self._length, self._scratch) + q > group.capacity:
                group.drop_before(group.keep_from(self._length, first_query), self._length, self._scratch)

    def _grow(self, q: int, first_query: int) -> None:
        """A round larger than the windowed buffers were sized for: give them room (rare)."""
        for group in self._windowed:
            needed = self._needed_rows(group, q, first_query)
            if needed > group.capacity:
                group.drop_before(group.keep_from(self._length, first_query), self._length, self._scratch)
                group.allocate(min(self.capacity, max(needed, group.capacity * 3 // 2)),
                               keep_rows=group.rows(self._length, self._scratch))
                self._slots.clear()  # every binding holds the old buffers
                self._wide = None

    def _chunked(self, ids: np.ndarray, positions: np.ndarray, extra_inputs: dict[str, np.ndarray] | None,
                 extra_outputs: tuple[str, ...], with_logits: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """A causal call longer than the windowed buffers hold (a prompt): fed in chunks, each one
        but the last committed as it goes. Only per-call scalars can be split like this."""
        if any(np.ndim(value) for value in (extra_inputs or {}).values()):
            raise GenerationError(f"a tree of {ids.size} nodes exceeds the windowed layers' KV buffer",
                                  f"lower {setting('tree_budget')}")
        chunk = min(group.capacity - max((group.window or 1) - 1, 1) - group.sinks for group in self._windowed)
        logits_parts: list[np.ndarray] = []
        extra_parts: dict[str, list[np.ndarray]] = {name: [] for name in extra_outputs}
        axes: dict[str, int] = {}  # where each extra output holds its rows ([1, rows, H]: 1)
        for start in range(0, ids.size, chunk):
            end = min(start + chunk, ids.size)
            rows = end - start
            logits, extras = self._run(ids[start:end], positions[start:end], no_scratch(rows), causal(rows),
                                       extra_inputs, extra_outputs, with_logits)
            if logits is not None:
                logits_parts.append(logits)
            for name, value in extras.items():
                axis = row_axis(value, rows) if np.ndim(value) else None
                if axis is None:
                    raise GenerationError(f"'{name}' of a prompt fed in chunks has no row per token",
                                          "report this with SPECDEC_DEBUG=1 output")
                axes[name] = axis
                extra_parts[name].append(value)
            if end < ids.size:
                self._commit_rows(np.arange(rows))
                self._provisional += rows
        merged = {name: np.concatenate(parts, axis=axes[name]) for name, parts in extra_parts.items()}
        return (np.concatenate(logits_parts) if with_logits else None), merged

    def _slot(self, q: int, prompt: bool = False) -> CallSlot:
        """Steps, trees and draft levels come in few sizes: each gets a slot bound once. A prompt
        (the first call after a reset) has a length of its own: prompts share one slot, re-bound."""
        slot = self._slots.get(q)
        if slot is not None:
            return slot
        if q <= OWN_SLOT_ROWS and not prompt:
            slot = self._slots[q] = self._new_slot(q)
            return slot
        if self._wide is None or self._wide.rows < q:
            self._wide = self._new_slot(min(self.capacity, 1 << (q - 1).bit_length()))
        self._wide.fit(q)
        return self._wide

    def _new_slot(self, rows: int) -> CallSlot:
        return CallSlot(self.session, self.groups, self.op_inputs, self.free_outputs, rows, self.row_inputs)

    def commit(self, keep: np.ndarray | list[int]) -> None:
        index = kept_past_chunks(np.asarray(keep, np.int64), self._provisional)
        self._provisional = 0
        self._commit_rows(index)

    def _commit_rows(self, index: np.ndarray) -> None:
        for group in self.groups:
            group.commit(self._length, index)
        self._length += int(index.size)
        self._scratch = 0
        self._scratch_positions = np.zeros(0, np.int64)
