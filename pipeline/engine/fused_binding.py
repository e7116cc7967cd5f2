"""IO binding of a fused graph for calls of a given size (engine/fused.py's hot path).

A `CallSlot` binds, once per call size, every input and output whose shape follows the call's
rows, and the KV buffers of every layer group (engine/fused_kv.py) as both past and present; a
call then only writes values and binds each group's mask.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from specdec.pipeline.engine.fused_kv import LayerGroup
from specdec.pipeline.engine.graph import default_op_inputs

Outputs = list[tuple[str, list[Any], Any]]  # (name, declared shape, numpy dtype) of the outputs bound per call
# (name, trailing dims, numpy dtype) of inputs [1, q, *trailing] a caller fills per call (a feature
# draft's `hidden_states`)
RowInputs = list[tuple[str, tuple[int, ...], Any]]

NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
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
OWN_SLOT_ROWS = 64


class CallSlot:
    """Everything bound for calls of q rows: a decoding step reuses it and only writes values.

    Binding an input copies nothing when it wraps memory we keep, but each bind call costs
    microseconds in Python; on a small target a step's whole budget is a few hundred. So every
    input and output whose shape follows q lives in a buffer bound once per size, a call writes
    into it in place, and only the masks (their width grows with the context) are bound per call.
    A slot holds buffers for `rows` rows and is bound for any q up to that (`fit`): a new IO binding
    with every KV buffer bound costs ~0.3 ms, so prompts, each of its own length, share one slot.
    """

    def __init__(self, session: Any, groups: list[LayerGroup], op_inputs: list[str], outputs: Outputs,
                 rows: int, row_inputs: RowInputs | None = None) -> None:
        import onnxruntime as ort

        self.rows = rows
        self.binding = session.io_binding()
        for group in groups:
            for name, value in zip(group.names, group.values, strict=True):
                self.binding.bind_ortvalue_input(f"past_key_values.{name}", value)
                self.binding.bind_ortvalue_output(f"present.{name}", value)
        self.bind_input, self.bind_output, self.run = _direct_calls(session, self.binding)
        self.seqlens = [np.zeros(1, np.int32) for _ in groups]
        self.totals = [np.zeros((), np.int32) for _ in groups]
        self._scalars = []  # kept: the OrtValues must outlive the binding
        for group, seqlens, total in zip(groups, self.seqlens, self.totals, strict=True):
            for name, array in ((f"{group.prefix}seqlens_k", seqlens), (f"{group.prefix}total_sequence_length", total)):
                value = ort.OrtValue.ortvalue_from_numpy(array)
                self._scalars.append(value)
                self.binding.bind_ortvalue_input(name, value)
        self._biases = [group.bias for group in groups]
        self._op_inputs = [name for name in default_op_inputs(1) if name in op_inputs]
        self._outputs = outputs
        self._row_inputs = row_inputs or []
        self._inputs_flat = {"input_ids": np.zeros(rows, np.int64), "position_ids": np.zeros(rows, np.int64),
                             **{name: np.zeros(value.size, value.dtype) for name, value
                                in default_op_inputs(rows).items() if name in self._op_inputs},
                             **{name: np.zeros(rows * int(np.prod(trailing)), dtype)
                                for name, trailing, dtype in self._row_inputs}}
        self._outputs_flat = {name: np.zeros(int(np.prod(output_shape(shape, rows))), dtype)
                              for name, shape, dtype in outputs}
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
        shapes = {"input_ids": (1, q), "position_ids": (1, q), **{name: v.shape for name, v in defaults.items()},
                  **{name: (1, q, *trailing) for name, trailing, _ in self._row_inputs}}
        views = {name: self._inputs_flat[name][: int(np.prod(shape))].reshape(shape) for name, shape in shapes.items()}
        for name, view in views.items():
            self.bind_input(name, view.dtype, list(view.shape), view.ctypes.data)
        self.ids, self.positions = views.pop("input_ids"), views.pop("position_ids")
        self.row_arrays = {name: views.pop(name) for name, _, _ in self._row_inputs}
        self.defaults, self.op_arrays = defaults, views
        for name, view in views.items():
            np.copyto(view, defaults[name])
        self.dirty: set[str] = set()  # op inputs that hold a caller's values, not the defaults
        self.outputs: dict[str, np.ndarray] = {}
        for name, shape, dtype in self._outputs:
            dims = output_shape(shape, q)
            view = self._outputs_flat[name][: int(np.prod(dims))].reshape(dims)
            self.bind_output(name, dtype, dims, view.ctypes.data)
            self.outputs[name] = view

    def call(self, totals: list[int], masks: list[np.ndarray], extra_inputs: dict[str, np.ndarray] | None) -> None:
        """Run the bound q rows over each group's `total` rows: its mask holds the [q, total]
        attention bias (a longer row is bound by its prefix); op inputs not given get their
        defaults back."""
        for seqlens, total_array, bias, total, mask in zip(self.seqlens, self.totals, self._biases, totals, masks,
                                                           strict=True):
            seqlens[0] = total - 1
            total_array[()] = total
            self.bind_input(bias, mask.dtype, [1, 1, self.q, total], mask.ctypes.data)
        if extra_inputs or self.dirty:
            self.set_op_inputs(extra_inputs or {})
        self.run()

    def set_op_inputs(self, given: dict[str, np.ndarray]) -> None:
        """Write the caller's op inputs for this call; the others get their defaults back.
        Every op input's shape follows q (the graph's declared shapes), so values fit in place.
        Row inputs (`hidden_states`) hold whatever the caller wrote last: every call gives them."""
        for name, array in self.row_arrays.items():
            if name in given:
                np.copyto(array, np.asarray(given[name]).reshape(array.shape), casting="unsafe")
        for name in self.dirty - given.keys():
            np.copyto(self.op_arrays[name], self.defaults[name])
        self.dirty = {name for name in given if name in self.op_arrays}
        for name in self.dirty:
            np.copyto(self.op_arrays[name], given[name], casting="unsafe")


def output_shape(declared: list[Any], q: int) -> list[int]:
    """A graph output's shape for a call of q rows: every symbolic dimension follows q."""
    return [d if isinstance(d, int) else q for d in declared]
