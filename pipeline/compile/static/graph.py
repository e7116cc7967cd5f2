"""Turn a dynamic-shape graph of the docs/design.md §2 contract into one static bucket variant.

The variant feeds `q` tokens, reads the whole KV buffer of `capacity` slots (`past_key_values.*`,
valid slots marked by the mask) and returns only the `q` new entries (`new_key_values.*`), which
the runtime writes into the buffer itself — the form NNAPI/QNN-style static runtimes need.
Custom ops are stripped first and re-inserted after optimisation by the surgery passes, so no
tool in between can damage their function bodies.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import onnx
from onnx import helper

from specdec.custom_ops import DOMAIN
from specdec.pipeline.engine.masks import FULL_MASK, SLIDING_MASK
from specdec.pipeline.graphs.edit import retain

_KV_OUT = re.compile(r"^present\.(\d+)\.(key|value)$")


def strip_custom_ops(model: onnx.ModelProto) -> None:
    """Remove the com.endpoint.ai nodes and everything only they used (outputs, inputs, helpers)."""
    graph = model.graph
    removed_outputs = {o for node in graph.node if node.domain == DOMAIN for o in node.output}
    retain(graph.node, lambda node: node.domain != DOMAIN)
    retain(graph.output, lambda value: value.name not in removed_outputs)
    eliminate_dead_code(model)
    del model.functions[:]
    retain(model.opset_import, lambda opset: opset.domain != DOMAIN)


def eliminate_dead_code(model: onnx.ModelProto) -> None:
    """Drop nodes whose outputs nobody reads, then unused inputs and initializers."""
    graph = model.graph
    while True:
        needed = {o.name for o in graph.output}
        for node in graph.node:
            needed.update(node.input)
            for attribute in node.attribute:  # subgraphs read outer-scope names
                if attribute.g.node:
                    needed.update(name for sub in attribute.g.node for name in sub.input)
        if not retain(graph.node, _produces_any_of(frozenset(needed))):
            break
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    for field in (graph.input, graph.initializer):
        retain(field, lambda item: item.name in used)


def _produces_any_of(names: frozenset[str]) -> Callable[[onnx.NodeProto], bool]:
    return lambda node: any(output in names for output in node.output)


def _set_shape(value: onnx.ValueInfoProto, shape: list[int]) -> None:
    dims = value.type.tensor_type.shape
    del dims.dim[:]
    for size in shape:
        dims.dim.add().dim_value = size


def make_static(model: onnx.ModelProto, *, q: int, capacity: int, num_kv_heads: int, head_dim: int,
                vocab: int) -> None:
    """Fix every shape for bucket `q` and replace `present.*` by the new entries only."""
    graph = model.graph
    new_outputs = []
    for output in list(graph.output):
        match = _KV_OUT.match(output.name)
        if match is None:
            continue
        layer, kind = match.groups()
        name = f"new_key_values.{layer}.{kind}"
        prefix = f"static_{layer}_{kind}"
        graph.initializer.extend([
            helper.make_tensor(f"{prefix}_start", onnx.TensorProto.INT64, [1], [capacity]),
            helper.make_tensor(f"{prefix}_end", onnx.TensorProto.INT64, [1], [capacity + q]),
            helper.make_tensor(f"{prefix}_axis", onnx.TensorProto.INT64, [1], [2]),
        ])
        graph.node.append(helper.make_node(
            "Slice", [output.name, f"{prefix}_start", f"{prefix}_end", f"{prefix}_axis"], [name], name=f"{prefix}_Slice"
        ))
        new_outputs.append(helper.make_tensor_value_info(name, output.type.tensor_type.elem_type,
                                                         [1, num_kv_heads, q, head_dim]))
    retain(graph.output, lambda value: not _KV_OUT.match(value.name))
    graph.output.extend(new_outputs)
    for value in graph.input:
        if value.name in ("input_ids", "position_ids"):
            _set_shape(value, [1, q])
        elif value.name in (FULL_MASK, SLIDING_MASK):
            _set_shape(value, [1, 1, q, capacity + q])
        elif value.name.startswith("past_key_values."):
            _set_shape(value, [1, num_kv_heads, capacity, head_dim])
    for value in graph.output:
        if value.name == "logits":
            _set_shape(value, [1, q, vocab])
    del graph.value_info[:]  # dynamic intermediate shapes are stale now


def dynamic_dims(model: onnx.ModelProto) -> list[str]:
    """Inputs and outputs that still have a symbolic or unknown dimension."""
    left = []
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            left.append(value.name)
    return left
