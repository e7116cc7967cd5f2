"""Registry of exportable architectures.

Each entry says how to read the KV-cache geometry from a Hugging Face config and how close the
ONNX graph must stay to PyTorch. Adding an architecture is one `register` call plus a tiny-model
test; nothing else in the exporter branches on the model type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdec.pipeline.errors import UnsupportedModelError


@dataclass(frozen=True)
class KVGeometry:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int


def _usable_context(config: Any) -> int:
    # The tree mask we feed replaces the model's own mask, sliding window included. Capping the
    # context at the window keeps full attention exact instead of silently wrong beyond it.
    context = int(config.max_position_embeddings)
    window = getattr(config, "sliding_window", None)
    if window and getattr(config, "use_sliding_window", True):
        context = min(context, int(window))
    return context


def _standard_geometry(config: Any) -> KVGeometry:
    heads = int(config.num_attention_heads)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or int(config.hidden_size) // heads
    return KVGeometry(
        num_layers=int(config.num_hidden_layers),
        num_kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        vocab_size=int(config.vocab_size),
        max_position_embeddings=_usable_context(config),
    )


@dataclass(frozen=True)
class Architecture:
    model_type: str
    description: str
    # Max |ONNX - PyTorch| on logits and KV, as atol + rtol * max|reference|.
    atol: float = 1e-4
    rtol: float = 1e-5
    # fp16 graphs round differently from fp16 PyTorch; these replace atol/rtol for them.
    atol_fp16: float = 1e-2
    rtol_fp16: float = 5e-3
    geometry: Callable[[Any], KVGeometry] = _standard_geometry


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
register(Architecture("mistral", "Mistral (context capped at the sliding window)"))
register(Architecture("qwen2", "Qwen2 / Qwen2.5, tied or untied embeddings"))
register(Architecture("gpt2", "GPT-2 (learned absolute positions)"))
