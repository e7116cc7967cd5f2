"""Rewrite the linear layers of an exported graph into `com.microsoft::MatMulNBits` or, for the
w8a8 format, the standard-op MatMulInteger subgraph of `specdec.pipeline.graphs.int8_matmul`.

Layers are found by `specdec.pipeline.graphs.query.find_layers` (module paths from the exporter's
metadata); each rewrite keeps that metadata on the new nodes so later stages can name them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.graphs.edit import ensure_opset, retain
from specdec.pipeline.graphs.query import (
    MS_DOMAIN,
    SCOPES_KEY,
    Layer,
    names_used,
    unique_name,
)
from specdec.pipeline.quantize.packing import Packed


@dataclass(frozen=True)
class Rewrite:
    layer: Layer
    packed: Packed | int8_matmul.Int8Columns
    input_scale: np.ndarray | None  # AWQ: multiply x by this before the MatMulNBits
    accuracy_level: int


def _replacement(rewrite: Rewrite, node: onnx.NodeProto, taken: set[str]) -> tuple[list[onnx.NodeProto],
                                                                                      list[TensorProto]]:
    layer, packed = rewrite.layer, rewrite.packed
    prefix = layer.name.replace("#", "_")
    if isinstance(packed, int8_matmul.Int8Columns):
        w8a8_nodes, w8a8_inits = int8_matmul.emit(layer.input, layer.output, packed, prefix,
                                                  lambda base: unique_name(base, taken), bias=layer.bias)
        _keep_scopes(node, w8a8_nodes)
        return w8a8_nodes, w8a8_inits
    inits = [numpy_helper.from_array(packed.weight, unique_name(f"{prefix}.qweight{packed.bits}", taken)),
             numpy_helper.from_array(packed.scales.astype(layer.dtype), unique_name(f"{prefix}.scales", taken))]
    inputs = [layer.input, inits[0].name, inits[1].name]
    if packed.zero_points is not None:
        inits.append(numpy_helper.from_array(packed.zero_points, unique_name(f"{prefix}.zero_points", taken)))
        inputs.append(inits[-1].name)
    nodes: list[onnx.NodeProto] = []
    if rewrite.input_scale is not None:
        inits.append(numpy_helper.from_array(rewrite.input_scale.astype(layer.dtype),
                                             unique_name(f"{prefix}.awq_inv_scale", taken)))
        scaled = unique_name(f"{prefix}.awq_input", taken)
        nodes.append(helper.make_node("Mul", [layer.input, inits[-1].name], [scaled],
                                      name=unique_name(f"{layer.node}_awq_scale", taken)))
        inputs[0] = scaled
    product = layer.output if layer.bias is None else unique_name(f"{prefix}.matmul_out", taken)
    attrs: dict[str, int] = {"K": layer.K, "N": layer.N, "bits": packed.bits, "block_size": packed.block_size}
    if rewrite.accuracy_level:  # 0 is the default; some consumers reject the attribute
        attrs["accuracy_level"] = rewrite.accuracy_level
    matmul = helper.make_node("MatMulNBits", inputs, [product], name=unique_name(f"{layer.node}_Q{packed.bits}", taken),
                              domain=MS_DOMAIN)
    matmul.attribute.extend(helper.make_attribute(key, value) for key, value in attrs.items())
    nodes.append(matmul)
    if layer.bias is not None:
        nodes.append(helper.make_node("Add", [product, layer.bias], [layer.output],
                                      name=unique_name(f"{layer.node}_bias", taken)))
    _keep_scopes(node, nodes)
    return nodes, inits


def _keep_scopes(node: onnx.NodeProto, nodes: list[onnx.NodeProto]) -> None:
    scopes = [prop for prop in node.metadata_props if prop.key == SCOPES_KEY]
    for new in nodes:  # keep the module path (not the bulky stack traces) so tools can still name the layer
        new.metadata_props.extend(scopes)


def apply_rewrites(model: onnx.ModelProto, rewrites: list[Rewrite]) -> None:
    """Replace each layer's node in place (order kept) and drop what the float weights leave unused."""
    graph = model.graph
    by_node = {rewrite.layer.node: rewrite for rewrite in rewrites}
    taken = {init.name for init in graph.initializer} | {out for node in graph.node for out in node.output}
    taken |= {node.name for node in graph.node} | {value.name for value in graph.input}
    new_nodes: list[onnx.NodeProto] = []
    new_inits: list[TensorProto] = []
    for index, node in enumerate(graph.node):
        rewrite = by_node.get(node.name or f"node{index}")
        if rewrite is None:
            new_nodes.append(node)
            continue
        nodes, inits = _replacement(rewrite, node, taken)
        new_nodes.extend(nodes)
        new_inits.extend(inits)
    del graph.node[:]
    graph.node.extend(new_nodes)
    graph.initializer.extend(new_inits)

    # Only what fed the rewritten layers may go: a tied embedding still reads its table.
    used = set(names_used(graph)) | {value.name for value in graph.output}
    dead_transposes = {r.layer.via_transpose for r in rewrites if r.layer.via_transpose} - used
    if retain(graph.node, lambda node: not (node.op_type == "Transpose" and node.output[0] in dead_transposes)):
        used = set(names_used(graph)) | {value.name for value in graph.output}
    dead_inits = {r.layer.weight for r in rewrites} - used
    retain(graph.initializer, lambda init: init.name not in dead_inits)
    gone = dead_transposes | dead_inits
    retain(graph.value_info, lambda value: value.name not in gone)
    if any(isinstance(r.packed, Packed) for r in rewrites):
        ensure_opset(model, MS_DOMAIN, 1)
