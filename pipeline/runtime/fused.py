"""Runner for the fused CPU flavour: GroupQueryAttention graphs over one in-place KV buffer per layer.

Every layer's key and value live in a preallocated [1, kv_heads, capacity, head_dim] buffer that
is bound, through onnxruntime IO binding, as both the graph's past input and its present output.
GroupQueryAttention attends only over the first `total` slots and writes a call's q new rows at
`total - q … total - 1` itself, so a decoding step copies nothing that grows with the context: the
buffers are bound once, and per call only the token ids, positions, the [q, total] mask and two
length scalars are fed. Scratch rows (draft levels, the target's tree) sit after the committed
ones; `commit` moves the accepted rows down, a copy of a few rows per layer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specdec.pipeline.errors import GenerationError
from specdec.pipeline.runtime.graph import OP_INPUT_NAMES, SessionOptions, default_op_inputs, make_session
from specdec.pipeline.runtime.manifest import GraphInfo
from specdec.pipeline.runtime.runner import build_mask

_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
                "tensor(double)": np.float64, "tensor(int32)": np.int32}


class FusedRunner:
    def __init__(self, info: GraphInfo, path: Any, capacity: int, options: SessionOptions | None = None) -> None:
        import onnxruntime as ort

        self.info = info
        self.session = make_session(path, options or SessionOptions())
        inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = {o.name for o in self.session.get_outputs()}
        self.has_prune = "cand_ids" in self.outputs
        self.has_verify = "next_token" in self.outputs
        self._op_inputs = [name for name in inputs if name in OP_INPUT_NAMES]
        self.dtype = np.dtype(info.dtype)
        self.mask_min = float(np.finfo(self.dtype).min)
        self.capacity = capacity
        shape = (1, info.num_kv_heads, capacity, info.head_dim)
        self.buffers = [np.zeros(shape, self.dtype) for _ in range(2 * info.num_layers)]
        self._binding = self.session.io_binding()
        for index, buffer in enumerate(self.buffers):
            value = ort.OrtValue.ortvalue_from_numpy(buffer)
            layer, kind = divmod(index, 2)
            suffix = f"{layer}.{'value' if kind else 'key'}"
            self._binding.bind_ortvalue_input(f"past_key_values.{suffix}", value)
            self._binding.bind_ortvalue_output(f"present.{suffix}", value)
        # Every other output (logits, the custom ops' results) goes into numpy arrays preallocated
        # per call size: binding memory we own avoids wrapping every bound output per call, which
        # costs more than the small outputs themselves.
        kv_names = {f"present.{i // 2}.{'value' if i % 2 else 'key'}" for i in range(len(self.buffers))}
        self._free_outputs = [(o.name, o.shape, _NUMPY_TYPES[o.type]) for o in self.session.get_outputs()
                              if o.name not in kv_names]
        self._arrays: dict[int, dict[str, np.ndarray]] = {}
        self._length = 0
        self._scratch = 0
        self.last_bytes_out = 0

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
        # Stale rows beyond `total` are never read (GQA attends over the valid length only).
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
        past = self._length + self._scratch
        total = past + q
        if total > self.capacity:
            raise GenerationError(f"the {self.info.role} KV buffer of {self.capacity} slots is full",
                                  "compile with a larger --max-context or generate fewer tokens")
        binding = self._binding
        ids = np.ascontiguousarray(ids, np.int64).reshape(1, q)
        positions = np.ascontiguousarray(positions, np.int64).reshape(1, q)
        mask = build_mask(self.dtype, self.mask_min, self._length, past, scratch_visible, new_visible)
        lengths = np.array([total - 1], np.int32)
        total_array = np.array(total, np.int32)
        feeds = {"input_ids": ids, "position_ids": positions, "attention_bias": mask, "seqlens_k": lengths,
                 "total_sequence_length": total_array}
        if self._op_inputs:
            defaults = default_op_inputs(q)
            given = extra_inputs or {}
            feeds.update({name: np.ascontiguousarray(given.get(name, defaults[name])) for name in self._op_inputs})
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        arrays = self._outputs_for(q)
        for name, array in arrays.items():
            binding.bind_output(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)
        self.session.run_with_iobinding(binding)
        names = (["logits"] if with_logits else []) + list(extra_outputs)
        result = {name: arrays[name].copy() for name in names}
        self._scratch += q
        logits = result.pop("logits")[0] if with_logits else None
        self.last_bytes_out = (logits.nbytes if logits is not None else 0) + sum(v.nbytes for v in result.values())
        return logits, result

    def _outputs_for(self, q: int) -> dict[str, np.ndarray]:
        arrays = self._arrays.get(q)
        if arrays is None:
            arrays = {name: np.zeros([d if isinstance(d, int) else q for d in shape], dtype)
                      for name, shape, dtype in self._free_outputs}
            if len(self._arrays) > 64:  # trees come in few sizes; bound the cache anyway
                self._arrays.clear()
            self._arrays[q] = arrays
        return arrays

    def commit(self, keep: np.ndarray | list[int]) -> None:
        base = self._length
        index = np.asarray(keep, np.int64)
        if index.size and not np.array_equal(index, np.arange(index.size)):
            rows = base + index
            for buffer in self.buffers:
                buffer[:, :, base : base + index.size] = buffer[:, :, rows]
        self._length = base + int(index.size)
        self._scratch = 0
