"""The head's loss of a feature draft, chunk by chunk: cross-entropy against the target's greedy token
plus the soft cross-entropy against the target's own distribution, without [rows, V'] tensors.

Both terms share one target, onehot(label) + kd * softmax(head(norm(f_t))), because the loss is
linear in it. Formed through autograd the logits, the teacher's softmax and their products are
[rows, V'] tensors written and read a dozen times a step (profiled on SmolLM2-135M, V' 8192: two
thirds of a step were those passes and their copies). Here the loss and its gradient with respect
to the draft's normed hidden state are formed together in chunks of rows (the fused linear
cross-entropy of Liger-Kernel and others, written for the CPU in torch ops), and the backward
pass only scales the stored gradient. The head is frozen, so it gets no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

CHUNK = 1024  # rows a chunk: [CHUNK, V'] float32 scratch (32 MB at V' 8192)


@dataclass
class HeadStats:
    ce: float  # mean cross-entropy of the greedy token (rows whose token is in the vocabulary)
    accuracy: float  # share of rows whose top-1 is the greedy token (weighted)


class _HeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, normed: torch.Tensor, teacher_in: torch.Tensor, head: torch.Tensor,
                labels: torch.Tensor, weights: torch.Tensor, kd: float, dtype: torch.dtype,
                stats: list[float]) -> torch.Tensor:
        grad = torch.empty_like(normed)
        weight = head.to(dtype)
        total = torch.zeros((), dtype=torch.float32, device=normed.device)
        ce = hits = 0.0
        with torch.no_grad():
            for start in range(0, normed.shape[0], CHUNK):
                rows = slice(start, start + CHUNK)
                logits = (normed[rows].to(dtype) @ weight.T).float()
                label, w = labels[rows], weights[rows]
                inside = label >= 0
                if kd > 0:
                    mix = (teacher_in[rows].to(dtype) @ weight.T).float().softmax(-1).mul_(kd)
                else:
                    mix = torch.zeros_like(logits)
                mix.scatter_add_(-1, label.clamp(min=0)[:, None], inside[:, None].float())
                mass = mix.sum(-1)
                top = logits.max(-1, keepdim=True).values
                exp = (logits - top).exp_()
                norm = exp.sum(-1, keepdim=True)
                lse = top[:, 0] + norm[:, 0].log()
                picked = logits.gather(-1, label.clamp(min=0)[:, None])[:, 0]
                # -sum(mix * (logits - lse)) = mass * lse - sum(mix * logits)
                total += ((mass * lse - (mix * logits).sum(-1)) * w).sum()
                ce += float(((lse - picked) * w * inside).sum())
                hits += float(((logits.argmax(-1) == label) & inside).float().mul(w).sum())
                # d loss / d logits = w * (softmax * mass - mix)
                exp.div_(norm).mul_(mass[:, None]).sub_(mix).mul_(w[:, None])
                grad[rows] = (exp.to(dtype) @ weight).to(grad.dtype)
        stats += [ce, hits]
        ctx.save_for_backward(grad)
        return total

    @staticmethod
    def backward(ctx: Any, upstream: torch.Tensor) -> tuple[Any, ...]:
        (grad,) = ctx.saved_tensors
        return grad * upstream, None, None, None, None, None, None, None


def head_loss(normed: torch.Tensor, teacher_in: torch.Tensor, head: torch.Tensor, labels: torch.Tensor,
              weights: torch.Tensor, *, kd: float,
              dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, HeadStats]:
    """sum over rows of weight * (CE(label) + kd * CE(softmax(head @ teacher_in))) for the draft's
    logits head @ normed; `normed`, `teacher_in` [N, H] (after the final norm), `labels` [N] draft
    rows (-1: outside the vocabulary, soft term only), `weights` [N]; matmuls in `dtype`."""
    stats: list[float] = []
    loss = _HeadLoss.apply(normed, teacher_in, head, labels, weights.float(), kd, dtype,  # type: ignore[no-untyped-call]
                           stats)
    total = float(weights.sum().clamp(min=1.0))
    return loss, HeadStats(ce=stats[0] / total, accuracy=stats[1] / total)
