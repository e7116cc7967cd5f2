"""How well a feature draft drafts: acceptance by depth and tokens per round on held-out answers.

Definitions (those of the research prototype's evaluate.py):

- `match[t, d]`: the draft's top-1 at depth d, drafting after the accepted prefix x_0..x_t
  (feature_chain.py), equals the target's greedy token after x_{t+d-1};
- `alpha1`: the share of answer rows t whose depth-1 guess matches (every position of the answers);
  `alpha_cond[d]`: the share of depth-d matches among rows whose depths 1..d-1 matched;
- `topk1[k]`: the share of answer rows whose target token is among the draft's k best at depth 1
  (what a tree of that width could accept at its first level);
- `chain[k]`: greedy chain speculation with k drafted tokens simulated over each answer: a round
  starts after the prompt and the target's first token; it accepts the leading matches a, then the
  target's own token; `tokens_per_round` = mean of a + 1 (bench's mean accepted length counts the
  same way for a chain), `accepted_per_round` = mean of a.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from specdec.pipeline.draft.device import model_device
from specdec.pipeline.draft.feature_chain import chain
from specdec.pipeline.draft.feature_data import Row

CHAINS = (3, 4, 5, 6)
TOPK = (1, 2, 4, 8)


@torch.no_grad()
def match_table(draft: Any, row: Row, depth: int, bf16: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(match [T, depth] bool, rank of the target's token at depth 1 [T]) for one row, drafted on the
    draft's device, returned on the CPU."""
    device = model_device(draft)
    count = len(row.labels)
    input_ids = torch.zeros(1, count + depth - 1, dtype=torch.int64, device=device)
    input_ids[0, :count] = row.ids[:count].to(device)
    features = torch.zeros(1, count, row.features.shape[-1], device=device)
    features[0, 1:] = row.features[:count - 1].to(device).float()
    context = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
    with context:
        outputs = [draft.lm_head(draft.model.norm(h))[0].float() for h in chain(draft, input_ids, features, depth)]
    vocab = draft.vocab
    row_labels = row.labels.to(device)
    labels = torch.full((count + depth - 1,), -1, dtype=torch.int64, device=device)
    labels[:count] = row_labels
    match = torch.zeros(count, depth, dtype=torch.bool, device=device)
    for level, logits in enumerate(outputs, start=1):
        guess = vocab[logits.argmax(-1)]
        match[:, level - 1] = guess == labels[level - 1:level - 1 + count]
    first = outputs[0]
    inside = torch.isin(row_labels, vocab)
    index = torch.searchsorted(vocab, row_labels.clamp(max=int(vocab[-1])))
    index = index.clamp(max=len(vocab) - 1)
    target_logit = first.gather(-1, index[:, None])[:, 0]
    rank = (first > target_logit[:, None]).sum(-1)
    rank = torch.where(inside, rank, torch.full_like(rank, 10**9))
    return match.cpu(), rank.cpu()


def evaluate(draft: Any, rows: Sequence[Row], depth: int = 5, bf16: bool = False) -> dict[str, Any]:
    """The figures of the module docstring over `rows` (held-out answers)."""
    was_training = draft.training
    draft.eval()
    alpha_num = alpha_den = 0
    cond_num, cond_den = [0] * depth, [0] * depth
    topk = dict.fromkeys(TOPK, 0)
    rounds = dict.fromkeys(CHAINS, 0)
    accepted = dict.fromkeys(CHAINS, 0)
    for row in rows:
        count = len(row.labels)
        first = row.prompt_len  # the round after the prefill drafts after x_{prompt_len}, the target's first token
        if count - first < 1:
            continue
        match, rank = match_table(draft, row, depth, bf16)
        valid = torch.zeros(count, depth, dtype=torch.bool, device="cpu")
        for level in range(depth):
            valid[first:count - level, level] = True
        alpha_num += int((match[:, 0] & valid[:, 0]).sum())
        alpha_den += int(valid[:, 0].sum())
        for k in TOPK:
            topk[k] += int((rank[first:] < k).sum())
        for level in range(depth):
            prefix = match[:, :level].all(1) & valid[:, level]
            cond_den[level] += int(prefix.sum())
            cond_num[level] += int((prefix & match[:, level]).sum())
        for k in CHAINS:
            t = first
            while t < count:
                limit = min(k, depth, count - t)
                run = 0
                while run < limit and bool(match[t, run]):
                    run += 1
                rounds[k] += 1
                accepted[k] += run
                t += run + 1
    if was_training:
        draft.train()
    return {
        "rows": len(rows), "positions": alpha_den,
        "alpha1": alpha_num / max(1, alpha_den),
        "alpha_cond": [n / max(1, d) for n, d in zip(cond_num, cond_den, strict=True)],
        "topk1": {str(k): v / max(1, alpha_den) for k, v in topk.items()},
        "chain": {str(k): {"accepted_per_round": accepted[k] / max(1, rounds[k]),
                           "tokens_per_round": (accepted[k] + rounds[k]) / max(1, rounds[k])} for k in CHAINS},
    }
