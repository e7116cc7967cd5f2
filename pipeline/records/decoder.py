"""How a decoder computes, beyond its KV geometry: the manifest's per-graph architecture record.

Export resolves the architecture registry (pipeline/export/architectures.py) against the
checkpoint's config into one `Decoder` per graph and stores it in `manifest.graphs.<role>.decoder`.
Compile builds the fused cpu flavour from it and the graph alone (no checkpoint, no transformers),
and the device runtime reads the attention windows from it to build each layer group's mask and
bound the KV rows of the windowed layers.

Attention windows follow Hugging Face's rule (`masking_utils.sliding_window_overlay`): in a layer
with window W, a query at position p sees the keys at positions p - W + 1 … p, W of them, itself
included; in a token tree, only those of its ancestors.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from specdec.pipeline.records.codec import OMIT_DEFAULT


class NormStyle(str, enum.Enum):
    rms = "rms"  # x / rms(x) * w (Llama, Qwen, Mistral, Phi-3, SmolLM3)
    rms_one_plus = "rms_one_plus"  # x / rms(x) * (1 + w), w stored as trained (Gemma)
    layer = "layer"  # LayerNorm with bias (GPT-2)


class Activation(str, enum.Enum):
    silu = "silu"  # gated: silu(gate) * up
    gelu_tanh = "gelu_tanh"  # gated: gelu(gate, tanh approximation) * up (Gemma's gelu_pytorch_tanh)
    gelu = "gelu"  # GPT-2's MLP (not gated)


@dataclass
class Rope:
    """One rotary table: cos/sin(position * inv_freq) * scaling, on the first 2 * len(inv_freq) dims."""

    inv_freq: list[float]  # float32 values, as the checkpoint's rotary module computed them
    scaling: float = 1.0  # Hugging Face's attention_scaling (yarn, longrope), multiplied into cos and sin

    @property
    def rotary_dim(self) -> int:
        return 2 * len(self.inv_freq)


@dataclass
class NormModules:
    """The module names (under `model.layers.N.`) of a layer's norms; None where the layer has none."""

    attention_in: str = "input_layernorm"
    attention_out: str | None = None  # Gemma 3: a norm on the attention's output, before the residual add
    mlp_in: str = "post_attention_layernorm"
    mlp_out: str | None = None  # Gemma 3: a norm on the MLP's output


@dataclass
class Decoder:
    windows: list[int | None]  # per layer: its attention window, None for full attention
    rope: list[str | None]  # per layer: its table in `ropes`, None for a layer without rotary (NoPE)
    ropes: dict[str, Rope]
    norm: NormStyle
    norm_eps: float
    activation: Activation
    norms: NormModules = field(default_factory=NormModules)
    qk_norm: bool = False  # an RMS norm over each query and key head before rotary (Qwen3, Gemma 3)
    packed_qkv: bool = False  # one `self_attn.qkv_proj` (Phi-3) instead of q/k/v_proj
    packed_gate_up: bool = False  # one `mlp.gate_up_proj` (Phi-3): gate first, then up
    embedding_scale: float | None = field(default=None, metadata=OMIT_DEFAULT)  # Gemma: sqrt(hidden)
    attention_scale: float | None = field(default=None, metadata=OMIT_DEFAULT)  # None: 1/sqrt(head_dim)
    final_logit_softcap: float | None = field(default=None, metadata=OMIT_DEFAULT)
    fused: bool = True  # compile --target cpu can build this decoder

    def __post_init__(self) -> None:
        if len(self.windows) != len(self.rope):
            raise ValueError(f"{len(self.windows)} windows for {len(self.rope)} layers")
        missing = sorted({name for name in self.rope if name is not None} - set(self.ropes))
        if missing:
            raise ValueError(f"layers use the rotary table(s) {missing}, which 'ropes' does not define")
        if len({w for w in self.windows if w is not None}) > 1:
            raise ValueError(f"windowed layers must share one window, got {sorted({w for w in self.windows if w})}")
        if any(w is not None and w < 1 for w in self.windows):
            raise ValueError("an attention window must be at least 1")

    @property
    def window(self) -> int | None:
        """The window of the windowed layers (they share one), None when every layer attends fully."""
        return next((w for w in self.windows if w is not None), None)

    @property
    def global_layers(self) -> list[int]:
        return [i for i, w in enumerate(self.windows) if w is None]
