"""feature_chain.chain drafts every row ahead at once exactly as the engine drafts one round:
committed rows with the target's features in the cache, then one row a level from the parent's hidden_out."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from specdec.pipeline.draft.feature_chain import chain, chain_mask
from specdec.pipeline.draft.feature_model import FeatureDraft


def _draft(target: Path) -> FeatureDraft:
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    return FeatureDraft.from_target(model, layers=1, seed=3, input_norms=True)


def test_the_mask_lets_a_depth_see_the_committed_prefix_and_its_own_chain() -> None:
    mask = chain_mask(3, 3, torch.float32, 1)[0, 0] == 0
    # row 1 at depth 3: committed rows 0..1, then row 1 at depths 2 and 3
    assert mask[1].tolist() == [True, True, False, False, True, False, False, True, False]
    assert mask[0].tolist() == [True, False, False, True, False, False, True, False, False]


def test_every_depth_equals_drafting_one_round_incrementally(target: Path) -> None:
    draft = _draft(target)
    hidden = draft.config.hidden_size
    length, depth = 7, 3
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, draft.config.target_vocab_size, (1, length + depth - 1), generator=generator)
    features = torch.randn(1, length, hidden, generator=generator) * 3
    with torch.no_grad():
        outputs = chain(draft, ids, features, depth)
        for t in range(length):
            cache = DynamicCache(config=draft.llama)
            logits, hidden_out = draft(ids[:, :t + 1], features[:, :t + 1], cache=cache)  # the committed rows
            expected = [logits[:, -1]]
            parent = hidden_out[:, -1:]
            for level in range(2, depth + 1):
                logits, hidden_out = draft(ids[:, t + level - 1:t + level], parent,
                                           position_ids=torch.tensor([[t + level - 1]]), cache=cache)
                expected.append(logits[:, -1])
                parent = hidden_out
            for level in range(depth):
                logits = draft.lm_head(draft.model.norm(outputs[level][:, t]))
                torch.testing.assert_close(logits, expected[level], rtol=1e-4, atol=1e-5)
