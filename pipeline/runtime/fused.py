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


class _CallSlot:
    """Everything bound for calls of one size q: a decoding step reuses it and only writes values.

    Binding an input copies nothing when it wraps memory we keep, but each bind call and each
    numpy-to-OrtValue wrap costs microseconds in Python; on a small target a step's whole budget is
    a few hundred. So every fixed-shape input of size q lives in an array bound once, a call
    writes into it in place, and only the mask (its width grows with the context) is bound per call.
    """

    def __init__(self, runner: FusedRunner, q: int) -> None:
        import onnxruntime as ort

        self.binding = runner.session.io_binding()
        for name, value in runner.kv_values:
            self.binding.bind_ortvalue_input(f"past_key_values.{name}", value)
            self.binding.bind_ortvalue_output(f"present.{name}", value)
        self.ids = np.zeros((1, q), np.int64)
        self.positions = np.zeros((1, q), np.int64)
        self.seqlens = np.zeros(1, np.int32)
        self.total = np.zeros((), np.int32)
        self.defaults = {name: np.ascontiguousarray(value) for name, value in default_op_inputs(q).items()
                         if name in runner.op_inputs}
        self.op_arrays = {name: value.copy() for name, value in self.defaults.items()}
        self.dirty: set[str] = set()  # op inputs that hold a caller's values, not the defaults
        fixed = {"input_ids": self.ids, "position_ids": self.positions, "seqlens_k": self.seqlens,
                 "total_sequence_length": self.total, **self.op_arrays}
        self._values = {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in fixed.items()}
        for name, value in self._values.items():  # kept: the OrtValues must outlive the binding
            self.binding.bind_ortvalue_input(name, value)
        self.outputs = {name: np.zeros([d if isinstance(d, int) else q for d in shape], dtype)
                        for name, shape, dtype in runner.free_outputs}
        for name, array in self.outputs.items():
            self.binding.bind_output(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)

    def set_op_inputs(self, given: dict[str, np.ndarray]) -> None:
        """Write the caller's op inputs for this call; the others get their defaults back.
        Every op input's shape follows q (the graph's declared shapes), so values fit in place."""
        for name in self.dirty - given.keys():
            np.copyto(self.op_arrays[name], self.defaults[name])
        self.dirty = {name for name in given if name in self.op_arrays}
        for name in self.dirty:
            np.copyto(self.op_arrays[name], given[name], casting="unsafe")


class FusedRunner:
    def __init__(self, info: GraphInfo, path: Any, capacity: int, options: SessionOptions | None = None) -> None:
        import onnxruntime as ort

        self.info = info
        self.session = make_session(path, options or SessionOptions())
        inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = {o.name for o in self.session.get_outputs()}
        self.has_prune = "cand_ids" in self.outputs
        self.has_verify = "next_token" in self.outputs
        self.op_inputs = [name for name in inputs if name in OP_INPUT_NAMES]
        self.dtype = np.dtype(info.dtype)
        self.mask_min = float(np.finfo(self.dtype).min)
        self.capacity = capacity
        shape = (1, info.num_kv_heads, capacity, info.head_dim)
        self.buffers = [np.zeros(shape, self.dtype) for _ in range(2 * info.num_layers)]
        self.kv_values = [(f"{i // 2}.{'value' if i % 2 else 'key'}", ort.OrtValue.ortvalue_from_numpy(buffer))
                          for i, buffer in enumerate(self.buffers)]
        # Every other output (logits, the custom ops' results) goes into numpy arrays preallocated
        # per call size: binding memory we own avoids wrapping every bound output per call, which
        # costs more than the small outputs themselves.
        kv_names = {f"present.{name}" for name, _ in self.kv_values}
        self.free_outputs = [(o.name, o.shape, _NUMPY_TYPES[o.type]) for o in self.session.get_outputs()
                             if o.name not in kv_names]
        self._slots: dict[int, _CallSlot] = {}
        # A step sees every committed slot: its mask is a prefix of this zero row, bound in place.
        self._visible_row = np.zeros(capacity, self.dtype)
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
        slot = self._slot(q)
        slot.ids[0] = ids
        slot.positions[0] = positions
        slot.seqlens[0] = total - 1
        slot.total[()] = total
        if q == 1 and past == self._length and bool(new_visible[0, 0]):
            mask = self._visible_row  # nothing in scratch: the row sees every slot
        else:
            mask = build_mask(self.dtype, self.mask_min, self._length, past, scratch_visible, new_visible)
        slot.binding.bind_input("attention_bias", "cpu", 0, self.dtype, [1, 1, q, total], mask.ctypes.data)
        if extra_inputs or slot.dirty:
            slot.set_op_inputs(extra_inputs or {})
        self.session.run_with_iobinding(slot.binding)
        arrays = slot.outputs
        names = (["logits"] if with_logits else []) + list(extra_outputs)
        result = {name: arrays[name].copy() for name in names}
        self._scratch += q
        logits = result.pop("logits")[0] if with_logits else None
        self.last_bytes_out = (logits.nbytes if logits is not None else 0) + sum(v.nbytes for v in result.values())
        return logits, result

    def _slot(self, q: int) -> _CallSlot:
        slot = self._slots.get(q)
        if slot is None:
            if len(self._slots) > 64:  # trees come in few sizes; bound the cache anyway
                self._slots.clear()
            slot = self._slots[q] = _CallSlot(self, q)
        return slot

    def commit(self, keep: np.ndarray | list[int]) -> None:
        base = self._length
        index = np.asarray(keep, np.int64)
        # the cheap test first: a step keeps [0] (or [0, 1]), and a prefix always ends at size - 1
        if index.size and (int(index[-1]) != index.size - 1 or (
                index.size > 2 and not np.array_equal(index, np.arange(index.size)))):
            rows = base + index
            for buffer in self.buffers:
                buffer[:, :, base : base + index.size] = buffer[:, :, rows]
        self._length = base + int(index.size)
        self._scratch = 0
