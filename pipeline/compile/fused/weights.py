"""Read a decoder's weights out of a bundle graph, whatever earlier stages did to it.

The fused CPU flavour is built from the bundle's own graph rather than from the Hugging Face
checkpoint, so it works on any bundle (the checkpoint may be gone) and keeps what quantize
chose (AWQ/GPTQ/RTN codes, per-layer bits, the AWQ input scales). Layers are found by the module
path torch records in each node's metadata (`model.layers.0.self_attn.q_proj`), which export
writes and quantize keeps: a linear layer is a float `MatMul` (quantize/layers.find_layers) or a
`MatMulNBits`, optionally behind AWQ's `Mul` by a constant and followed by a bias `Add`, or the w8a8
format's MatMulInteger subgraph (pipeline/graphs/int8_matmul.py reads it back). Which
modules to look for (packed projections, q/k norms, where the norms sit) comes from the graph's
`Decoder` record (records/decoder.py); a norm's scale is whatever its module multiplies by, so
Gemma's (1 + w), which the exporter folds into one constant, reads as the scale it is.
Anything this reader gets wrong is caught by the compile stage's validation against the
dynamic graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from specdec.pipeline.errors import UnsupportedModelError
from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.graphs.query import MS_DOMAIN, attribute_value, find_layers, load_weight, module_name
from specdec.pipeline.records.decoder import Decoder


@dataclass(frozen=True)
class QuantWeight:
    """A MatMulNBits weight exactly as quantize packed it."""

    packed: np.ndarray  # uint8 [N, k_blocks, blob]
    scales: np.ndarray  # [N * k_blocks]
    zero_points: np.ndarray | None
    bits: int
    block_size: int
    accuracy_level: int


@dataclass(frozen=True)
class Linear:
    """`y = (x * input_scale) @ W + bias` with W float [K, N] or quantized (MatMulNBits or w8a8)."""

    name: str
    K: int
    N: int
    weight: np.ndarray | None = None
    quant: QuantWeight | None = None
    int8: int8_matmul.Int8Columns | None = None
    bias: np.ndarray | None = None
    input_scale: np.ndarray | None = None  # AWQ: x is multiplied by this before the layer


@dataclass(frozen=True)
class Embedding:
    """The token lookup: a float table, or the quantized node copied as it is."""

    table: np.ndarray | None
    node: onnx.NodeProto | None = None  # GatherBlockQuantized with its initializers below
    initializers: tuple[onnx.TensorProto, ...] = ()


@dataclass(frozen=True)
class DecoderLayer:
    """One layer's weights: the projections as the graph has them (q/k/v or a packed qkv, gate/up
    or a packed gate_up) and its norm scales by role (records.decoder.NormModules' field names)."""

    norms: dict[str, np.ndarray]
    o: Linear
    down: Linear
    q: Linear | None = None
    k: Linear | None = None
    v: Linear | None = None
    qkv: Linear | None = None
    gate: Linear | None = None
    up: Linear | None = None
    gate_up: Linear | None = None
    q_norm: np.ndarray | None = None  # per-head RMS norm scales (Qwen3, Gemma 3)
    k_norm: np.ndarray | None = None

    @property
    def linears(self) -> list[Linear]:
        """The layer's projections, whichever of the packed or separate forms it has."""
        candidates = (self.qkv, self.q, self.k, self.v, self.o, self.gate_up, self.gate, self.up, self.down)
        return [linear for linear in candidates if linear is not None]


@dataclass(frozen=True)
class FeatureInput:
    """A feature draft's input stage (pipeline/draft/feature_model.py): `fc` over [embedding ; feature],
    with RMS norms on both first where the draft has them."""

    fc: Linear
    embed_norm: np.ndarray | None = None
    feature_norm: np.ndarray | None = None


@dataclass
class DecoderWeights:
    embedding: Embedding
    layers: list[DecoderLayer]
    final_norm: np.ndarray
    head: Linear
    decoder: Decoder
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))
    feature_input: FeatureInput | None = None  # a feature draft: its graph also reads `hidden_states`
    # the head is the float embedding table transposed (tied word embeddings): the fused graph reads one
    # initializer for both. A quantized head is not: quantize gives it its own codes (int4/int8 per
    # column) while the table stays float or takes GatherBlockQuantized's blocks, so the two differ.
    tied_head: bool = False

    @property
    def hidden(self) -> int:
        return int(self.final_norm.size)


class _Graph:
    """Indexes of one model: initializers, producers, consumers, nodes by module path."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.model = model
        self.inits = {init.name: init for init in graph.initializer}
        self.producers = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.by_module: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            module = module_name(node)
            if module is not None:
                self.by_module.setdefault(module, []).append(node)

    def constant(self, name: str) -> np.ndarray | None:
        init = self.inits.get(name)
        if init is not None:
            return numpy_helper.to_array(init)
        producer = self.producers.get(name)
        if producer is not None and producer.op_type == "Constant":
            return numpy_helper.to_array(producer.attribute[0].t)
        return None

    def norm_weight(self, module: str) -> np.ndarray:
        """The scale of an RMS norm: the 1-D constant its module multiplies by.

        Found by structure, not by initializer name: the exporter shares identical constants
        (two norms whose weights are all ones become one initializer under one name).
        """
        for node in self.by_module.get(module, []):
            if node.op_type != "Mul":
                continue
            for name in node.input:
                value = self.constant(name)
                if value is not None and value.ndim == 1 and value.size > 1:
                    return value
        raise UnsupportedModelError(f"cannot find the weight of the norm '{module}'",
                                    "compile --target npu works on any exported graph")


def _int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    value = attribute_value(node, name, default)
    if not isinstance(value, int):
        raise UnsupportedModelError(f"node '{node.name}' has a non-integer attribute {name}", "re-run quantize")
    return value


def _quantized(graph: _Graph, node: onnx.NodeProto) -> tuple[QuantWeight, np.ndarray | None]:
    def array(index: int) -> np.ndarray | None:
        if len(node.input) <= index or not node.input[index]:
            return None
        return graph.constant(node.input[index])

    packed, scales = array(1), array(2)
    if packed is None or scales is None:
        raise UnsupportedModelError(f"MatMulNBits node '{node.name}' has non-constant weights", "re-run quantize")
    quant = QuantWeight(packed=packed, scales=scales, zero_points=array(3), bits=_int_attr(node, "bits", 4),
                        block_size=_int_attr(node, "block_size", 32),
                        accuracy_level=_int_attr(node, "accuracy_level", 0))
    input_scale = None
    producer = graph.producers.get(node.input[0])
    if producer is not None and producer.op_type == "Mul" and module_name(producer) == module_name(node):
        input_scale = graph.constant(producer.input[1])
    return quant, input_scale


def _bias_after(graph: _Graph, output: str, n: int) -> np.ndarray | None:
    for consumer in graph.consumers.get(output, []):
        if consumer.op_type != "Add":
            continue
        other = consumer.input[1] if consumer.input[0] == output else consumer.input[0]
        value = graph.constant(other)
        if value is not None and value.shape == (n,):
            return value
    return None


def read_linears(model: onnx.ModelProto) -> dict[str, Linear]:
    """Every linear layer of the graph by module path (float MatMul or MatMulNBits)."""
    graph = _Graph(model)
    found: dict[str, Linear] = {}
    for layer in find_layers(model):
        if layer.op != "MatMul":
            continue
        found[layer.name] = Linear(layer.name, layer.K, layer.N, weight=load_weight(model, layer),
                                   bias=_bias_after(graph, layer.output, layer.N))
    for node in model.graph.node:
        if node.op_type != "MatMulNBits" or node.domain != MS_DOMAIN:
            continue
        name = module_name(node)
        if name is None:
            raise UnsupportedModelError(f"MatMulNBits node '{node.name}' carries no module path",
                                        "quantize the bundle with this specdec version")
        quant, input_scale = _quantized(graph, node)
        k, n = _int_attr(node, "K", 0), _int_attr(node, "N", 0)
        bias = graph.constant(node.input[5]) if len(node.input) > 5 and node.input[5] else None
        if bias is None:
            bias = _bias_after(graph, node.output[0], n)
        found[name] = Linear(name, k, n, quant=quant, bias=bias, input_scale=input_scale)
    for node in model.graph.node:
        if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx"):
            continue
        name = module_name(node)
        read = int8_matmul.read(node, graph.constant, lambda value: graph.consumers.get(value, []))
        if name is None or read is None:
            raise UnsupportedModelError(f"MatMulInteger node '{node.name}' is not a w8a8 layer of this specdec "
                                        "version", "quantize the float bundle again with --format w8a8")
        int8, output = read
        found[name] = Linear(name, int8.K, int8.N, int8=int8, bias=_bias_after(graph, output, int8.N))
    return found


def _embedding(graph: _Graph) -> Embedding:
    for node in graph.model.graph.node:
        if "input_ids" not in node.input:
            continue
        if node.op_type == "Gather" and node.input[1] == "input_ids":
            table = graph.constant(node.input[0])
            if table is not None:
                return Embedding(table=table)
        if node.op_type == "GatherBlockQuantized" and node.input[1] == "input_ids":
            inits = tuple(graph.inits[name] for name in node.input if name in graph.inits)
            return Embedding(table=None, node=node, initializers=inits)
    raise UnsupportedModelError("no token embedding lookup reads 'input_ids'", "compile --target npu instead")


_NOT_FUSABLE = "compile --target npu works on any exported graph"


def _layer(graph: _Graph, linears: dict[str, Linear], decoder: Decoder, index: int) -> DecoderLayer:
    prefix = f"model.layers.{index}"
    attention = ("qkv",) if decoder.packed_qkv else ("q", "k", "v")
    mlp = ("gate_up",) if decoder.packed_gate_up else ("gate", "up")
    paths = {name: f"self_attn.{name}_proj" for name in (*attention, "o")} | \
        {name: f"mlp.{name}_proj" for name in (*mlp, "down")}
    try:
        parts = {name: linears[f"{prefix}.{path}"] for name, path in paths.items()}
    except KeyError as missing:
        raise UnsupportedModelError(f"layer {index} has no linear layer {missing}", _NOT_FUSABLE) from None
    roles = {role: module for role, module in vars(decoder.norms).items() if module is not None}
    norms = {role: graph.norm_weight(f"{prefix}.{module}") for role, module in roles.items()}
    q_norm = graph.norm_weight(f"{prefix}.self_attn.q_norm") if decoder.qk_norm else None
    k_norm = graph.norm_weight(f"{prefix}.self_attn.k_norm") if decoder.qk_norm else None
    return DecoderLayer(norms=norms, q_norm=q_norm, k_norm=k_norm, **parts)


def read_decoder(model: onnx.ModelProto, *, num_kv_heads: int, head_dim: int, dtype: str,
                 decoder: Decoder) -> DecoderWeights:
    """The weights of the decoder `decoder` describes (the graph's manifest record) out of its graph."""
    graph = _Graph(model)
    linears = read_linears(model)
    layers = [_layer(graph, linears, decoder, index) for index in range(len(decoder.windows))]
    if "lm_head" not in linears:
        raise UnsupportedModelError("the graph has no lm_head linear layer", _NOT_FUSABLE)
    first = layers[0]
    packed = first.qkv.N - 2 * num_kv_heads * head_dim if first.qkv is not None else 0
    query_width = first.q.N if first.q is not None else packed
    embedding, head = _embedding(graph), linears["lm_head"]
    return DecoderWeights(
        embedding=embedding, layers=layers, final_norm=graph.norm_weight("model.norm"),
        head=head, decoder=decoder, num_heads=query_width // head_dim, num_kv_heads=num_kv_heads,
        head_dim=head_dim, dtype=np.dtype(dtype), tied_head=tied(embedding, head),
        feature_input=_feature_input(graph, linears),
    )


def tied(embedding: Embedding, head: Linear) -> bool:
    """Whether the head is exactly the float embedding table transposed (by value: an exporter may have
    written a tied weight once, read through a Transpose, or twice)."""
    table, weight = embedding.table, head.weight
    return (table is not None and weight is not None and head.bias is None and head.input_scale is None
            and weight.shape == table.shape[::-1] and weight.dtype == table.dtype and np.array_equal(weight, table.T))


def _feature_input(graph: _Graph, linears: dict[str, Linear]) -> FeatureInput | None:
    """A feature draft's fc (and input norms), found by their module paths; None for other graphs."""
    if not any(value.name == "hidden_states" for value in graph.model.graph.input):
        return None
    if "fc" not in linears:
        raise UnsupportedModelError("the feature draft graph has no fc linear layer", _NOT_FUSABLE)
    norms = "embed_norm" in graph.by_module
    return FeatureInput(fc=linears["fc"], embed_norm=graph.norm_weight("embed_norm") if norms else None,
                        feature_norm=graph.norm_weight("feature_norm") if norms else None)


def _same_quant(a: QuantWeight, b: QuantWeight) -> bool:
    return (a.bits, a.block_size, a.accuracy_level, a.zero_points is None) == \
        (b.bits, b.block_size, b.accuracy_level, b.zero_points is None)


def pack_linears(name: str, parts: list[Linear]) -> Linear | None:
    """One linear computing all `parts` side by side (concatenated along N), or None if they differ.

    MatMulNBits stores each output column's blocks independently, so concatenating along N keeps
    every code and scale as quantize wrote it: the packed layer computes exactly the same values.
    """
    first = parts[0]
    if any(p.K != first.K for p in parts) or not _same_input_scale(parts):
        return None
    bias = None
    if any(p.bias is not None for p in parts):
        bias = np.concatenate([p.bias if p.bias is not None else np.zeros(p.N, np.float32) for p in parts])
    n = sum(p.N for p in parts)
    int8 = [p.int8 for p in parts if p.int8 is not None]
    if int8:  # w8a8: the parts share x, so its per-row scales; each column keeps its codes and scale
        return Linear(name, first.K, n, int8=int8_matmul.concatenate(int8), bias=bias) \
            if len(int8) == len(parts) and first.input_scale is None else None
    weights = [p.weight for p in parts if p.weight is not None]
    if len(weights) == len(parts):
        return Linear(name, first.K, n, weight=np.concatenate(weights, axis=1), bias=bias,
                      input_scale=first.input_scale)
    quants = [p.quant for p in parts if p.quant is not None]
    if len(quants) != len(parts) or any(not _same_quant(q, quants[0]) for q in quants):
        return None
    zero_points = [q.zero_points for q in quants if q.zero_points is not None]
    packed = QuantWeight(packed=np.concatenate([q.packed for q in quants]),
                         scales=np.concatenate([q.scales for q in quants]),
                         zero_points=np.concatenate(zero_points) if zero_points else None,
                         bits=quants[0].bits, block_size=quants[0].block_size,
                         accuracy_level=quants[0].accuracy_level)
    return Linear(name, first.K, n, quant=packed, bias=bias, input_scale=first.input_scale)


def _same_input_scale(parts: list[Linear]) -> bool:
    scales = [p.input_scale for p in parts]
    if all(s is None for s in scales):
        return True
    first = scales[0]
    return first is not None and all(s is not None and np.array_equal(s, first) for s in scales)
