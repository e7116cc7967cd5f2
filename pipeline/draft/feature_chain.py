"""A feature draft run the way speculative decoding runs it, over whole sequences at once.

Depth 1 is the teacher-forced pass: row t reads token x_t and the target's feature f_{t-1}
(feature_model's alignment) and guesses the token after x_t. Depth d > 1 drafts ahead of every
row t at once: its row reads x_{t+d-1} and the draft's own depth-(d-1) output of row t, sits at
rotary position t + d - 1 and attends to the committed rows 0..t (depth 1, the target's
features) and to row t's own chain at depths 2..d — exactly what the engine's draft sees when it
drafts d tokens after a round whose accepted prefix ends at x_t. Training through depth 2 is the
training-time test of EAGLE-3 / HASS; evaluation through depth K gives acceptance per depth.

Feeding the true token at depth d is exact for counting accepted tokens: depth d only counts when
depths 1..d-1 matched, and then the draft's tokens were the true ones.
"""

from __future__ import annotations

from typing import Any

import torch


def chain_mask(length: int, depth: int, dtype: torch.dtype, batch: int,
               device: torch.device | str = "cpu") -> torch.Tensor:
    """Additive mask [batch, 1, length, depth * length] of depth `depth`'s rows over the cache
    (depth 1's rows, then depths 2..depth-1's, then its own)."""
    blocked = torch.finfo(dtype).min
    mask = torch.full((length, depth * length), blocked, dtype=dtype, device=device)
    mask[:, :length] = torch.triu(torch.full((length, length), blocked, dtype=dtype, device=device), diagonal=1)
    eye = torch.eye(length, dtype=torch.bool, device=device)
    for level in range(1, depth):
        block = mask[:, level * length:(level + 1) * length]
        block[eye] = 0
    return mask[None, None].expand(batch, 1, length, depth * length)


def chain(draft: Any, input_ids: torch.Tensor, features: torch.Tensor, depth: int) -> list[torch.Tensor]:
    """[hidden_out [b, T, H] for depth 1..depth] over rows (input_ids [b, T + depth - 1], features [b, T, H]:
    f_{t-1}): depth d's row t reads input_ids[:, t + d - 1]. The logits are the caller's to form
    (`draft.lm_head(draft.model.norm(hidden))`): a trainer forms them chunk by chunk with its loss."""
    from transformers import DynamicCache

    batch, length = features.shape[:2]
    cache = DynamicCache(config=draft.llama)
    positions = torch.arange(length, dtype=torch.int64, device=features.device)[None].expand(batch, length)
    outputs: list[torch.Tensor] = []
    feature = features
    for level in range(1, depth + 1):
        tokens = input_ids[:, level - 1:level - 1 + length]
        mask = None if level == 1 else chain_mask(length, level, _mask_dtype(draft, feature), batch, feature.device)
        feature = draft.hidden_out(tokens, feature, position_ids=positions + (level - 1), attention_mask=mask,
                                   cache=cache)
        outputs.append(feature)
    return outputs


def _mask_dtype(draft: Any, feature: torch.Tensor) -> torch.dtype:
    """The dtype the draft's attention scores have (bfloat16 under autocast, else the weights')."""
    if torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda" if feature.is_cuda else "cpu")
    return draft.fc.weight.dtype  # type: ignore[no-any-return]
