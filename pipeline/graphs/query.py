"""Reading structure out of exported graphs: module paths, attributes, linear layers.

The dynamo exporter writes a linear layer as `MatMul(x, W[K, N])` (Llama, Qwen2), `Gemm(x, W, b)`
(GPT-2's Conv1D) or, for a head tied to the embedding, `MatMul(x, Transpose(E))`. Any main-graph
MatMul / Gemm whose weight is a constant 2-D float initializer (or a Transpose of one) qualifies.
Model-local functions (the com.endpoint.ai custom ops) hold no initializers and are never touched.

Layers are named by the module path torch records in each node's metadata
(`pkg.torch.onnx.name_scopes`), without the export wrapper's leading `model.`:
`model.layers.0.self_attn.q_proj`, `lm_head`, `transformer.h.0.attn.c_attn`. Quantize rewrites
keep that metadata, so later stages (the fused compile flavour) find layers the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_WRAPPER_PREFIX = "model."
_FLOAT_TYPES: dict[int, type[np.floating]] = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


@dataclass(frozen=True)
class Layer:
    name: str
    node: str  # node name, unique in the graph
    op: str  # MatMul | Gemm
    input: str  # the activation x
    output: str
    weight: str  # initializer holding the weight
    transposed: bool  # the initializer is [N, K] (Transpose of it, or Gemm transB=1)
    via_transpose: str | None  # output of the Transpose node between initializer and layer
    bias: str | None  # Gemm's C
    K: int
    N: int
    dtype: type[np.floating]


def module_name(node: onnx.NodeProto) -> str | None:
    for prop in node.metadata_props:
        if prop.key != SCOPES_KEY:
            continue
        try:
            scopes = ast.literal_eval(prop.value)
        except (ValueError, SyntaxError):
            return None
        # [..., 'model.model.layers.0.self_attn.q_proj', 'linear']: the module, then the op.
        if isinstance(scopes, list) and len(scopes) >= 2 and isinstance(scopes[-2], str) and scopes[-2]:
            module = scopes[-2]
            name = module[len(_WRAPPER_PREFIX):] if module.startswith(_WRAPPER_PREFIX) else module
            return name if name and name != "model" else None
    return None


def attribute_value(node: onnx.NodeProto, name: str, default: float | int | list[int] | None) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _weight_source(name: str, inits: dict[str, TensorProto], producers: dict[str, onnx.NodeProto],
                   graph_inputs: set[str]) -> tuple[str, bool, str | None] | None:
    """(initializer, stored transposed, transpose output) for a constant 2-D float weight."""
    if name in inits and name not in graph_inputs:
        return name, False, None
    producer = producers.get(name)
    if producer is None or producer.op_type != "Transpose" or producer.domain not in ("", "ai.onnx"):
        return None
    source = producer.input[0]
    perm = attribute_value(producer, "perm", None)
    if source in inits and source not in graph_inputs and (perm is None or list(perm) == [1, 0]):  # type: ignore[call-overload]
        return source, True, name
    return None


def find_layers(model: onnx.ModelProto) -> list[Layer]:
    graph = model.graph
    inits = {init.name: init for init in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    graph_inputs = {value.name for value in graph.input}
    layers: list[Layer] = []
    seen: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("MatMul", "Gemm"):
            continue
        bias: str | None = None
        trans_b = False
        if node.op_type == "Gemm":
            if attribute_value(node, "transA", 0) or attribute_value(node, "alpha", 1.0) != 1.0:
                continue
            if len(node.input) > 2 and node.input[2]:
                if attribute_value(node, "beta", 1.0) != 1.0:
                    continue
                bias = node.input[2]
            trans_b = bool(attribute_value(node, "transB", 0))
        source = _weight_source(node.input[1], inits, producers, graph_inputs)
        if source is None:
            continue
        init_name, via_transpose, transpose_out = source
        init = inits[init_name]
        if len(init.dims) != 2 or init.data_type not in _FLOAT_TYPES:
            continue
        transposed = via_transpose != trans_b
        k, n = (init.dims[1], init.dims[0]) if transposed else (init.dims[0], init.dims[1])
        name = module_name(node) or init_name
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}#{seen[name]}"
        layers.append(Layer(name=name, node=node.name or f"node{index}", op=node.op_type, input=node.input[0],
                            output=node.output[0], weight=init_name, transposed=transposed,
                            via_transpose=transpose_out, bias=bias, K=int(k), N=int(n),
                            dtype=_FLOAT_TYPES[init.data_type]))
    return layers


def load_weight(model: onnx.ModelProto, layer: Layer, base_dir: Path | None = None) -> np.ndarray:
    """The layer's weight as W[K, N] (x @ W), in its stored dtype; `base_dir`: where a structure-only
    model's external data lies (the weight is read from there alone)."""
    from onnx.external_data_helper import uses_external_data

    from specdec.pipeline.graphs.files import read_external

    for init in model.graph.initializer:
        if init.name == layer.weight:
            external = base_dir is not None and uses_external_data(init)
            array = read_external(init, base_dir) if external and base_dir is not None else numpy_helper.to_array(init)
            return np.ascontiguousarray(array.T if layer.transposed else array)
    raise KeyError(layer.weight)


def names_used(graph: onnx.GraphProto) -> Iterator[str]:
    """Every tensor name a node of `graph` or of its subgraphs reads (outer-scope reads included)."""
    for node in graph.node:
        yield from node.input
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from names_used(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from names_used(sub)


def unique_name(base: str, taken: set[str]) -> str:
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}_{count}"
    taken.add(name)
    return name
