"""QuantizeConfig decisions that need no graph: embedding tables by vocabulary size, the weight format,
engine-check size."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.errors import InputError
from specdec.pipeline.quantize.config import LARGE_VOCAB, Method, QuantizeConfig, WeightFormat
from specdec.pipeline.quantize.quality import engine_check_size, eval_window_count


def test_embeddings_are_quantized_by_default_from_32k_tokens(tmp_path: Path) -> None:
    auto = QuantizeConfig.from_text(output=tmp_path)
    assert not auto.embeddings_on(LARGE_VOCAB - 1) and auto.embeddings_on(LARGE_VOCAB)
    assert auto.embeddings_on(151_936) and auto.record()["quantize_embeddings"] == "auto"
    assert not QuantizeConfig.from_text(output=tmp_path, quantize_embeddings=False).embeddings_on(151_936)
    assert QuantizeConfig.from_text(output=tmp_path, quantize_embeddings=True).embeddings_on(320)
    assert (auto.embedding_bits_for("target", "model.embed_tokens"), auto.embedding_bits_for("draft", "x")) == (8, 4)
    assert QuantizeConfig.from_text(output=tmp_path, keep_float=("model.embed_*",)).embedding_bits_for(
        "target", "model.embed_tokens") is None


def test_the_format_left_out_is_the_profiles(tmp_path: Path) -> None:
    """local-cpu (the default profile, as for the command) states w8a8, measured fastest-exact there; the
    phone profiles nbits."""
    assert QuantizeConfig(output=tmp_path).profile == "local-cpu"
    assert QuantizeConfig(output=tmp_path).weight_format is WeightFormat.w8a8
    assert QuantizeConfig(output=tmp_path).record()["format"] == "w8a8"
    assert QuantizeConfig(output=tmp_path, profile="pixel-8").weight_format is WeightFormat.nbits
    # rtn is w8a8's own method: it keeps the profile's format
    assert QuantizeConfig(output=tmp_path, method=Method.rtn).weight_format is WeightFormat.w8a8


def test_an_explicit_format_or_an_nbits_setting_wins_over_the_profile(tmp_path: Path) -> None:
    explicit = QuantizeConfig(output=tmp_path, format=WeightFormat.nbits)
    assert explicit.weight_format is WeightFormat.nbits and explicit.method_for("target").value == "awq"
    assert "format" not in explicit.record()  # nbits lineage records are what they were before profiles had one
    for setting in ({"method": "gptq"}, {"draft_method": "awq"}, {"group_size": 32}, {"symmetric": True},
                    {"accuracy_level": 4}, {"head_bits": 4}, {"first_block_bits": 4}):
        config = QuantizeConfig.from_text(output=tmp_path, **setting)
        assert config.weight_format is WeightFormat.nbits, setting
    with pytest.raises(InputError, match="method gptq does not apply to format w8a8"):
        QuantizeConfig(output=tmp_path, format=WeightFormat.w8a8, method=Method.gptq)
    nowhere = QuantizeConfig(output=tmp_path, profile="nowhere")  # a plain value: no file is read to make it
    with pytest.raises(InputError, match="unknown device profile 'nowhere'"):
        _ = nowhere.weight_format


def test_a_config_is_a_plain_value(tmp_path: Path) -> None:
    """Constructing one reads no file and changes no field: what was given is what it holds, and the text
    constructor gives the same value as the typed fields."""
    given = QuantizeConfig(output=tmp_path, format=WeightFormat.nbits, also_formats=(WeightFormat.w8a8,),
                           graphs=("target",), method=Method.rtn, keep_float=("lm_head",))
    assert (given.format, given.also_formats, given.graphs, given.method) == (
        WeightFormat.nbits, (WeightFormat.w8a8,), ("target",), Method.rtn)
    assert QuantizeConfig.from_text(output=tmp_path, format="nbits,w8a8", graphs="target", method="rtn",
                                    keep_float=["lm_head"]) == given
    assert QuantizeConfig(output=tmp_path).format is None  # decided when asked (weight_format), not stored


def test_engine_check_shrinks_with_the_parameter_count() -> None:
    assert engine_check_size(0) == engine_check_size(4_000_000) == engine_check_size(40_000_000) == (8, 32)
    assert engine_check_size(134_515_008) == (2, 32)  # SmolLM2-135M shape
    assert engine_check_size(494_032_768) == (1, 20)  # Qwen2.5-0.5B shape
    assert engine_check_size(1_235_814_400) == (1, 8)  # Llama-3.2-1B shape
    assert engine_check_size(100_000_000_000) == (1, 4)  # never below one prompt of 4 tokens
    assert engine_check_size(1_235_814_400, prompts=4) == (4, 4)  # the tokens follow given prompts
    assert engine_check_size(1_235_814_400, 3, 12) == (3, 12)


def test_perplexity_windows_shrink_with_the_parameter_count() -> None:
    assert eval_window_count(0, 128) == eval_window_count(40_000_000, 128) == 16
    assert eval_window_count(134_515_008, 128) == 4  # SmolLM2-135M shape
    assert eval_window_count(494_032_768, 128) == eval_window_count(1_235_814_400, 128) == 2  # never under two
    assert eval_window_count(134_515_008, 32) == 16  # shorter windows: more of them
    assert eval_window_count(1_235_814_400, 128, windows=6) == 6


@pytest.mark.parametrize("key", ["eval_prompts", "eval_new_tokens", "eval_windows"])
def test_engine_check_settings_are_validated(tmp_path: Path, key: str) -> None:
    with pytest.raises(InputError, match=f"{key} must be at least 1"):
        QuantizeConfig.from_text(output=tmp_path, **{key: 0})
