"""The feature-draft checkpoint format: construction, the forward's cache, save/load, bad files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.tiny_models import make_model, make_tokenizer
from transformers import DynamicCache

from specdec.pipeline.draft.feature_model import (
    CONFIG_NAME,
    MODEL_TYPE,
    WEIGHTS_NAME,
    FeatureDraft,
    FeatureDraftConfig,
    frequent_vocab,
    read_config,
)
from specdec.pipeline.errors import InputError


@pytest.fixture(scope="module")
def target() -> Any:
    return make_model("llama", 320, layers=2, hidden=64)


def test_from_target_copies_geometry_head_rows_and_norm(target) -> None:  # type: ignore[no-untyped-def]
    vocab = torch.tensor([0, 5, 7, 300])
    draft = FeatureDraft.from_target(target, draft_vocab=vocab)
    config = draft.config
    assert (config.hidden_size, config.num_key_value_heads, config.head_dim) == (64, 2, 16)
    assert (config.target_vocab_size, config.draft_vocab_size, config.feature_layer) == (320, 4, 1)
    assert config.rope_parameters == dict(target.config.rope_parameters)
    assert torch.equal(draft.lm_head.weight, target.lm_head.weight[vocab])
    assert torch.equal(draft.model.norm.weight, target.model.norm.weight)
    assert torch.equal(draft.vocab, vocab)
    assert torch.equal(draft.model.embed_tokens.weight, target.model.embed_tokens.weight)
    assert not draft.model.embed_tokens.weight.requires_grad
    fc, head, norm = 128 * 64, 4 * 64, 64
    attention, mlp, layer_norms = 64 * 64 * 2 + 64 * 32 * 2, 3 * 64 * 128, 2 * 64  # q, o; k, v (2 KV heads)
    assert draft.own_parameters() == fc + head + norm + attention + mlp + layer_norms


def test_the_forward_appends_to_a_cache_like_a_decoder(target) -> None:  # type: ignore[no-untyped-def]
    draft = FeatureDraft.from_target(target, input_norms=True, fc_bias=True)
    ids, features = torch.randint(0, 320, (1, 9)), torch.randn(1, 9, 64)
    with torch.no_grad():
        logits, hidden = draft(ids, features)
        cache: Any = DynamicCache()
        first = draft(ids[:, :5], features[:, :5], cache=cache)
        second = draft(ids[:, 5:], features[:, 5:], cache=cache)
    assert logits.shape == (1, 9, 320) and hidden.shape == (1, 9, 64)
    torch.testing.assert_close(torch.cat([first[0], second[0]], 1), logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat([first[1], second[1]], 1), hidden, atol=1e-5, rtol=1e-5)
    # the features matter: other features, other logits
    with torch.no_grad():
        moved, _ = draft(ids, features + 1.0)
    assert not torch.allclose(moved, logits)


def test_save_and_load_round_trip(target, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    draft = FeatureDraft.from_target(target, layers=2, draft_vocab=torch.arange(0, 320, 4), input_norms=True)
    out = draft.save(tmp_path / "d", make_tokenizer())
    names = set(load_file(str(out / WEIGHTS_NAME)))
    assert {"fc.weight", "norm.weight", "lm_head.weight", "draft_vocab", "embed_norm.weight",
            "feature_norm.weight", "layers.1.self_attn.q_proj.weight", "layers.0.mlp.down_proj.weight"} <= names
    assert not any("embed_tokens" in name for name in names)  # the target's table is never stored
    assert json.loads((out / CONFIG_NAME).read_text())["model_type"] == MODEL_TYPE
    assert (out / "tokenizer.json").is_file()
    loaded = FeatureDraft.load(out, target.get_input_embeddings().weight)
    ids, features = torch.randint(0, 320, (1, 6)), torch.randn(1, 6, 64)
    with torch.no_grad():
        assert torch.equal(loaded(ids, features)[0], draft(ids, features)[0])
    assert torch.equal(loaded.vocab, draft.vocab)


def test_read_config_tells_feature_drafts_from_other_checkpoints(target, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target.save_pretrained(str(tmp_path / "hf"))
    assert read_config(tmp_path / "hf") is None
    assert read_config(tmp_path / "nowhere") is None
    FeatureDraft.from_target(target).save(tmp_path / "fd")
    config = read_config(tmp_path / "fd")
    assert isinstance(config, FeatureDraftConfig) and config.num_hidden_layers == 1


@pytest.mark.parametrize("change, message", [
    ({"feature_layer": 2}, "feature_layer 2 is not a layer"),
    ({"draft_vocab_size": 400}, "draft_vocab_size 400"),
    ({"format_version": 99}, "newer than this specdec reads"),
    ({"surprise": 1}, "unknown feature draft config keys"),
])
def test_bad_configs_are_one_line_errors(target, tmp_path: Path, change: dict[str, Any], message: str) -> None:  # type: ignore[no-untyped-def]
    out = FeatureDraft.from_target(target).save(tmp_path / "fd")
    raw = json.loads((out / CONFIG_NAME).read_text()) | change
    (out / CONFIG_NAME).write_text(json.dumps(raw))
    with pytest.raises(InputError, match=message):
        read_config(out)


def test_bad_weights_are_one_line_errors(target, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = FeatureDraft.from_target(target, draft_vocab=torch.arange(10)).save(tmp_path / "fd")
    tensors = load_file(str(out / WEIGHTS_NAME))
    embedding = target.get_input_embeddings().weight
    save_file({**tensors, "draft_vocab": torch.tensor([3, 2, 1, 0, 4, 5, 6, 7, 8, 9])}, str(out / WEIGHTS_NAME))
    with pytest.raises(InputError, match="not strictly increasing"):
        FeatureDraft.load(out, embedding)
    save_file({name: t for name, t in tensors.items() if name != "fc.weight"}, str(out / WEIGHTS_NAME))
    with pytest.raises(InputError, match=r"lacks \['fc.weight'\]"):
        FeatureDraft.load(out, embedding)
    save_file(tensors, str(out / WEIGHTS_NAME))
    with pytest.raises(InputError, match="pair the feature draft with the target it was made for"):
        FeatureDraft.load(out, torch.zeros(320, 32))


def test_frequent_vocab_keeps_the_commonest_ids_and_the_required_ones() -> None:
    ids = [5, 5, 5, 9, 9, 1, 1, 1, 1, 7]
    assert frequent_vocab(ids, 3, 20).tolist() == [1, 5, 9]
    assert frequent_vocab(ids, 3, 20, always=(0,)).tolist() == [0, 1, 5]


def test_a_target_without_a_gated_mlp_is_refused() -> None:
    from specdec.pipeline.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="'gpt2' has no intermediate_size"):
        FeatureDraft.from_target(make_model("gpt2", 320))
