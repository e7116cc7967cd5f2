"""QuantizeConfig decisions that need no graph: embedding tables by vocabulary size."""

from __future__ import annotations

from pathlib import Path

from specdec.pipeline.quantize.config import LARGE_VOCAB, QuantizeConfig


def test_embeddings_are_quantized_by_default_from_32k_tokens(tmp_path: Path) -> None:
    auto = QuantizeConfig(output=tmp_path)
    assert not auto.embeddings_on(LARGE_VOCAB - 1) and auto.embeddings_on(LARGE_VOCAB)
    assert auto.embeddings_on(151_936) and auto.record()["quantize_embeddings"] == "auto"
    assert not QuantizeConfig(output=tmp_path, quantize_embeddings=False).embeddings_on(151_936)
    assert QuantizeConfig(output=tmp_path, quantize_embeddings=True).embeddings_on(320)
    assert (auto.embedding_bits_for("target", "model.embed_tokens"), auto.embedding_bits_for("draft", "x")) == (8, 4)
    assert QuantizeConfig(output=tmp_path, keep_float=("model.embed_*",)).embedding_bits_for(
        "target", "model.embed_tokens") is None
