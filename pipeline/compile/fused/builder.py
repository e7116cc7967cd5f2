"""Emit the fused CPU graph of a Llama-family decoder on onnxruntime's contrib ops (docs/design.md §8).

The op set is the one onnxruntime-genai's model builder emits for CPU — `GroupQueryAttention`
(rotary inside, packed QKV, KV buffer shared between past and present, attention over the valid
length only), `SimplifiedLayerNormalization` / `SkipSimplifiedLayerNormalization`, `MatMulNBits`
for quantized weights — plus what speculation needs and the builder has no input for: a tree
mask as GQA's `attention_bias` and tree depths as its `position_ids`. We emit the graph ourselves
instead of running that builder because it starts from the Hugging Face checkpoint and its own
quantizer: it cannot carry a bundle's AWQ/GPTQ codes, and its graphs take a 2-D padding mask.

Contract (both roles):
  inputs  input_ids, position_ids int64 [1, q]; attention_bias [1, 1, q, total] (additive, the
          tree/causal mask over the `total` valid slots); seqlens_k int32 [1] (= total - 1);
          total_sequence_length int32 []; past_key_values.{i}.key|value [1, kv_heads, past, d]
  outputs logits [1, q, vocab]; present.{i}.key|value [1, kv_heads, present, d]
Bound to one buffer per layer (past and present the same memory) GQA writes the q new rows at
`total - q … total - 1` in place and `present` is the buffer itself; fed an exact-length past
without IO binding it behaves like the dynamic graph (`present` = past + new).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.compile.fused.weights import DecoderWeights, Linear, QuantWeight
from specdec.pipeline.graph_query import MS_DOMAIN

_ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}


@dataclass
class _Emitter:
    dtype: np.dtype
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)

    def name(self, base: str) -> str:
        name, count = base, 1
        while name in self._names:
            count += 1
            name = f"{base}_{count}"
        self._names.add(name)
        return name

    def const(self, base: str, value: np.ndarray) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def float_const(self, base: str, value: np.ndarray) -> str:
        return self.const(base, np.asarray(value).astype(self.dtype))

    def node(self, op: str, inputs: list[str], outputs: int | list[str], base: str, domain: str = "",
             **attrs: object) -> list[str]:
        names = [self.name(f"{base}/out{i}") for i in range(outputs)] if isinstance(outputs, int) else outputs
        node = helper.make_node(op, inputs, names, name=self.name(base), domain=domain)
        node.attribute.extend(helper.make_attribute(key, value) for key, value in attrs.items())
        self.nodes.append(node)
        return names

    def linear(self, x: str, layer: Linear, base: str, out: str | None = None) -> str:
        """`layer` applied to `x`; the last node writes `out` when given."""
        last = [out] if out is not None else 1
        if layer.input_scale is not None:
            x = self.node("Mul", [x, self.float_const(f"{base}.awq_inv_scale", layer.input_scale)], 1,
                          f"{base}/awq_scale")[0]
        if layer.quant is not None:
            q = layer.quant
            inputs = [x, self.const(f"{base}.qweight", q.packed), self.float_const(f"{base}.scales", q.scales)]
            inputs.append(self.const(f"{base}.zero_points", q.zero_points) if q.zero_points is not None else "")
            attrs: dict[str, object] = {"K": layer.K, "N": layer.N, "bits": q.bits, "block_size": q.block_size}
            if q.accuracy_level:
                attrs["accuracy_level"] = q.accuracy_level
            if layer.bias is not None:
                inputs += ["", self.float_const(f"{base}.bias", layer.bias)]
            while inputs and inputs[-1] == "":
                inputs.pop()
            return self.node("MatMulNBits", inputs, last, base, domain=MS_DOMAIN, **attrs)[0]
        assert layer.weight is not None
        weight = self.float_const(f"{base}.weight", layer.weight)
        if layer.bias is None:
            return self.node("MatMul", [x, weight], last, base)[0]
        y = self.node("MatMul", [x, weight], 1, base)[0]
        return self.node("Add", [y, self.float_const(f"{base}.bias", layer.bias)], last, f"{base}/bias")[0]


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


def _rotary_caches(weights: DecoderWeights, max_positions: int) -> tuple[np.ndarray, np.ndarray]:
    # Same float32 arithmetic as the exported graph (position * inv_freq, then cos / sin).
    angles = np.arange(max_positions, dtype=np.float32)[:, None] * weights.inv_freq[None, :]
    return np.cos(angles).astype(weights.dtype), np.sin(angles).astype(weights.dtype)


def _value(name: str, elem: int, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def build_decoder(weights: DecoderWeights, *, max_positions: int, opset: int = 18) -> onnx.ModelProto:
    """The fused graph of `weights` under the contract in this module's docstring."""
    emit = _Emitter(weights.dtype)
    elem = _ONNX_TYPES[weights.dtype]
    kv, d = weights.num_kv_heads, weights.head_dim
    cos, sin = _rotary_caches(weights, max_positions)
    cos_name, sin_name = emit.const("cos_cache", cos), emit.const("sin_cache", sin)
    emb = weights.embedding
    if emb.table is not None:
        hidden = emit.node("Gather", [emit.float_const("embed_tokens.weight", emb.table), "input_ids"], 1,
                           "embed_tokens")[0]
    else:
        assert emb.node is not None
        emit.inits.extend(emb.initializers)
        hidden = emit.node(emb.node.op_type, list(emb.node.input), 1, "embed_tokens", domain=emb.node.domain,
                           **{a.name: helper.get_attribute_value(a) for a in emb.node.attribute})[0]
    eps = weights.eps
    residual_in: str | None = None  # the branch output still to be added to `hidden`
    past_names: list[str] = []
    present_names: list[str] = []
    for index, layer in enumerate(weights.layers):
        base = f"layers.{index}"
        norm_w = emit.float_const(f"{base}.input_layernorm.weight", layer.input_norm)
        if residual_in is None:
            x = emit.node("SimplifiedLayerNormalization", [hidden, norm_w], 1, f"{base}/input_norm",
                          axis=-1, epsilon=eps, stash_type=1)[0]
        else:
            x, _, _, hidden = emit.node("SkipSimplifiedLayerNormalization", [residual_in, hidden, norm_w], 4,
                                        f"{base}/input_norm", domain=MS_DOMAIN, epsilon=eps)
        qkv = pack_linears(f"{base}.qkv", [layer.q, layer.k, layer.v])
        if qkv is not None:
            attention_inputs = [emit.linear(x, qkv, f"{base}/qkv_proj"), "", ""]
        else:
            attention_inputs = [emit.linear(x, part, f"{base}/{tag}_proj")
                                for part, tag in ((layer.q, "q"), (layer.k, "k"), (layer.v, "v"))]
        names = [f"past_key_values.{index}.key", f"past_key_values.{index}.value"]
        presents = [f"present.{index}.key", f"present.{index}.value"]
        past_names += names
        present_names += presents
        attn = emit.node(
            "GroupQueryAttention",
            [*attention_inputs, *names, "seqlens_k", "total_sequence_length", cos_name, sin_name, "position_ids",
             "attention_bias"],
            [emit.name(f"{base}/attn_out"), *presents], f"{base}/attn", domain=MS_DOMAIN,
            num_heads=weights.num_heads, kv_num_heads=kv, do_rotary=1, rotary_interleaved=0,
        )[0]
        o = emit.linear(attn, layer.o, f"{base}/o_proj")
        post_w = emit.float_const(f"{base}.post_attention_layernorm.weight", layer.post_norm)
        x, _, _, hidden = emit.node("SkipSimplifiedLayerNormalization", [o, hidden, post_w], 4, f"{base}/post_norm",
                                    domain=MS_DOMAIN, epsilon=eps)
        gate_up = pack_linears(f"{base}.gate_up", [layer.gate, layer.up])
        if gate_up is not None:
            both = emit.linear(x, gate_up, f"{base}/gate_up_proj")
            split = emit.const(f"{base}.gate_up_split", np.array([layer.gate.N, layer.up.N], np.int64))
            gate, up = emit.node("Split", [both, split], 2, f"{base}/gate_up_split", axis=-1)
        else:
            gate, up = emit.linear(x, layer.gate, f"{base}/gate_proj"), emit.linear(x, layer.up, f"{base}/up_proj")
        sigmoid = emit.node("Sigmoid", [gate], 1, f"{base}/act_sigmoid")[0]
        silu = emit.node("Mul", [gate, sigmoid], 1, f"{base}/act_silu")[0]
        product = emit.node("Mul", [silu, up], 1, f"{base}/act_mul")[0]
        residual_in = emit.linear(product, layer.down, f"{base}/down_proj")
    assert residual_in is not None
    final_w = emit.float_const("norm.weight", weights.final_norm)
    normed = emit.node("SkipSimplifiedLayerNormalization", [residual_in, hidden, final_w], 1, "final_norm",
                       domain=MS_DOMAIN, epsilon=eps)[0]
    emit.linear(normed, weights.head, "lm_head", out="logits")

    inputs = [
        _value("input_ids", TensorProto.INT64, [1, "q"]),
        _value("position_ids", TensorProto.INT64, [1, "q"]),
        _value("attention_bias", elem, [1, 1, "q", "total_sequence_length"]),
        _value("seqlens_k", TensorProto.INT32, [1]),
        _value("total_sequence_length", TensorProto.INT32, []),
    ] + [_value(name, elem, [1, kv, "past_sequence_length", d]) for name in past_names]
    outputs = [_value("logits", elem, [1, "q", int(weights.head.N)])] + \
        [_value(name, elem, [1, kv, "present_sequence_length", d]) for name in present_names]
    graph = helper.make_graph(emit.nodes, "specdec_fused_cpu", inputs, outputs, emit.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS_DOMAIN, 1)],
                              producer_name="specdec")
    model.ir_version = min(model.ir_version, 10)
    return model
