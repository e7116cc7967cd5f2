"""Runner for compiled bundles: static-shape bucket graphs over fixed-size KV buffers (docs/design.md §2, §8).

Each variant takes `q` tokens (padded up to the query bucket), a KV buffer of `context` slots
(its context bucket) with a mask marking the valid ones, and returns only the `q` new KV
entries. A call runs on the smallest context bucket that holds the committed, scratch and new
slots, so attention spans about the context in use, not `max_context`; as the reply grows the
runner moves up a bucket, and a new prompt starts again from the smallest.

Each layer's key and value live in one preallocated block of `max_context` slots; a context
bucket of C slots is the block's first [1, kv_heads, C, head_dim] elements, so every bucket's
view is contiguous and onnxruntime reads it in place through IO binding. A round neither
allocates nor copies the cache: new entries are written into scratch slots after the committed
ones, and commit moves the accepted scratch slots down (usually nothing to move). Moving up a
bucket re-lays the valid rows of each head at the wider stride, once per move, in place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specdec.pipeline.engine.bundle_info import BundleInfo, GraphInfo
from specdec.pipeline.engine.graph import SessionOptions, default_op_inputs, make_session
from specdec.pipeline.engine.masks import FULL_MASK, SLIDING_MASK
from specdec.pipeline.errors import BundleError, GenerationError, setting

log = logging.getLogger(__name__)


_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
                "tensor(double)": np.float64}


@dataclass
class _Bucket:
    """One variant with its IO binding, bound once: every input and output lives in an array
    preallocated here (or in the KV views of its context bucket), so a call only fills arrays."""

    q: int
    context: int
    session: Any
    binding: Any
    feeds: dict[str, np.ndarray]  # input_ids, position_ids, the masks and the custom ops' inputs
    defaults: dict[str, np.ndarray]  # the custom ops' inputs a call leaves out
    arrays: dict[str, np.ndarray]  # every output; onnxruntime writes into them
    new_kv: list[np.ndarray]  # the new_key_values outputs in buffer order
    mask: np.ndarray  # the tree mask [size, context + size]: the attention_mask input's array when it has one
    values: list[Any] = field(default_factory=list)  # OrtValues over feeds and arrays, kept alive with the binding


class StaticRunner:
    def __init__(self, info: GraphInfo, bundle: BundleInfo, options: SessionOptions | None = None) -> None:
        import onnxruntime as ort

        self._ort = ort
        self.info = info
        self.options = options or SessionOptions()
        buckets = bundle.buckets
        table = buckets.graphs.get(info.role) if buckets is not None else None
        if buckets is None or not table:
            raise BundleError(f"compiled bundle '{bundle.path}' has no buckets for the {info.role}",
                              "re-run `specdec compile`")
        self.capacity = buckets.max_context
        self.prefill_chunk = buckets.prefill_chunk
        self._files = {(v.q, buckets.context_of(v)): bundle.path / v.runtime_file for v in table}
        weights = buckets.shared_weights(info.role)
        # a variant file holds only the graph when its weights are shared: size threads by both
        self._weight_bytes = _file_size(bundle.path / weights) if weights else 0
        self.sizes = buckets.sizes(info.role)
        self.contexts = buckets.contexts(info.role)
        if self.contexts[-1] > self.capacity:
            raise BundleError(f"a {info.role} context bucket ({self.contexts[-1]}) exceeds the KV buffer "
                              f"({self.capacity})", "re-run `specdec compile`")
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self.dtype = np.dtype(info.dtype)
        self.kv_dtype = self.dtype
        self.mask_min = np.finfo(self.dtype).min
        self._heads, self._head_dim = info.num_kv_heads, info.head_dim
        # one block per layer and kind (the largest context bucket's slots: max_context for the full
        # cache); each context bucket is a contiguous prefix view of it
        self._blocks = [np.zeros(self._heads * self.contexts[-1] * self._head_dim, self.dtype)
                        for _ in range(2 * info.num_layers)]
        self._views: dict[int, list[np.ndarray]] = {}
        self._view_values: dict[int, list[Any]] = {}
        for context in self.contexts:
            views = [block[: self._heads * context * self._head_dim].reshape(1, self._heads, context, self._head_dim)
                     for block in self._blocks]
            self._views[context] = views
            self._view_values[context] = [ort.OrtValue.ortvalue_from_numpy(view) for view in views]
        self.context = self.contexts[0]  # the bucket the KV rows are laid out for now
        self.context_moves = 0  # moves to a larger bucket, summed over calls
        probe = self._bucket(*min(self._files))
        self.has_prune = "cand_ids" in probe.arrays
        self.single_row_exact = False
        self.has_verify = "next_token" in probe.arrays
        self._length = 0
        self._scratch = 0
        self._scratch_positions = np.zeros(0, np.int64)  # the position each scratch slot was fed at
        self.last_bytes_out = 0
        self.padding_waste = 0  # padded query rows computed and thrown away, summed over calls
        self.rows_computed = 0

    @property
    def buffers(self) -> list[np.ndarray]:
        """Each layer's key and value buffer as the current context bucket lays it out."""
        return self._views[self.context]

    # -- Runner protocol ---------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self._length

    @property
    def scratch(self) -> int:
        return self._scratch

    @property
    def max_context(self) -> int:
        return self.capacity

    @property
    def kv_bytes(self) -> int:
        return sum(block.nbytes for block in self._blocks)

    @property
    def kv_live_bytes(self) -> int:
        return self._length * 2 * self.info.num_layers * self._heads * self._head_dim * self.dtype.itemsize

    def reset(self) -> None:
        for block in self._blocks:
            block.fill(0)  # stale slots are masked, but zeros keep masked products finite
        self._length = self._scratch = 0
        self._scratch_positions = np.zeros(0, np.int64)
        self.context = self.contexts[0]

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
        if self._length + self._scratch + q > self.capacity:
            raise GenerationError(
                f"the {self.info.role} KV buffer of {self.capacity} slots is full",
                f"compile with a larger {setting('max_context')} or generate fewer tokens",
            )
        if q > self.sizes[-1]:
            return self._chunked(ids, positions, scratch_visible, new_visible, extra_inputs, extra_outputs,
                                 with_logits)
        size = next(size for size in self.sizes if size >= q)
        needed = self._length + self._scratch + q
        context = next((c for c in self.contexts if c >= max(needed, self.context) and (size, c) in self._files), None)
        if context is None:
            raise BundleError(f"the compiled bundle has no {self.info.role} variant for {size} tokens over "
                              f"{needed} KV slots", "re-run `specdec compile`")
        if context != self.context:
            self._move_to(context)
        return self._run(self._bucket(size, context), ids, positions, scratch_visible, new_visible,
                         extra_inputs or {}, extra_outputs, with_logits)

    def commit(self, keep: np.ndarray | list[int]) -> None:
        base = self._length
        for index, slot in enumerate(np.asarray(keep, np.int64).tolist()):
            if slot != index:  # keep is increasing, so moving down never overwrites a later source
                for buffer in self.buffers:
                    buffer[:, :, base + index] = buffer[:, :, base + slot]
        self._length = base + len(keep)
        self._scratch = 0
        self._scratch_positions = np.zeros(0, np.int64)

    # -- internals ------------------------------------------------------------------------------
    def _move_to(self, context: int) -> None:
        """Lay the valid rows out for the larger bucket `context`, in place in each layer's block.

        Head h's rows start at h * C * head_dim in a bucket of C slots. Heads move from the last
        to the first: a head's new place lies at or after its old one and before the old place
        of every later head (moved already), so no unmoved row is overwritten; numpy handles the
        overlap of a head's own old and new place.
        """
        rows = self._length + self._scratch
        width = rows * self._head_dim
        old, new = self.context * self._head_dim, context * self._head_dim
        for block in self._blocks:
            for head in range(self._heads - 1, 0, -1):
                block[head * new : head * new + width] = block[head * old : head * old + width]
        self.context = context
        self.context_moves += 1

    def _bucket(self, q: int, context: int) -> _Bucket:
        bucket = self._buckets.get((q, context))
        if bucket is None:
            bucket = self._buckets[(q, context)] = self._load(q, context)
        return bucket

    def _load(self, q: int, context: int) -> _Bucket:
        path = self._files[(q, context)]
        session = make_session(path, self.options, extra_bytes=self._weight_bytes)
        arrays: dict[str, np.ndarray] = {}
        for output in session.get_outputs():
            if any(not isinstance(d, int) for d in output.shape):
                raise BundleError(f"{path.name} output '{output.name}' has a dynamic shape {output.shape}",
                                  "re-run `specdec compile`")
            arrays[output.name] = np.zeros(output.shape, _NUMPY_TYPES[output.type])
        names = {i.name for i in session.get_inputs()}
        defaults = {name: value for name, value in default_op_inputs(q).items() if name in names}
        masks = {name: np.zeros((1, 1, q, context + q), self.dtype) for name in (FULL_MASK, SLIDING_MASK)
                 if name in names}
        feeds = {"input_ids": np.zeros((1, q), np.int64), "position_ids": np.zeros((1, q), np.int64), **masks,
                 **{name: value.copy() for name, value in defaults.items()}}
        binding = session.io_binding()
        values = []
        for name, array in feeds.items():
            value = self._ort.OrtValue.ortvalue_from_numpy(array)
            binding.bind_ortvalue_input(name, value)
            values.append(value)
        for value, name in zip(self._view_values[context], _kv_names("past_key_values", self.info.num_layers),
                               strict=True):
            binding.bind_ortvalue_input(name, value)
        for name, array in arrays.items():
            value = self._ort.OrtValue.ortvalue_from_numpy(array)
            binding.bind_ortvalue_output(name, value)
            values.append(value)
        new_kv = [arrays[name] for name in _kv_names("new_key_values", self.info.num_layers)]
        mask = masks[FULL_MASK] if FULL_MASK in masks else np.zeros((1, 1, q, context + q), self.dtype)
        return _Bucket(q, context, session, binding, feeds, defaults, arrays, new_kv, mask, values)

    def _run(self, bucket: _Bucket, ids: np.ndarray, positions: np.ndarray, scratch_visible: np.ndarray,
             new_visible: np.ndarray, extra_inputs: dict[str, np.ndarray], extra_outputs: tuple[str, ...],
             with_logits: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        q, size = int(np.size(ids)), bucket.q
        pad = size - q
        feeds = bucket.feeds
        feeds["input_ids"][0, :q] = np.asarray(ids).reshape(-1)
        feeds["input_ids"][0, q:] = 0
        positions = np.asarray(positions).reshape(-1)
        feeds["position_ids"][0, :q] = positions
        feeds["position_ids"][0, q:] = positions[-1]
        self._fill_masks(bucket, q, positions, scratch_visible, new_visible)
        for name, default in bucket.defaults.items():
            _fill_rows(feeds[name], extra_inputs.get(name, default), name)
        bucket.session.run_with_iobinding(bucket.binding)
        extras: dict[str, np.ndarray] = {}
        for name in extra_outputs:
            value = bucket.arrays[name]
            extras[name] = (value[:q] if value.ndim >= 1 and value.shape[0] == size else value).copy()
        self._store(bucket, q, positions)
        self.padding_waste += pad
        self.rows_computed += size
        logits = bucket.arrays["logits"][0, :q].copy() if with_logits else None
        # what crosses from onnxruntime to the host: the small outputs and the q new KV rows
        self.last_bytes_out = (logits.nbytes if logits is not None else 0) + sum(v.nbytes for v in extras.values()) \
            + sum(new[:, :, :q].nbytes for new in bucket.new_kv)
        return logits, extras

    def _store(self, bucket: _Bucket, q: int, positions: np.ndarray) -> None:
        """Write the call's q new rows into the scratch slots after the committed and scratch ones."""
        start = self._length + self._scratch
        for buffer, new in zip(self.buffers, bucket.new_kv, strict=True):
            buffer[:, :, start : start + q] = new[:, :, :q]
        self._scratch += q
        self._scratch_positions = np.concatenate([self._scratch_positions, positions])

    def _fill_masks(self, bucket: _Bucket, q: int, positions: np.ndarray, scratch_visible: np.ndarray,
                    new_visible: np.ndarray) -> None:
        self._fill_mask(bucket.mask[0, 0], q, bucket.context, scratch_visible, new_visible)
        if SLIDING_MASK in bucket.feeds:
            self._fill_sliding(bucket.feeds[SLIDING_MASK][0, 0], bucket, positions)

    def _fill_mask(self, mask: np.ndarray, q: int, context: int, scratch_visible: np.ndarray,
                   new_visible: np.ndarray) -> None:
        """The additive mask of runner.build_mask, written into the bucket's [size, context + size] array.

        Padded rows see only themselves (no all-masked row, no NaN); real rows never see them.
        """
        size = mask.shape[0]
        mask.fill(self.mask_min)
        mask[:q, : self._length] = 0
        scratch = scratch_visible.shape[1]
        if scratch:
            mask[:q, self._length : self._length + scratch][scratch_visible] = 0
        mask[:q, context : context + q][new_visible] = 0
        padded = np.arange(q, size)
        mask[padded, context + padded] = 0

    def _fill_sliding(self, sliding: np.ndarray, bucket: _Bucket, positions: np.ndarray) -> None:
        """The windowed layers' mask: the tree mask with every key at or beyond the window hidden.
        Key columns: the committed slots (position = slot), the scratch slots (the positions they were
        fed at), unused slots (masked anyway), then the call's rows (padded rows at the last position)."""
        size, context = bucket.q, bucket.context
        keys = np.zeros(context + size, np.int64)
        keys[: self._length] = np.arange(self._length)
        keys[self._length : self._length + self._scratch] = self._scratch_positions
        queries = np.full(size, positions[-1], np.int64)
        queries[: positions.size] = positions
        keys[context:] = queries
        np.copyto(sliding, bucket.mask[0, 0])
        window = self.info.window
        assert window is not None, "a graph with a sliding_attention_mask input has a recorded window"
        sliding[(queries[:, None] - keys[None, :]) >= window] = self.mask_min

    def _chunked(self, ids: np.ndarray, positions: np.ndarray, scratch_visible: np.ndarray, new_visible: np.ndarray,
                 extra_inputs: dict[str, np.ndarray] | None, extra_outputs: tuple[str, ...],
                 with_logits: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """More tokens than the largest bucket (a long prompt): feed them in prefill chunks.

        Only per-call scalars (the draft's prune settings) can be split this way; a token tree
        must fit one bucket.
        """
        if any(np.ndim(value) for value in (extra_inputs or {}).values()):
            raise GenerationError(f"a tree of {np.size(ids)} nodes exceeds the largest bucket ({self.sizes[-1]})",
                                  f"lower {setting('tree_budget')} or compile with larger {setting('buckets')}")
        chunk = self.prefill_chunk if self.prefill_chunk in self.sizes else self.sizes[-1]
        ids, positions = np.asarray(ids).reshape(-1), np.asarray(positions).reshape(-1)
        logits_parts: list[np.ndarray] = []
        extra_parts: dict[str, list[np.ndarray]] = {name: [] for name in extra_outputs}
        for start in range(0, ids.size, chunk):
            end = min(start + chunk, ids.size)
            # earlier chunks are now scratch slots right after the original scratch
            seen = np.concatenate([scratch_visible[start:end], new_visible[start:end, :start]], axis=1)
            logits, extras = self.forward(ids[start:end], positions[start:end], seen,
                                          new_visible[start:end, start:end], extra_inputs, extra_outputs, with_logits)
            if logits is not None:
                logits_parts.append(logits)
            for name, value in extras.items():
                extra_parts[name].append(value)
        merged = {name: np.concatenate(parts) for name, parts in extra_parts.items()}
        return (np.concatenate(logits_parts) if with_logits else None), merged


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        raise BundleError(f"the compiled bundle is missing its weights file '{path.name}'",
                          "copy the whole bundle, or re-run `specdec compile`") from None


def _kv_names(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}.{layer}.{kind}" for layer in range(layers) for kind in ("key", "value")]


def _fill_rows(array: np.ndarray, value: np.ndarray, name: str) -> None:
    """Write a custom-op input into its bucket array; padded nodes are parentless, so never accepted."""
    value = np.asarray(value)
    if value.ndim == 0 or value.shape[0] == array.shape[0]:
        array[...] = value
        return
    rows = value.shape[0]
    array[:rows] = value
    array[rows:] = -1 if name == "tree_parent" else 0
