"""decode_cache: the preallocated cache decodes what transformers' cache decodes (compaction included), refuses
to overflow, and leaves sliding-window layers to transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, MistralConfig, MistralForCausalLM

from specdec.pipeline.draft import decode_cache
from specdec.pipeline.draft.pruning import SUPPORTED


def _greedy(model, prompt: torch.Tensor, steps: int, cache, keep: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
    """Greedy tokens and last hidden states, with `keep` rows selected after the second step."""
    tokens, states = [], []
    with torch.no_grad():
        out = model.model(input_ids=prompt, cache=cache, use_cache=True)
        position = prompt.shape[1]
        for step in range(steps):
            following = model.lm_head(out.last_hidden_state[:, -1]).argmax(-1)
            tokens.append(following)
            states.append(out.last_hidden_state[:, -1])
            if step == 1 and keep is not None:
                cache.batch_select_indices(keep)
                following = following[keep]
                tokens, states = [t[keep] for t in tokens], [s[keep] for s in states]
            out = model.model(input_ids=following[:, None], position_ids=torch.full((len(following), 1), position),
                              cache=cache, use_cache=True)
            position += 1
    return torch.stack(tokens, 1), torch.stack(states, 1)


def _model(target: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("family", SUPPORTED)
def test_the_preallocated_cache_decodes_what_transformers_cache_decodes(family: str) -> None:
    """Every family the draft stage generates with: their attention modules all write through
    `cache.update`, which the preallocated layer serves (qwen3's q/k norms, GQA, biases included)."""
    from support.tiny_models import make_model

    model = make_model(family, 96, layers=3, hidden=64, seed=5)
    prompt = torch.randint(3, model.config.vocab_size, (3, 7), generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([0, 2])
    reference = _greedy(model, prompt, 6, DynamicCache(config=model.config), keep)
    cache = decode_cache.preallocated(model, 7 + 6)
    tokens, states = _greedy(model, prompt, 6, cache, keep)
    assert torch.equal(tokens, reference[0])
    torch.testing.assert_close(states, reference[1], rtol=0, atol=1e-5)
    assert cache.get_seq_length() == 7 + 6
    preallocated = [layer for layer in cache.layers if isinstance(layer, decode_cache.layer_class())]
    # mistral's layers slide (its config sets a window), so transformers' own class keeps them
    assert len(preallocated) == (0 if family == "mistral" else len(cache.layers))
    assert all(layer.key_buffer.shape[0] == 2 for layer in preallocated)  # compacted, not copied per step


def test_writing_past_the_capacity_is_refused(target: Path) -> None:
    model = _model(target)
    cache = decode_cache.preallocated(model, 4)
    with torch.no_grad(), pytest.raises(ValueError, match="holds 4 positions"):
        model.model(input_ids=torch.ones(1, 5, dtype=torch.int64), cache=cache, use_cache=True)


def test_sliding_window_layers_keep_transformers_class() -> None:
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=8)
    cache = decode_cache.preallocated(MistralForCausalLM(config), 32)
    assert not any(isinstance(layer, decode_cache.layer_class()) for layer in cache.layers)
