"""Emit the fused CPU graph of a decoder on onnxruntime's contrib ops (docs/design.md §8).

The op set is the one onnxruntime-genai's model builder emits for CPU — `GroupQueryAttention`
(rotary inside, packed QKV, KV buffer shared between past and present, attention over the valid
length only), `SimplifiedLayerNormalization` / `SkipSimplifiedLayerNormalization`, `MatMulNBits`
for quantized weights (w8a8: `MatMulIntegerToFloat`, int8_matmul.emit's contrib form), `FastGelu` —
plus what speculation needs and the builder has no input for: a tree mask as GQA's `attention_bias`
and tree depths as its `position_ids`. We emit the graph ourselves instead of running that builder
because it starts from the Hugging Face checkpoint and its own quantizer: it cannot carry a
bundle's AWQ/GPTQ codes, its graphs take a 2-D padding mask, and it windows local layers with
`local_window_size`, which counts rows, not tree positions. onnxscript's ort_fusions (0.7) rewrite
attention into GroupQueryAttention only where the mask is the causal pattern built from a 2-D
`attention_mask` input, so they do not match a tree mask.

What the decoder is comes from the graph's `Decoder` record (records/decoder.py), resolved at
export from the architecture registry, so nothing here branches on a model type:
- norms: a layer's pre-attention and pre-MLP norms fuse with the residual adds (skip norms); the
  norms some models put on a branch's output (Gemma 3) are plain norms before the add. Gemma's
  (1 + w) is already folded into the scale the graph holds.
- q/k norms (Qwen3, Gemma 3) are per-head RMS norms applied before rotary, so they sit between the
  projection and GQA (Reshape → SimplifiedLayerNormalization → Reshape, what onnxruntime-genai
  emits too): GQA's own `q_norm_weight` input is honoured by CUDA and WebGPU only.
- rotary: one cos/sin table per kind of layer (Gemma 3's local and global bases, a longrope
  model's short factors with their attention scaling), a narrower table for partial rotary (GQA
  rotates the first 2 × width dims and passes the rest through; the width must be a multiple of
  8), and `do_rotary=0` for layers without rotary (SmolLM3's NoPE layers).
- windowed layers get their own inputs and KV buffers (engine/fused_kv.py explains why):

Contract (both roles):
  inputs  input_ids, position_ids int64 [1, q]; a feature draft's hidden_states [1, q, H] (its fc
          reads [embedding ; hidden_states]); per layer group, full attention then windowed
          (prefix `sliding_`), only for the groups the decoder has: attention_bias [1, 1, q, total]
          (additive, the tree/causal mask over that group's `total` valid rows); seqlens_k int32 [1]
          (= total - 1); total_sequence_length int32 []; past_key_values.{i}.key|value
          [1, kv_heads, past, d]
  outputs logits [1, q, vocab]; with `feature_output`, a decoder layer's output before the final norm,
          [1, q, H] (a feature draft's target: hidden_states; the feature draft: hidden_out);
          present.{i}.key|value [1, kv_heads, present, d]
Bound to one buffer per layer (past and present the same memory) GQA writes the q new rows at
`total - q … total - 1` in place and `present` is the buffer itself (with the pad row of a w8a8
target, `build_decoder(attention_pad_row=True)`, GQA also writes a zero row at `total`: the
buffer needs one spare row); fed an exact-length past
without IO binding it behaves like the dynamic graph (`present` = past + new).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.compile.fused.weights import DecoderLayer, DecoderWeights, FeatureInput, Linear, pack_linears
from specdec.pipeline.engine.fused_kv import PAD_ROW_KEY, SINGLE_ROW_EXACT_KEY
from specdec.pipeline.errors import UnsupportedModelError
from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.graphs.query import MS_DOMAIN
from specdec.pipeline.records.decoder import Activation, Decoder, NormStyle, Rope

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
        if layer.int8 is not None:
            bias = self.float_const(f"{base}.bias", layer.bias) if layer.bias is not None else None
            nodes, inits = int8_matmul.emit(x, out or self.name(f"{base}/out"), layer.int8, base, self.name, bias=bias,
                                            contrib=True)
            self.nodes.extend(nodes)
            self.inits.extend(inits)
            return str(nodes[-1].output[0])
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


def fused_blocker(decoder: Decoder | None, head_dim: int) -> str | None:
    """Why the fused flavour cannot build a decoder, or None when it can."""
    if decoder is None:
        return "the bundle predates the architecture record (manifest schema 4): re-export it"
    if not decoder.fused:
        return "its architecture has no fused layout"
    if decoder.norm is NormStyle.layer:
        return "LayerNorm decoders have no fused layout"
    for name, rope in decoder.ropes.items():
        half = rope.rotary_dim // 2
        if half % 8 or rope.rotary_dim > head_dim:
            return (f"its rotary table '{name}' turns {rope.rotary_dim} of {head_dim} dims; GroupQueryAttention "
                    "needs a multiple of 16 up to the head size")
    return None


def _rotary_caches(rope: Rope, max_positions: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    # The exported graph's float32 arithmetic: position * inv_freq, cos / sin, times the scaling.
    inv_freq = np.asarray(rope.inv_freq, np.float32)
    angles = np.arange(max_positions, dtype=np.float32)[:, None] * inv_freq[None, :]
    scaling = np.float32(rope.scaling)
    return (np.cos(angles) * scaling).astype(dtype), (np.sin(angles) * scaling).astype(dtype)


def _value(name: str, elem: int, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _group_inputs(window: int | None) -> tuple[str, str, str]:
    """(bias, seqlens_k, total_sequence_length) of the full-attention or the windowed layers."""
    prefix = "" if window is None else "sliding_"
    return f"{prefix}attention_bias", f"{prefix}seqlens_k", f"{prefix}total_sequence_length"


@dataclass
class _Decoder:
    """The emitter with what every layer reads: the record, dims, rotary tables, eps."""

    emit: _Emitter
    weights: DecoderWeights
    ropes: dict[str, tuple[str, str]]  # rotary table -> (cos, sin) initializer names
    # an int8 KV cache: per layer, the key and value scales [kv_heads, 1, head_dim]
    kv_scales: list[tuple[np.ndarray, np.ndarray]] | None = None
    # a float16 KV cache on float32 activations: the attention runs in float16. onnxruntime 1.32's
    # CPU kernel accepts a float16 cache beside float32 q/k/v, but attends over a call's own rows
    # before rounding them: a tree's nodes would see their ancestors at float32 where a later step
    # sees them at float16, so speculation would not equal plain decoding. In float16 throughout,
    # every row is seen as it is stored.
    half: bool = False
    # GroupQueryAttention sees one row more than the call (engine/fused_kv.py, PAD_ROW_KEY)
    pad_row: bool = False
    _half_inputs: dict[str, str] = field(default_factory=dict)  # float32 graph input or table -> its float16 twin
    _padded_inputs: dict[str, str] = field(default_factory=dict)  # graph input -> its one-row-longer twin
    _pads: dict[int, str] = field(default_factory=dict)  # tensor rank -> Pad's `pads` initializer
    _drop_row: list[str] = field(default_factory=list)  # Slice's starts, ends, axes dropping the pad row

    def to_half(self, name: str, base: str) -> str:
        """`name` cast to float16; graph inputs and tables (shared by the layers) once."""
        if not name:
            return name
        if name in self._half_inputs:
            return self._half_inputs[name]
        source = name
        if name.endswith("attention_bias"):  # the float32 minimum would overflow to -inf
            low = self.emit.const(f"{name}.half_min", np.array(np.finfo(np.float16).min, np.float32))
            source = self.emit.node("Clip", [name, low], 1, f"{name}/clip_half")[0]
        cast = self.emit.node("Cast", [source], 1, f"{base}/to_half", to=TensorProto.FLOAT16)[0]
        if not base.startswith("layers."):
            self._half_inputs[name] = cast
        return cast

    @property
    def record(self) -> Decoder:
        return self.weights.decoder

    def pad_rows(self, name: str, rank: int, base: str) -> str:
        """`name` with one zero row appended on axis 1 (a call's rows) — for the rank-4 attention
        bias on axis 2, with a zero column too; graph inputs (shared by the layers) once."""
        if not name or name in self._padded_inputs:
            return self._padded_inputs.get(name, name)
        if rank not in self._pads:
            after = {2: [0, 1], 3: [0, 1, 0], 4: [0, 0, 1, 1]}[rank]
            self._pads[rank] = self.emit.const(f"pad_row.rank{rank}", np.array([0] * rank + after, np.int64))
        padded = self.emit.node("Pad", [name, self._pads[rank]], 1, f"{base}/pad_row")[0]
        if not base.startswith("layers."):
            self._padded_inputs[name] = padded
        return padded

    def plus_one(self, name: str) -> str:
        """A GroupQueryAttention length input (int32) one row longer, once per graph input."""
        if name not in self._padded_inputs:
            one = self.emit.const(f"{name}.one", np.array(1, np.int32))
            self._padded_inputs[name] = self.emit.node("Add", [name, one], 1, f"{name}/plus_pad_row")[0]
        return self._padded_inputs[name]

    def drop_pad_row(self, attended: str, base: str) -> str:
        """GroupQueryAttention's output [1, q + 1, width] without the pad row's."""
        if not self._drop_row:
            self._drop_row = [self.emit.const(f"pad_row.{tag}", np.array([value], np.int64))
                              for tag, value in (("rows_from", 0), ("rows_to", -1), ("rows_axis", 1))]
        return self.emit.node("Slice", [attended, *self._drop_row], 1, f"{base}/drop_pad_row")[0]

    def norm(self, x: str, scale: np.ndarray, base: str) -> str:
        weight = self.emit.float_const(f"{base}.weight", scale)
        return self.emit.node("SimplifiedLayerNormalization", [x, weight], 1, base, axis=-1,
                              epsilon=self.record.norm_eps, stash_type=1)[0]

    def skip_norm(self, branch: str | None, hidden: str, scale: np.ndarray, base: str) -> tuple[str, str]:
        """`scale`-normed (hidden + branch), and the new residual stream (hidden itself without a branch)."""
        if branch is None:
            return self.norm(hidden, scale, base), hidden
        weight = self.emit.float_const(f"{base}.weight", scale)
        normed, _, _, total = self.emit.node("SkipSimplifiedLayerNormalization", [branch, hidden, weight], 4, base,
                                             domain=MS_DOMAIN, epsilon=self.record.norm_eps)
        return normed, total

    def head_norm(self, x: str, scale: np.ndarray, heads: int, base: str) -> str:
        """RMS norm over each head of x [1, q, heads * d]."""
        d = self.weights.head_dim
        split = self.emit.node("Reshape", [x, self.emit.const(f"{base}.heads", np.array([0, 0, heads, d], np.int64))],
                               1, f"{base}/split_heads")[0]
        normed = self.norm(split, scale, base)
        return self.emit.node("Reshape", [normed, self.emit.const(f"{base}.flat", np.array([0, 0, heads * d],
                                                                                           np.int64))],
                              1, f"{base}/merge_heads")[0]

    def attention(self, x: str, layer: DecoderLayer, index: int) -> str:
        emit, w, record = self.emit, self.weights, self.record
        base = f"layers.{index}"
        kv, d = w.num_kv_heads, w.head_dim
        qkv = layer.qkv if layer.qkv is not None else pack_linears(f"{base}.qkv", [layer.q, layer.k, layer.v])  # type: ignore[list-item]
        if qkv is not None and not record.qk_norm:
            inputs = [emit.linear(x, qkv, f"{base}/qkv_proj"), "", ""]
        else:
            if qkv is not None:
                widths = emit.const(f"{base}.qkv_split", np.array([w.num_heads * d, kv * d, kv * d], np.int64))
                inputs = emit.node("Split", [emit.linear(x, qkv, f"{base}/qkv_proj"), widths], 3, f"{base}/qkv_split",
                                   axis=-1)
            else:
                inputs = [emit.linear(x, part, f"{base}/{tag}_proj")  # type: ignore[arg-type]
                          for part, tag in ((layer.q, "q"), (layer.k, "k"), (layer.v, "v"))]
            if record.qk_norm:
                assert layer.q_norm is not None and layer.k_norm is not None
                inputs[0] = self.head_norm(inputs[0], layer.q_norm, w.num_heads, f"{base}.self_attn.q_norm")
                inputs[1] = self.head_norm(inputs[1], layer.k_norm, kv, f"{base}.self_attn.k_norm")
        rope = record.rope[index]
        cos, sin = self.ropes[rope] if rope is not None else ("", "")
        bias, seqlens, total = _group_inputs(record.windows[index])
        attrs: dict[str, object] = {"num_heads": w.num_heads, "kv_num_heads": kv, "do_rotary": int(rope is not None),
                                    "rotary_interleaved": 0}
        if record.attention_scale is not None:
            attrs["scale"] = record.attention_scale
        quantized: list[str] = []
        if self.kv_scales is not None:  # the op quantizes the rows it writes and dequantizes what it reads
            key_scale, value_scale = self.kv_scales[index]
            quantized = ["", emit.const(f"{base}.k_scale", key_scale.astype(np.float32)),
                         emit.const(f"{base}.v_scale", value_scale.astype(np.float32))]
            attrs.update(k_quant_type="PER_CHANNEL", v_quant_type="PER_CHANNEL", kv_cache_bit_width=8)
        if self.half:
            inputs = [self.to_half(name, f"{base}/{tag}") for name, tag in zip(inputs, ("q", "k", "v"), strict=True)]
            cos, sin, bias = self.to_half(cos, cos), self.to_half(sin, sin), self.to_half(bias, bias)
        positions = "position_ids" if rope is not None else ""
        if self.pad_row:
            inputs = [self.pad_rows(name, 3, f"{base}/{tag}")
                      for name, tag in zip(inputs, ("q", "k", "v"), strict=True)]
            bias, positions = self.pad_rows(bias, 4, bias), self.pad_rows(positions, 2, positions)
            seqlens, total = self.plus_one(seqlens), self.plus_one(total)
        gqa_inputs = [*inputs, f"past_key_values.{index}.key", f"past_key_values.{index}.value", seqlens, total, cos,
                      sin, positions, bias, *quantized]
        attended = emit.node(
            "GroupQueryAttention", gqa_inputs,
            [emit.name(f"{base}/attn_out"), f"present.{index}.key", f"present.{index}.value"], f"{base}/attn",
            domain=MS_DOMAIN, **attrs,
        )[0]
        if self.pad_row:  # the pad row's output is dropped; its key and value sit in the buffer's spare row
            attended = self.drop_pad_row(attended, base)
        if self.half:
            attended = emit.node("Cast", [attended], 1, f"{base}/attn_out_float", to=TensorProto.FLOAT)[0]
        return emit.linear(attended, layer.o, f"{base}/o_proj")

    def mlp(self, x: str, layer: DecoderLayer, index: int) -> str:
        emit = self.emit
        base = f"layers.{index}"
        gate_up = layer.gate_up if layer.gate_up is not None else pack_linears(f"{base}.gate_up",
                                                                               [layer.gate, layer.up])  # type: ignore[list-item]
        if gate_up is not None:
            both = emit.linear(x, gate_up, f"{base}/gate_up_proj")
            half = gate_up.N // 2
            split = emit.const(f"{base}.gate_up_split", np.array([half, gate_up.N - half], np.int64))
            gate, up = emit.node("Split", [both, split], 2, f"{base}/gate_up_split", axis=-1)
        else:
            assert layer.gate is not None and layer.up is not None
            gate, up = emit.linear(x, layer.gate, f"{base}/gate_proj"), emit.linear(x, layer.up, f"{base}/up_proj")
        if self.record.activation is Activation.gelu_tanh:
            active = emit.node("FastGelu", [gate], 1, f"{base}/act_gelu", domain=MS_DOMAIN)[0]
        else:
            sigmoid = emit.node("Sigmoid", [gate], 1, f"{base}/act_sigmoid")[0]
            active = emit.node("Mul", [gate, sigmoid], 1, f"{base}/act_silu")[0]
        product = emit.node("Mul", [active, up], 1, f"{base}/act_mul")[0]
        return emit.linear(product, layer.down, f"{base}/down_proj")


def _embed(emit: _Emitter, weights: DecoderWeights) -> tuple[str, str | None]:
    """The embedded input_ids, and the float table's initializer (None: a quantized lookup)."""
    emb = weights.embedding
    table: str | None = None
    if emb.table is not None:
        table = emit.float_const("embed_tokens.weight", emb.table)
        hidden = emit.node("Gather", [table, "input_ids"], 1, "embed_tokens")[0]
    else:
        assert emb.node is not None
        emit.inits.extend(emb.initializers)
        hidden = emit.node(emb.node.op_type, list(emb.node.input), 1, "embed_tokens", domain=emb.node.domain,
                           **{a.name: helper.get_attribute_value(a) for a in emb.node.attribute})[0]
    scale = weights.decoder.embedding_scale
    if scale is not None:  # Gemma: sqrt(hidden), rounded to the model's dtype as Hugging Face does
        hidden = emit.node("Mul", [hidden, emit.float_const("embed_tokens.scale", np.array(scale, np.float32))], 1,
                           "embed_tokens/scale")[0]
    return hidden, table


def _head(emit: _Emitter, weights: DecoderWeights, normed: str, table: str | None, out: str | None = None) -> str:
    """The logits of `normed` [1, q, H]. A head tied to the float embedding reads the table itself:
    Gemm with transB takes the [V, H] table as it is, where MatMul would need it transposed (a
    Transpose of a constant is folded into a second copy by onnxruntime's optimizer, in memory and in
    the ORT file alike). Gemm is 2-D: the q rows are flattened around it."""
    if not weights.tied_head or table is None:
        return emit.linear(normed, weights.head, "lm_head", out=out)
    rows = emit.node("Reshape", [normed, emit.const("lm_head.rows", np.array([-1, weights.hidden], np.int64))], 1,
                     "lm_head/rows")[0]
    logits = emit.node("Gemm", [rows, table], 1, "lm_head", transB=1)[0]
    shape = emit.const("lm_head.shape", np.array([1, -1, weights.head.N], np.int64))
    return emit.node("Reshape", [logits, shape], [out] if out is not None else 1, "lm_head/shape")[0]


@dataclass(frozen=True)
class FeatureOutput:
    """A decoder layer's output (the residual stream after it, before any later layer and the final
    norm) as a graph output: a feature draft's target's `hidden_states`, the draft's `hidden_out`."""

    name: str
    layer: int


def _feature_in(decoder: _Decoder, embedded: str, feature: FeatureInput) -> str:
    """fc([embedding ; hidden_states]), each normed first where the draft has input norms."""
    emit = decoder.emit
    given = "hidden_states"
    if feature.embed_norm is not None and feature.feature_norm is not None:
        embedded = decoder.norm(embedded, feature.embed_norm, "embed_norm")
        given = decoder.norm(given, feature.feature_norm, "feature_norm")
    joined = emit.node("Concat", [embedded, given], 1, "fc/concat", axis=-1)[0]
    return emit.linear(joined, feature.fc, "fc")


def row_exact_linears(weights: DecoderWeights) -> bool:
    """Whether every linear of the decoder is w8a8 (int8_matmul): per-row activation scales and
    integer sums make a row's output the same in a call of any size, a single row included."""
    linears = [weights.head, *(linear for layer in weights.layers for linear in layer.linears)]
    return all(linear.int8 is not None for linear in linears)


def build_decoder(weights: DecoderWeights, *, max_positions: int, opset: int = 18,
                  kv_scales: list[tuple[np.ndarray, np.ndarray]] | None = None,
                  half_kv: bool = False, attention_pad_row: bool = False,
                  feature_output: FeatureOutput | None = None) -> onnx.ModelProto:
    """The fused graph of `weights` under the contract in this module's docstring; with `kv_scales`
    (per layer: key and value scales [kv_heads, 1, head_dim]) its KV buffers are int8, with
    `half_kv` float16 (a float32 graph's attention then runs in float16). With `attention_pad_row`
    GroupQueryAttention never runs a single row (engine/fused_kv.py, PAD_ROW_KEY): what makes a
    w8a8 target's one-row plain steps bitwise equal to its chain rows. With `feature_output` a
    layer's output is a graph output too; a feature draft's weights (`feature_input`) add its input."""
    record = weights.decoder
    reason = fused_blocker(record, weights.head_dim)
    if reason is not None:
        raise UnsupportedModelError(f"the fused cpu flavour cannot build this decoder: {reason}",
                                    "compile with --target npu (standard ops, any architecture)")
    emit = _Emitter(weights.dtype)
    elem = _ONNX_TYPES[weights.dtype]
    kv, d = weights.num_kv_heads, weights.head_dim
    ropes = {}
    for name, rope in record.ropes.items():
        cos, sin = _rotary_caches(rope, max_positions, weights.dtype)
        ropes[name] = (emit.const(f"cos_cache.{name}", cos), emit.const(f"sin_cache.{name}", sin))
    half = half_kv and elem != TensorProto.FLOAT16  # a float16 graph's cache is float16 already
    decoder = _Decoder(emit, weights, ropes, kv_scales, half, pad_row=attention_pad_row)
    kv_elem = TensorProto.INT8 if kv_scales is not None else TensorProto.FLOAT16 if half_kv else elem
    hidden, table = _embed(emit, weights)
    if weights.feature_input is not None:
        hidden = _feature_in(decoder, hidden, weights.feature_input)
    branch: str | None = None  # the last sublayer's output, still to be added to `hidden`
    for index, layer in enumerate(weights.layers):
        base = f"layers.{index}"
        for sublayer, run in (("attention", decoder.attention), ("mlp", decoder.mlp)):
            x, hidden = decoder.skip_norm(branch, hidden, layer.norms[f"{sublayer}_in"], f"{base}.{sublayer}_in_norm")
            if feature_output is not None and sublayer == "attention" and feature_output.layer == index - 1:
                emit.node("Identity", [hidden], [feature_output.name], feature_output.name)  # the residual so far
            branch = run(x, layer, index)
            out_norm = layer.norms.get(f"{sublayer}_out")
            if out_norm is not None:
                branch = decoder.norm(branch, out_norm, f"{base}.{sublayer}_out_norm")
    assert branch is not None
    final_w = emit.float_const("norm.weight", weights.final_norm)
    last = feature_output is not None and feature_output.layer == len(weights.layers) - 1
    final = emit.node("SkipSimplifiedLayerNormalization", [branch, hidden, final_w],
                      [emit.name("final_norm/out0"), "", "", feature_output.name] if last and feature_output
                      else 1, "final_norm", domain=MS_DOMAIN, epsilon=record.norm_eps)
    normed = final[0]
    cap = record.final_logit_softcap
    if cap is None:
        _head(emit, weights, normed, table, out="logits")
    else:  # Gemma-2-style soft-capping: cap * tanh(logits / cap)
        raw = _head(emit, weights, normed, table)
        scaled = emit.node("Div", [raw, emit.float_const("softcap", np.array(cap))], 1, "softcap/div")[0]
        capped = emit.node("Tanh", [scaled], 1, "softcap/tanh")[0]
        emit.node("Mul", [capped, emit.float_const("softcap_out", np.array(cap))], ["logits"], "softcap/mul")

    inputs = [_value("input_ids", TensorProto.INT64, [1, "q"]), _value("position_ids", TensorProto.INT64, [1, "q"])]
    if weights.feature_input is not None:
        inputs.append(_value("hidden_states", elem, [1, "q", weights.hidden]))
    for window in sorted({*record.windows}, key=lambda w: w or 0):
        bias, seqlens, total = _group_inputs(window)
        inputs += [_value(bias, elem, [1, 1, "q", total]), _value(seqlens, TensorProto.INT32, [1]),
                   _value(total, TensorProto.INT32, [])]
    outputs = [_value("logits", elem, [1, "q", int(weights.head.N)])]
    if feature_output is not None:
        if not 0 <= feature_output.layer < len(weights.layers):
            raise UnsupportedModelError(f"the decoder has no layer {feature_output.layer} to output the features of",
                                        "re-export the bundle")
        outputs.append(_value(feature_output.name, elem, [1, "q", weights.hidden]))
    for index, window in enumerate(record.windows):  # a group's buffers share their length
        prefix = "" if window is None else "sliding_"
        for kind in ("key", "value"):
            inputs.append(_value(f"past_key_values.{index}.{kind}", kv_elem,
                                 [1, kv, f"{prefix}past_sequence_length", d]))
            outputs.append(_value(f"present.{index}.{kind}", kv_elem, [1, kv, f"{prefix}present_sequence_length", d]))
    graph = helper.make_graph(emit.nodes, "specdec_fused_cpu", inputs, outputs, emit.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS_DOMAIN, 1)],
                              producer_name="specdec")
    model.ir_version = min(model.ir_version, 10)
    if attention_pad_row:
        single_row = row_exact_linears(weights)
        helper.set_model_props(model, {PAD_ROW_KEY: "1", SINGLE_ROW_EXACT_KEY: "1" if single_row else "0"})
    return model
