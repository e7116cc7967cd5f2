"""Opt-in (`--quantize-embeddings`): embedding tables into `com.microsoft::GatherBlockQuantized`.

A Gather from a constant [V, K] float table is replaced by GatherBlockQuantized over the same
bytes MatMulNBits uses for a [K, N = V] weight: row v of the table is column v of that weight,
quantized in blocks along K, so our packer serves both (checked against onnxruntime's kernel).
Tables are quantized with RTN: a lookup has no calibration loss to minimise.

A table tied to the output head keeps its own copy: the head's MatMulNBits holds the GPTQ/AWQ
codes tuned for the head's outputs, the lookup gets plain RTN codes of the table. Sharing one
copy would save a further table's worth of bytes; it is not done.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.graphs.edit import ensure_opset, retain
from specdec.pipeline.graphs.query import MS_DOMAIN, attribute_value, module_name, names_used, unique_name
from specdec.pipeline.quantize.packing import Packed

_FLOAT_TYPES: dict[int, type[np.floating]] = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


@dataclass(frozen=True)
class Embedding:
    name: str
    node: str
    table: str  # initializer [V, K]
    indices: str
    output: str
    V: int
    K: int
    dtype: type[np.floating]


def find_embeddings(model: onnx.ModelProto) -> list[Embedding]:
    graph = model.graph
    inits = {init.name: init for init in graph.initializer}
    graph_inputs = {value.name for value in graph.input}
    found: list[Embedding] = []
    for index, node in enumerate(graph.node):
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or attribute_value(node, "axis", 0) != 0:
            continue
        table = inits.get(node.input[0])
        if table is None or table.name in graph_inputs or len(table.dims) != 2 or table.data_type not in _FLOAT_TYPES:
            continue
        found.append(Embedding(name=module_name(node) or table.name, node=node.name or f"node{index}",
                               table=table.name, indices=node.input[1], output=node.output[0], V=int(table.dims[0]),
                               K=int(table.dims[1]), dtype=_FLOAT_TYPES[table.data_type]))
    return found


def load_table(model: onnx.ModelProto, embedding: Embedding) -> np.ndarray:
    """The table as the [K, V] weight whose columns are its rows (what the quantizers take)."""
    for init in model.graph.initializer:
        if init.name == embedding.table:
            return np.ascontiguousarray(numpy_helper.to_array(init).T)
    raise KeyError(embedding.table)


def apply_embeddings(model: onnx.ModelProto, replacements: list[tuple[Embedding, Packed]]) -> None:
    graph = model.graph
    taken = {init.name for init in graph.initializer} | {out for node in graph.node for out in node.output}
    taken |= {node.name for node in graph.node}
    by_node = {embedding.node: (embedding, packed) for embedding, packed in replacements}
    new_nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        found = by_node.get(node.name or f"node{index}")
        if found is None:
            new_nodes.append(node)
            continue
        embedding, packed = found
        prefix = embedding.name
        blocks = embedding.K // packed.block_size
        data = numpy_helper.from_array(packed.weight.reshape(embedding.V, -1), unique_name(f"{prefix}.qtable", taken))
        scales = numpy_helper.from_array(packed.scales.reshape(embedding.V, blocks).astype(embedding.dtype),
                                         unique_name(f"{prefix}.scales", taken))
        graph.initializer.extend([data, scales])
        inputs = [data.name, embedding.indices, scales.name]
        if packed.zero_points is not None:
            zero = numpy_helper.from_array(packed.zero_points.reshape(embedding.V, -1),
                                           unique_name(f"{prefix}.zero_points", taken))
            graph.initializer.append(zero)
            inputs.append(zero.name)
        gather = helper.make_node("GatherBlockQuantized", inputs, [embedding.output], domain=MS_DOMAIN,
                                  name=unique_name(f"{embedding.node}_Q{packed.bits}", taken))
        gather.attribute.extend(helper.make_attribute(key, value) for key, value in
                                {"gather_axis": 0, "quantize_axis": 1, "block_size": packed.block_size,
                                 "bits": packed.bits}.items())
        gather.metadata_props.extend(p for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes")
        new_nodes.append(gather)
    del graph.node[:]
    graph.node.extend(new_nodes)
    used = set(names_used(graph)) | {value.name for value in graph.output}
    dead = {embedding.table for embedding, _ in replacements} - used  # a tied head may still read the table
    retain(graph.initializer, lambda init: init.name not in dead)
    if replacements:
        ensure_opset(model, MS_DOMAIN, 1)
