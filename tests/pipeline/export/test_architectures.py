"""The architecture registry resolves each checkpoint into the manifest's `Decoder` record."""

from __future__ import annotations

import math
from typing import Any

import pytest
from support.tiny_models import make_model

from specdec.pipeline.compile.fused.builder import fused_blocker
from specdec.pipeline.errors import UnsupportedModelError
from specdec.pipeline.export.architectures import Architecture, lookup
from specdec.pipeline.records.codec import dump, parse
from specdec.pipeline.records.decoder import Activation, Decoder, NormStyle


def _describe(arch: str, **kwargs: Any) -> tuple[Decoder, Any]:
    model = make_model(arch, 64, **kwargs)
    return lookup(arch).describe(model.config, model), model


def test_gemma3_local_and_global_layers() -> None:
    decoder, _ = _describe("gemma3_text", layers=3)
    assert decoder.windows == [16, 16, None] and decoder.window == 16
    assert decoder.rope == ["sliding_attention", "sliding_attention", "full_attention"]
    local, full = decoder.ropes["sliding_attention"].inv_freq, decoder.ropes["full_attention"].inv_freq
    assert local[1] == pytest.approx(10_000 ** (-2 / 16)) and full[1] == pytest.approx(1_000_000 ** (-2 / 16))
    assert decoder.norm is NormStyle.rms_one_plus and decoder.qk_norm and decoder.activation is Activation.gelu_tanh
    assert decoder.embedding_scale == pytest.approx(8.0) and decoder.attention_scale == pytest.approx(24 ** -0.5)
    assert (decoder.norms.attention_out, decoder.norms.mlp_in) == ("post_attention_layernorm",
                                                                  "pre_feedforward_layernorm")
    assert parse(Decoder, dump(decoder)) == decoder  # the manifest round trip


def test_phi3_longrope_partial_rotary_and_packed_projections() -> None:
    decoder, model = _describe("phi3", hidden=128)
    assert lookup("phi3").geometry(model.config).max_position_embeddings == 128  # capped at the original length
    rope = decoder.ropes["default"]
    assert rope.rotary_dim == 48  # 0.75 of a 64-dim head
    assert rope.scaling == pytest.approx(math.sqrt(1 + math.log(512 / 128) / math.log(128)))
    assert decoder.packed_qkv and decoder.packed_gate_up and decoder.windows == [16, 16]
    assert fused_blocker(decoder, 64) is None
    narrow, _ = _describe("phi3", hidden=64)  # 0.75 of 32 dims: 24, not a multiple of 16
    assert "multiple of 16" in (fused_blocker(narrow, 32) or "")
    assert "re-export" in (fused_blocker(None, 64) or "")  # a bundle from before the record


def test_smollm3_layers_without_rotary_and_qwen3_qk_norms() -> None:
    smol, _ = _describe("smollm3")
    assert smol.rope == ["default", None] and smol.windows == [None, None]
    qwen, _ = _describe("qwen3")
    assert qwen.qk_norm and not qwen.packed_qkv and qwen.window is None and qwen.attention_scale is None


def test_mixed_windows_need_a_model_that_takes_a_mask_per_layer_type() -> None:
    model = make_model("gemma3_text", 64, layers=3)
    one_mask = Architecture("gemma3_text", "a model that takes one mask for all layers")
    with pytest.raises(UnsupportedModelError, match="one mask for all layers"):
        one_mask.describe(model.config, model)
