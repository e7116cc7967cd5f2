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

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from specdec.pipeline.errors import GenerationError
from specdec.pipeline.runtime.graph import OP_INPUT_NAMES, SessionOptions, default_op_inputs, make_session
from specdec.pipeline.runtime.manifest import GraphInfo
from specdec.pipeline.runtime.runner import build_mask

_NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
                "tensor(double)": np.float64, "tensor(int32)": np.int32}


BindBuffer = Callable[[str, Any, list[int], int], None]  # (name, numpy dtype, shape, data pointer)


def _direct_calls(session: Any, binding: Any) -> tuple[BindBuffer, BindBuffer, Callable[[], None]]:
    """(bind an input, bind an output — both over memory we own —, run the bound call) through
    onnxruntime's pybind objects.

    The public `IOBinding.bind_input` / `bind_output` resolve the device from its name and
    `run_with_iobinding` checks WebGPU graph capture, on every call: 40-60 us a step, a seventh of
    a plain step on the demo pair. Where another onnxruntime lacks these attributes, the public
    calls are used."""
    import onnxruntime as ort

    try:
        raw_binding, raw_session = binding._iobinding, session._sess
        device = ort.OrtDevice.make("cpu", 0)._get_c_device()
    except AttributeError:
        return (lambda name, dtype, shape, pointer: binding.bind_input(name, "cpu", 0, dtype, shape, pointer),
                lambda name, dtype, shape, pointer: binding.bind_output(name, "cpu", 0, dtype, shape, pointer),
                functools.partial(session.run_with_iobinding, binding))
    return (lambda name, dtype, shape, pointer: raw_binding.bind_input(name, device, dtype, shape, pointer),
            lambda name, dtype, shape, pointer: raw_binding.bind_output(name, device, dtype, shape, pointer),
            functools.partial(raw_session.run_with_iobinding, raw_binding, None))


# Calls of up to this many rows (steps, trees, draft levels) get a slot of their own size; a slot
# holds q x vocab logits, so the bound keeps the cache small.
_OWN_SLOT_ROWS = 64


class _CallSlot:
    """Everything bound for calls of q rows: a decoding step reuses it and only writes values.

    Binding an input copies nothing when it wraps memory we keep, but each bind call costs
    microseconds in Python; on a small target a step's whole budget is a few hundred. So every
    input and output whose shape follows q lives in a buffer bound once per size, a call writes
    into it in place, and only the mask (its width grows with the context) is bound per call.
    A slot holds buffers for `rows` rows and is bound for any q up to that (`fit`): a new IO binding
    with every KV buffer bound costs ~0.3 ms, so prompts, each of its own length, share one slot.
    """

    def __init__(self, runner: FusedRunner, rows: int) -> None:
        import onnxruntime as ort

        self.rows = rows
        self.binding = runner.session.io_binding()
        for name, value in runner.kv_values:
            self.binding.bind_ortvalue_input(f"past_key_values.{name}", value)
            self.binding.bind_ortvalue_output(f"present.{name}", value)
        self.bind_input, self.bind_output, self.run = _direct_calls(runner.session, self.binding)
        self.seqlens = np.zeros(1, np.int32)
        self.total = np.zeros((), np.int32)
        self._scalars = {"seqlens_k": ort.OrtValue.ortvalue_from_numpy(self.seqlens),
                         "total_sequence_length": ort.OrtValue.ortvalue_from_numpy(self.total)}
        for name, value in self._scalars.items():  # kept: the OrtValues must outlive the binding
            self.binding.bind_ortvalue_input(name, value)
        self._op_inputs = [name for name in default_op_inputs(1) if name in runner.op_inputs]
        self._outputs = runner.free_outputs
        self._inputs_flat = {"input_ids": np.zeros(rows, np.int64), "position_ids": np.zeros(rows, np.int64),
                             **{name: np.zeros(value.size, value.dtype) for name, value
                                in default_op_inputs(rows).items() if name in self._op_inputs}}
        self._outputs_flat = {name: np.zeros(int(np.prod(_shape(shape, rows))), dtype)
                              for name, shape, dtype in runner.free_outputs}
        self.q = 0
        self.fit(rows)

    def fit(self, q: int) -> None:
        """Bind the first q rows' worth of every buffer (a view with the q-row shape) and put the
        op inputs' defaults in; a no-op when the slot is bound for q already."""
        if q == self.q:
            return
        assert q <= self.rows
        self.q = q
        defaults = {name: np.ascontiguousarray(value) for name, value in default_op_inputs(q).items()
                    if name in self._op_inputs}
        shapes = {"input_ids": (1, q), "position_ids": (1, q), **{name: v.shape for name, v in defaults.items()}}
        views = {name: self._inputs_flat[name][: int(np.prod(shape))].reshape(shape) for name, shape in shapes.items()}
        for name, view in views.items():
            self.bind_input(name, view.dtype, list(view.shape), view.ctypes.data)
        self.ids, self.positions = views.pop("input_ids"), views.pop("position_ids")
        self.defaults, self.op_arrays = defaults, views
        for name, view in views.items():
            np.copyto(view, defaults[name])
        self.dirty: set[str] = set()  # op inputs that hold a caller's values, not the defaults
        self.outputs: dict[str, np.ndarray] = {}
        for name, shape, dtype in self._outputs:
            dims = _shape(shape, q)
            view = self._outputs_flat[name][: int(np.prod(dims))].reshape(dims)
            self.bind_output(name, dtype, dims, view.ctypes.data)
            self.outputs[name] = view

    def call(self, total: int, mask: np.ndarray, extra_inputs: dict[str, np.ndarray] | None) -> None:
        """Run the bound q rows over `total` KV slots: `mask` holds the [q, total] attention bias (a
        longer row is bound by its prefix); op inputs not given get their defaults back."""
        self.seqlens[0] = total - 1
        self.total[()] = total
        self.bind_input("attention_bias", mask.dtype, [1, 1, self.q, total], mask.ctypes.data)
        if extra_inputs or self.dirty:
            self.set_op_inputs(extra_inputs or {})
        self.run()

    def set_op_inputs(self, given: dict[str, np.ndarray]) -> None:
        """Write the caller's op inputs for this call; the others get their defaults back.
        Every op input's shape follows q (the graph's declared shapes), so values fit in place."""
        for name in self.dirty - given.keys():
            np.copyto(self.op_arrays[name], self.defaults[name])
        self.dirty = {name for name in given if name in self.op_arrays}
        for name in self.dirty:
            np.copyto(self.op_arrays[name], given[name], casting="unsafe")


def _shape(declared: list[Any], q: int) -> list[int]:
    """A graph output's shape for a call of q rows: every symbolic dimension follows q."""
    return [d if isinstance(d, int) else q for d in declared]


class FusedRunner:
    def __init__(self, info: GraphInfo, path: Any, capacity: int, options: SessionOptions | None = None) -> None:
        import onnxruntime as ort

        self.info = info
        self.session = make_session(path, options or SessionOptions(), threads_by_size=False)
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
        self._wide: _CallSlot | None = None  # calls of more rows (prompts), re-bound per size
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
        self._check_room(total)
        slot = self._slot(q, prompt=past == 0)
        slot.ids[0] = ids
        slot.positions[0] = positions
        if q == 1 and past == self._length and bool(new_visible[0, 0]):
            mask = self._visible_row  # nothing in scratch: the row sees every slot
        else:
            mask = build_mask(self.dtype, self.mask_min, self._length, past, scratch_visible, new_visible)
        slot.call(total, mask, extra_inputs)
        arrays = slot.outputs
        names = (["logits"] if with_logits else []) + list(extra_outputs)
        result = {name: arrays[name].copy() for name in names}
        self._scratch += q
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
        if self._scratch:
            raise RuntimeError("a root step needs an empty scratch: commit the last call first")
        self._check_room(total)
        slot = self._slot(rows)
        slot.ids[0, 0] = token
        slot.positions[0, 0] = past
        if rows == 1:
            mask = self._visible_row
        else:  # zeros: every row sees the committed slots; each new row hides the other new rows
            mask = np.zeros((rows, total), self.dtype)
            mask[:, past:] = self.mask_min
            mask[:, past:].flat[:: rows + 1] = 0
            slot.positions[0, 1:] = range(past + 1, total)
            slot.ids[0, 1:] = 0
        slot.call(total, mask, None)
        self._length = past + 1
        next_token = slot.outputs["next_token"]
        self.last_bytes_out = next_token.nbytes
        return int(next_token)

    def _check_room(self, total: int) -> None:
        if total > self.capacity:
            raise GenerationError(f"the {self.info.role} KV buffer of {self.capacity} slots is full",
                                  "compile with a larger --max-context or generate fewer tokens")

    def _slot(self, q: int, prompt: bool = False) -> _CallSlot:
        """Steps, trees and draft levels come in few sizes: each gets a slot bound once. A prompt
        (the first call after a reset) has a length of its own: prompts share one slot, re-bound."""
        slot = self._slots.get(q)
        if slot is not None:
            return slot
        if q <= _OWN_SLOT_ROWS and not prompt:
            slot = self._slots[q] = _CallSlot(self, q)
            return slot
        if self._wide is None or self._wide.rows < q:
            self._wide = _CallSlot(self, min(self.capacity, 1 << (q - 1).bit_length()))
        self._wide.fit(q)
        return self._wide

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
