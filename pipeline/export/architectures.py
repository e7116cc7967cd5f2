"""The architecture registry: one description per Hugging Face `model_type`.

An entry is data: its norm style and where a layer's norms sit, q/k norms, packed projections,
whether the model takes one attention mask per layer type, whether the fused cpu flavour can
build it, and the tolerances its graph must meet. `describe` resolves an entry against a loaded
checkpoint into the manifest's `Decoder` record (records/decoder.py: windows and rotary tables per
layer, scales, activation), which the exporter's wrapper, its validator, compile and the device
runtime all read: nothing downstream branches on the model type. Adding an architecture is one
`register` call plus a tiny-model test.

The per-checkpoint numbers are read from what Hugging Face itself computed where it can: the rotary
tables from the model's rotary module (so every rope type transformers implements is matched
bit for bit), the attention scale from the attention module.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from specdec.pipeline.errors import UnsupportedModelError
from specdec.pipeline.records.decoder import Activation, Decoder, NormModules, NormStyle, Rope

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KVGeometry:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int  # positions the graph serves exactly (see `usable_context`)


@dataclass(frozen=True)
class Architecture:
    model_type: str
    description: str
    norm: NormStyle = NormStyle.rms
    norms: NormModules = field(default_factory=NormModules)
    qk_norm: bool = False
    packed_qkv: bool = False
    packed_gate_up: bool = False
    # The model indexes {layer type: mask} per layer (transformers' `causal_mask_mapping`); without
    # it every layer gets the one mask passed, so all its layers must share one window.
    per_layer_masks: bool = False
    rotary: bool = True
    fused: bool = True  # the fused cpu flavour knows this layout
    # Max |ONNX - PyTorch| on logits and KV, as atol + rtol * max|reference|.
    atol: float = 1e-4
    rtol: float = 1e-5
    # fp16 graphs round differently from fp16 PyTorch; these replace atol/rtol for them.
    atol_fp16: float = 1e-2
    rtol_fp16: float = 5e-3

    def geometry(self, config: Any) -> KVGeometry:
        heads = int(config.num_attention_heads)
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
        return KVGeometry(num_layers=int(config.num_hidden_layers), num_kv_heads=int(kv_heads),
                          head_dim=int(head_dim), vocab_size=int(config.vocab_size),
                          max_position_embeddings=usable_context(config))

    def describe(self, config: Any, model: Any) -> Decoder:
        """The `Decoder` record of this checkpoint (`model` is the loaded Hugging Face model)."""
        layers = int(config.num_hidden_layers)
        context = usable_context(config)
        windows = [w if w is not None and w < context else None for w in _windows(config, layers)]
        if not self.per_layer_masks and len(set(windows)) > 1:
            raise UnsupportedModelError(
                f"'{self.model_type}' mixes windowed and full-attention layers but takes one mask for all layers",
                "report this architecture; its layers cannot be exported exactly")
        ropes, rope = _ropes(config, model, layers) if self.rotary else ({}, [None] * layers)
        activation = _ACTIVATIONS.get(str(getattr(config, "hidden_activation", None)
                                          or getattr(config, "hidden_act", None)
                                          or getattr(config, "activation_function", "")))
        attention = _first_attention(model)
        scaling = getattr(attention, "scaling", None)
        scale = float(scaling) if scaling is not None else None
        head_dim = self.geometry(config).head_dim
        blockers = self._fused_blockers(config, activation)
        for reason in blockers:
            log.info("the fused cpu flavour cannot build this %s: %s", self.model_type, reason)
        return Decoder(
            windows=windows, rope=rope, ropes=ropes, norm=self.norm,
            norm_eps=_optional_float(config, "rms_norm_eps") or _optional_float(config, "layer_norm_epsilon") or 1e-5,
            # an activation the record cannot name blocks the fused flavour, the only reader of this field
            activation=activation or Activation.silu, norms=self.norms, qk_norm=self.qk_norm,
            packed_qkv=self.packed_qkv, packed_gate_up=self.packed_gate_up,
            embedding_scale=_embedding_scale(model),
            attention_scale=scale if scale is not None and abs(scale - head_dim ** -0.5) > 1e-12 else None,
            final_logit_softcap=_optional_float(config, "final_logit_softcapping"),
            fused=not blockers,
        )

    def _fused_blockers(self, config: Any, activation: Activation | None) -> list[str]:
        reasons = [] if self.fused else [f"no fused layout for {self.model_type}"]
        if activation is None or activation is Activation.gelu:
            reasons.append(f"activation {getattr(config, 'hidden_act', None)!r}")
        if _optional_float(config, "attn_logit_softcapping") is not None:
            # GroupQueryAttention's `softcap` caps before the bias as Hugging Face does (checked on
            # onnxruntime 1.32 CPU), but no registered checkpoint family ships with it: untested here
            reasons.append("attention logit soft-capping")
        return reasons


_ACTIVATIONS = {"silu": Activation.silu, "swish": Activation.silu, "gelu_pytorch_tanh": Activation.gelu_tanh,
                "gelu_new": Activation.gelu, "gelu": Activation.gelu}


def usable_context(config: Any) -> int:
    """Positions the exported graph serves exactly like the checkpoint's Hugging Face model.

    Longrope (Phi-3 128k, Phi-3.5, Phi-4-mini) switches every position of a forward call to its long
    factors once the call reaches `original_max_position_embeddings`, so what Hugging Face computes
    beyond it depends on how calls were split; a token tree cannot reproduce that token for token,
    and the context is capped there (4096 on the released checkpoints).
    """
    context = int(config.max_position_embeddings)
    for params in _rope_parameter_sets(config):
        original = params.get("original_max_position_embeddings")
        if params.get("rope_type") == "longrope" and original and params.get("long_factor") != params.get(
                "short_factor"):
            context = min(context, int(original))
    return context


def _rope_parameter_sets(config: Any) -> list[dict[str, Any]]:
    params = getattr(config, "rope_parameters", None) or {}
    if params and all(isinstance(value, dict) for value in params.values()):
        return [value for value in params.values() if value]  # one set per layer type (Gemma 3)
    return [params] if params else []


def _windows(config: Any, layers: int) -> list[int | None]:
    """Each layer's window as transformers masks it: `layer_types` where the config has them
    (Qwen2/3, Gemma 3, SmolLM3), else `sliding_window` on every layer (Mistral, Phi-3)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is not None:
        return [int(window) if window and kind == "sliding_attention" else None for kind in types[:layers]]
    return [int(window) if window else None] * layers


def _ropes(config: Any, model: Any, layers: int) -> tuple[dict[str, Rope], list[str | None]]:
    """Rotary tables from the checkpoint's own rotary module (at their initial, short-context values:
    dynamic rope types rewrite `inv_freq` during a forward, `original_inv_freq` keeps the start)."""
    rotary = model.model.rotary_emb
    types = list(getattr(config, "layer_types", None) or ["default"] * layers)[:layers]
    by_type = isinstance(getattr(rotary, "rope_type", None), dict)  # Gemma 3: one table per layer type
    ropes: dict[str, Rope] = {}
    rope: list[str | None] = []
    use_rope = getattr(config, "no_rope_layers", None)  # SmolLM3: 1 where the layer has rotary
    for index, kind in enumerate(types):
        if use_rope is not None and not use_rope[index]:
            rope.append(None)
            continue
        key = kind if by_type else "default"
        if key not in ropes:
            prefix = f"{key}_" if by_type else ""
            inv_freq = getattr(rotary, f"{prefix}original_inv_freq", None)
            if inv_freq is None:
                inv_freq = getattr(rotary, f"{prefix}inv_freq")
            scaling = float(getattr(rotary, f"{prefix}attention_scaling", 1.0))
            ropes[key] = Rope(inv_freq=[float(v) for v in inv_freq.float().tolist()], scaling=scaling)
        rope.append(key)
    return ropes, rope


def _first_attention(model: Any) -> Any:
    layers = getattr(getattr(model, "model", None), "layers", None)
    return getattr(layers[0], "self_attn", None) if layers else None


def _embedding_scale(model: Any) -> float | None:
    scale = getattr(getattr(getattr(model, "model", None), "embed_tokens", None), "embed_scale", None)
    return float(scale) if scale is not None else None


def _optional_float(config: Any, name: str) -> float | None:
    value = getattr(config, name, None)
    return float(value) if value is not None else None


_REGISTRY: dict[str, Architecture] = {}


def register(arch: Architecture) -> Architecture:
    _REGISTRY[arch.model_type] = arch
    return arch


def supported() -> list[str]:
    return sorted(_REGISTRY)


def lookup(model_type: str) -> Architecture:
    try:
        return _REGISTRY[model_type]
    except KeyError:
        raise UnsupportedModelError(
            f"architecture '{model_type}' is not supported",
            f"supported architectures: {', '.join(supported())}",
        ) from None


register(Architecture("llama", "Llama / Llama-2/3 style, grouped-query attention"))
register(Architecture("mistral", "Mistral (a sliding window on every layer)"))
register(Architecture("qwen2", "Qwen2 / Qwen2.5, tied or untied embeddings", per_layer_masks=True))
register(Architecture("qwen3", "Qwen3 (RMS norms on query and key heads)", qk_norm=True, per_layer_masks=True))
register(Architecture(
    "gemma3_text", "Gemma 3 text ((1 + w) norms, local:global layers with their own rotary bases)",
    norm=NormStyle.rms_one_plus, qk_norm=True, per_layer_masks=True,
    norms=NormModules(attention_in="input_layernorm", attention_out="post_attention_layernorm",
                      mlp_in="pre_feedforward_layernorm", mlp_out="post_feedforward_layernorm")))
register(Architecture("phi3", "Phi-3 / Phi-3.5 / Phi-4-mini (packed qkv and gate_up, longrope)",
                      packed_qkv=True, packed_gate_up=True))
register(Architecture("smollm3", "SmolLM3 (layers without rotary)", per_layer_masks=True))
register(Architecture("gpt2", "GPT-2 (learned absolute positions)", norm=NormStyle.layer, rotary=False,
                      fused=False))
