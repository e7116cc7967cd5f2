"""Runner for compiled bundles: static-shape bucket graphs over a fixed-size KV buffer (DESIGN §2).

Each bucket graph takes `q` tokens (padded up to the bucket), the whole KV buffer of
`max_context` slots with a mask marking the valid ones, and returns only the `q` new KV entries.
The buffer lives in numpy arrays that onnxruntime reads in place through IO binding, so a round
neither allocates nor copies the cache: new entries are written into scratch slots after the
committed ones, and commit moves the accepted scratch slots down (usually nothing to move).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from specdec.pipeline.errors import BundleError, GenerationError, setting
from specdec.pipeline.runtime.graph import OP_INPUT_NAMES, SessionOptions, default_op_inputs, make_session
from specdec.pipeline.runtime.manifest import BundleInfo, GraphInfo
from specdec.pipeline.runtime.runner import build_mask

log = logging.getLogger(__name__)


_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
                "tensor(double)": np.float64}


@dataclass
class _Bucket:
    q: int
    session: Any
    inputs: set[str]
    arrays: dict[str, np.ndarray]  # every output, preallocated; onnxruntime writes into them
    values: dict[str, Any]  # the same memory as OrtValues for IO binding


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
        self._files = {v.q: bundle.path / v.runtime_file for v in table}
        self.sizes = sorted(self._files)
        self._buckets: dict[int, _Bucket] = {}
        self.dtype = np.dtype(info.dtype)
        self.mask_min = np.finfo(self.dtype).min
        shape = (1, info.num_kv_heads, self.capacity, info.head_dim)
        self.buffers = [np.zeros(shape, self.dtype) for _ in range(2 * info.num_layers)]
        self._buffer_values = [ort.OrtValue.ortvalue_from_numpy(b) for b in self.buffers]
        probe = self._bucket(self.sizes[0])
        self.has_prune = "cand_ids" in probe.arrays
        self.has_verify = "next_token" in probe.arrays
        self._length = 0
        self._scratch = 0
        self.last_bytes_out = 0
        self.padding_waste = 0  # padded query rows computed and thrown away, summed over calls
        self.rows_computed = 0

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

    def reset(self) -> None:
        for buffer in self.buffers:
            buffer.fill(0)  # stale slots are masked, but zeros keep masked products finite
        self._length = self._scratch = 0

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
        bucket = self._bucket(next(size for size in self.sizes if size >= q))
        return self._run(bucket, ids, positions, scratch_visible, new_visible, extra_inputs or {}, extra_outputs,
                         with_logits)

    def commit(self, keep: np.ndarray | list[int]) -> None:
        base = self._length
        for index, slot in enumerate(np.asarray(keep, np.int64).tolist()):
            if slot != index:  # keep is increasing, so moving down never overwrites a later source
                for buffer in self.buffers:
                    buffer[:, :, base + index] = buffer[:, :, base + slot]
        self._length = base + len(keep)
        self._scratch = 0

    # -- internals ------------------------------------------------------------------------------
    def _bucket(self, q: int) -> _Bucket:
        bucket = self._buckets.get(q)
        if bucket is None:
            session = make_session(self._files[q], self.options)
            arrays: dict[str, np.ndarray] = {}
            for output in session.get_outputs():
                if any(not isinstance(d, int) for d in output.shape):
                    raise BundleError(
                        f"{self._files[q].name} output '{output.name}' has a dynamic shape {output.shape}",
                        "re-run `specdec compile`",
                    )
                arrays[output.name] = np.zeros(output.shape, _NUMPY_TYPES[output.type])
            bucket = _Bucket(
                q=q, session=session, inputs={i.name for i in session.get_inputs()}, arrays=arrays,
                values={name: self._ort.OrtValue.ortvalue_from_numpy(a) for name, a in arrays.items()},
            )
            self._buckets[q] = bucket
        return bucket

    def _run(self, bucket: _Bucket, ids: np.ndarray, positions: np.ndarray, scratch_visible: np.ndarray,
             new_visible: np.ndarray, extra_inputs: dict[str, np.ndarray], extra_outputs: tuple[str, ...],
             with_logits: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        q, size = int(np.size(ids)), bucket.q
        pad = size - q
        token_ids = np.zeros((1, size), np.int64)
        token_ids[0, :q] = np.asarray(ids).reshape(-1)
        pos = np.full((1, size), int(np.asarray(positions).reshape(-1)[-1]), np.int64)
        pos[0, :q] = np.asarray(positions).reshape(-1)
        # padded rows see only themselves (no all-masked row, no NaN); real rows never see them
        visible_new = np.eye(size, dtype=bool)
        visible_new[:q, :q] = new_visible
        visible_scratch = np.zeros((size, self._scratch), dtype=bool)
        visible_scratch[:q] = scratch_visible
        mask = build_mask(self.dtype, self.mask_min, self._length, self.capacity, visible_scratch, visible_new)
        binding = bucket.session.io_binding()
        binding.bind_cpu_input("input_ids", token_ids)
        binding.bind_cpu_input("position_ids", pos)
        binding.bind_cpu_input("attention_mask", mask)
        for index, name in enumerate(_kv_names("past_key_values", self.info.num_layers)):
            binding.bind_ortvalue_input(name, self._buffer_values[index])
        op_inputs = [n for n in bucket.inputs if n in OP_INPUT_NAMES]
        if op_inputs:
            defaults = default_op_inputs(size)
            given = {k: _pad_rows(v, size, k) for k, v in extra_inputs.items()}
            for name in op_inputs:
                binding.bind_cpu_input(name, np.ascontiguousarray(given.get(name, defaults[name])))
        for name, value in bucket.values.items():
            binding.bind_ortvalue_output(name, value)
        bucket.session.run_with_iobinding(binding)
        extras: dict[str, np.ndarray] = {}
        for name in extra_outputs:
            value = bucket.arrays[name]
            extras[name] = (value[:q] if value.ndim >= 1 and value.shape[0] == size else value).copy()
        start = self._length + self._scratch
        new_names = _kv_names("new_key_values", self.info.num_layers)
        for buffer, name in zip(self.buffers, new_names, strict=True):
            buffer[:, :, start : start + q] = bucket.arrays[name][:, :, :q]
        self._scratch += q
        self.padding_waste += pad
        self.rows_computed += size
        logits = bucket.arrays["logits"][0, :q].copy() if with_logits else None
        # what crosses from onnxruntime to the host: the small outputs and the q new KV rows
        self.last_bytes_out = (logits.nbytes if logits is not None else 0) + sum(v.nbytes for v in extras.values()) \
            + sum(bucket.arrays[name][:, :, :q].nbytes for name in new_names)
        return logits, extras

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


def _kv_names(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}.{layer}.{kind}" for layer in range(layers) for kind in ("key", "value")]


def _pad_rows(value: np.ndarray, size: int, name: str) -> np.ndarray:
    """Pad per-node op inputs to the bucket: padded nodes are parentless, so never accepted."""
    value = np.asarray(value)
    if value.ndim == 0 or value.shape[0] == size:
        return value
    fill = -1 if name == "tree_parent" else 0
    padded = np.full((size, *value.shape[1:]), fill, value.dtype)
    padded[: value.shape[0]] = value
    return padded
