"""QuantizeConfig decisions that need no graph: embedding tables by vocabulary size, engine-check size."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.errors import InputError
from specdec.pipeline.quantize.config import LARGE_VOCAB, QuantizeConfig
from specdec.pipeline.quantize.quality import engine_check_size


def test_embeddings_are_quantized_by_default_from_32k_tokens(tmp_path: Path) -> None:
    auto = QuantizeConfig(output=tmp_path)
    assert not auto.embeddings_on(LARGE_VOCAB - 1) and auto.embeddings_on(LARGE_VOCAB)
    assert auto.embeddings_on(151_936) and auto.record()["quantize_embeddings"] == "auto"
    assert not QuantizeConfig(output=tmp_path, quantize_embeddings=False).embeddings_on(151_936)
    assert QuantizeConfig(output=tmp_path, quantize_embeddings=True).embeddings_on(320)
    assert (auto.embedding_bits_for("target", "model.embed_tokens"), auto.embedding_bits_for("draft", "x")) == (8, 4)
    assert QuantizeConfig(output=tmp_path, keep_float=("model.embed_*",)).embedding_bits_for(
        "target", "model.embed_tokens") is None


def test_engine_check_shrinks_with_the_parameter_count() -> None:
    assert engine_check_size(0) == engine_check_size(4_000_000) == engine_check_size(40_000_000) == (8, 32)
    assert engine_check_size(134_515_008) == (2, 32)  # SmolLM2-135M shape
    assert engine_check_size(494_032_768) == (1, 20)  # Qwen2.5-0.5B shape
    assert engine_check_size(1_235_814_400) == (1, 8)  # Llama-3.2-1B shape
    assert engine_check_size(100_000_000_000) == (1, 4)  # never below one prompt of 4 tokens
    assert engine_check_size(1_235_814_400, prompts=4) == (4, 4)  # the tokens follow given prompts
    assert engine_check_size(1_235_814_400, 3, 12) == (3, 12)


@pytest.mark.parametrize("key", ["eval_prompts", "eval_new_tokens"])
def test_engine_check_settings_are_validated(tmp_path: Path, key: str) -> None:
    with pytest.raises(InputError, match=f"{key} must be at least 1"):
        QuantizeConfig(output=tmp_path, **{key: 0})
