"""Training a feature draft on the target's answers (feature_data.py): the losses EAGLE describes.

Per draft row t (token x_t, the target's feature f_{t-1}; feature_model's alignment) three terms
(the first two formed together, chunk by chunk: feature_loss.py),
weighted by the row's kind (answer rows 1, prompt rows `prompt_weight`, 0 by default: the rows stay
as attention context, but their terms cost a quarter of a step and drafted no better at equal time):

- cross-entropy against the target's greedy token after x_t (what greedy verification accepts),
  over the draft vocabulary (rows whose token lies outside it only get the other two terms);
- the soft cross-entropy against the target's own next-token distribution over the draft
  vocabulary, softmax(head(norm(f_t))), formed from the stored feature (nothing else is stored);
- EAGLE's feature regression: smooth L1 between norm(hidden_out) and norm(f_t) — after the final
  norm, because the residual stream itself carries massive activations (SmolLM2-135M's last layer
  reaches ~4e3 with a std of ~50) that would swamp the loss.

With `depth` 2 the rows are also drafted one step ahead from their own hidden_out (feature_chain.py,
the training-time test), the second depth's terms weighted by `depth_decay`.

Only the draft's decoder layers, fc and input norms train; the head is the target's (its rows at
the draft vocabulary) and the final norm the target's, both frozen (EAGLE-1's frozen head), so one
draft suits any subset of its vocabulary. The step count is fixed from the first steps' measured
time and stored, so a resumed run follows the same schedule and ends with the same weights.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from specdec.pipeline.draft.device import model_device
from specdec.pipeline.draft.feature_chain import chain
from specdec.pipeline.draft.feature_data import Row
from specdec.pipeline.draft.feature_loss import head_loss
from specdec.pipeline.progress import Progress

log = logging.getLogger(__name__)

TIMING_STEPS = 6  # steps timed before the step count is fixed
OVERRUN = 0.05  # of the training share: a slower machine stops training this far past its deadline
# The pace is re-measured every this share of the planned steps; when the steps left no longer fit
# the budget (another process took a core) the step count shrinks so the schedule still ends
# annealed: the 50-minute SmolLM2 draft, planned at 0.94 s a step on a machine that then ran
# 2.4 s a step, was cut at step 594 of 1545 with its learning rate still at 75 % of its peak.
# It grows the same way when the steps left would end early: the default SmolLM2 run on an AVX2
# VM, planned at 1.76 s a step from its first steps, then ran 1.37 s a step and ended 164 s (22 %
# of its training share) before its deadline.
REPLAN_SHARE = 0.05
REPLAN_SLACK = 0.03  # of the training share: a pace this close to the plan keeps it


@dataclass(frozen=True)
class TrainSettings:
    lr: float = 1e-3
    min_lr: float = 0.05  # the cosine ends at this fraction of lr
    warmup: int = 30
    # padded rows a step. 4096 before: on SmolLM2-135M's answers of a default run on an AVX2 VM
    # (126k tokens), at equal CPU time, 2048 (twice the steps) drafted the demo's requests at
    # first-token acceptance 0.434 against 0.405 (1024: 0.415); a short budget buys few steps
    tokens_per_batch: int = 2048
    max_len: int = 640  # rows of a sequence kept (its tail)
    # 0.3 before. On SmolLM2-135M's kept answers at equal CPU time, 0 drafted the demo's requests at
    # first-token acceptance 0.446 against 0.431/0.434 (two seeds) at ~6 minutes, and the same at ~13
    # (0.458/0.450 against 0.452): never worse, and a step 26 % cheaper
    prompt_weight: float = 0.0
    kd_weight: float = 1.0
    feature_weight: float = 1.0
    depth: int = 1  # 2: training-time test one step ahead
    depth_decay: float = 0.8
    weight_decay: float = 0.0
    # Gaussian noise on the features the draft reads, its std this share of each feature's mean absolute
    # value (not its RMS, which a few massive activations dominate). EAGLE-1 adds noise to them: at a
    # committed position the draft reads the target's exact feature, deeper in a round its own
    # approximate one. Off: on SmolLM2-135M's answers at equal CPU time, the demo's requests drafted
    # 0.411 at 0.1 and 0.422 at 0.3 against 0.418 without
    feature_noise: float = 0.0
    bf16: bool = False  # autocast (where the CPU multiplies bfloat16 faster, feature_data.fastest_dtype)
    seed: int = 0
    steps: int | None = None  # fixed step count (else from the budget)

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Batch:
    input_ids: torch.Tensor  # [b, T + depth - 1]
    features_in: torch.Tensor  # [b, T, H]: f_{t-1} (zeros at t = 0)
    features_out: torch.Tensor  # [b, T + depth - 1, H]: f_t
    labels: torch.Tensor  # [b, T + depth - 1]: draft-vocabulary row of the target's token after x_t, -1 outside
    weights: torch.Tensor  # [b, T + depth - 1]


def vocab_index(vocab: torch.Tensor, size: int) -> torch.Tensor:
    """target id -> draft row (-1 when the draft's head lacks it)."""
    index = torch.full((size,), -1, dtype=torch.int64, device="cpu")
    index[vocab.cpu()] = torch.arange(len(vocab), device="cpu")
    return index


def batches(rows: Sequence[Row], tokens: int, max_len: int, rng: random.Random) -> list[list[int]]:
    """Row indices per batch: similar lengths together (little padding), at most `tokens` padded rows."""
    order = sorted(range(len(rows)), key=lambda i: min(max_len, len(rows[i].labels)))
    out: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        length = min(max_len, len(rows[index].labels))
        if current and max(longest, length) * (len(current) + 1) > tokens:
            out.append(current)
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        out.append(current)
    rng.shuffle(out)
    return out


def collate(rows: Sequence[Row], index: Sequence[int], vocab_map: torch.Tensor, settings: TrainSettings) -> Batch:
    extra = settings.depth - 1
    picked = [rows[i] for i in index]
    length = max(min(settings.max_len, len(r.labels)) for r in picked)
    hidden = picked[0].features.shape[-1]
    b = len(picked)
    # assembled on the CPU, where the rows are; train() moves the batch to the draft's device
    input_ids = torch.zeros(b, length + extra, dtype=torch.int64, device="cpu")
    features_in = torch.zeros(b, length, hidden, device="cpu")
    features_out = torch.zeros(b, length + extra, hidden, device="cpu")
    labels = torch.full((b, length + extra), -1, dtype=torch.int64, device="cpu")
    weights = torch.zeros(b, length + extra, device="cpu")
    for slot, row in enumerate(picked):
        count = len(row.labels)
        start = max(0, count - settings.max_len)  # keep the answer: the tail
        n = count - start
        input_ids[slot, :n] = row.ids[start:count]
        features_out[slot, :n] = row.features[start:count].float()
        features_in[slot, 1:n] = features_out[slot, :n - 1]
        if start > 0:
            features_in[slot, 0] = row.features[start - 1].float()
        labels[slot, :n] = vocab_map[row.labels[start:count]]
        answer_from = max(0, row.prompt_len - 1 - start)  # row prompt_len - 1 predicts the first answer token
        weights[slot, answer_from:n] = 1.0
        weights[slot, :answer_from] = settings.prompt_weight
    return Batch(input_ids, features_in, features_out, labels, weights)


def to_device(batch: Batch, device: torch.device) -> Batch:
    return Batch(*(getattr(batch, name).to(device, non_blocking=True)
                   for name in ("input_ids", "features_in", "features_out", "labels", "weights")))


def noisy(features: torch.Tensor, share: float, seed: int, step: int) -> torch.Tensor:
    """`features` plus Gaussian noise of std `share` × each row's mean absolute value, drawn from a generator seeded
    by (seed, step) so a resumed run draws what the uninterrupted one did."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)  # the CPU's: the same noise on any device
    scale = features.abs().mean(-1, keepdim=True)
    noise = torch.randn(features.shape, generator=generator, device="cpu").to(features.device)
    return features + noise * (share * scale)


def losses(draft: Any, head: torch.Tensor, batch: Batch,
           settings: TrainSettings) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted loss of a batch and its parts (per depth: ce, feature, top-1 accuracy). The head's
    terms are formed chunk by chunk (feature_loss.py); padding rows (weight 0) are left out."""
    length = batch.features_in.shape[1]
    total = torch.zeros((), device=batch.features_in.device)
    stats: dict[str, float] = {}
    dtype = torch.bfloat16 if settings.bf16 else torch.float32
    with _autocast(settings.bf16, batch.features_in.device.type):
        outputs = chain(draft, batch.input_ids, batch.features_in, settings.depth)
    for level, hidden in enumerate(outputs, start=1):
        shift = level - 1
        weights = batch.weights[:, shift:shift + length]
        keep = weights > 0
        weights = weights[keep]
        norm = weights.sum().clamp(min=1.0)
        with torch.no_grad():
            normed_target = draft.model.norm(batch.features_out[:, shift:shift + length][keep])
        normed = draft.model.norm(hidden[keep].float())
        term, head_stats = head_loss(normed, normed_target, head, batch.labels[:, shift:shift + length][keep],
                                     weights, kd=settings.kd_weight, dtype=dtype)
        term = term / norm
        if settings.feature_weight > 0:
            regression = F.smooth_l1_loss(normed, normed_target, reduction="none").mean(-1)
            feat = (regression * weights).sum() / norm
            term = term + settings.feature_weight * feat
            stats[f"feat{level}"] = float(feat.detach())
        total = total + settings.depth_decay ** shift * term
        stats[f"ce{level}"] = head_stats.ce
        stats[f"acc{level}"] = head_stats.accuracy
    return total, stats


def _autocast(bf16: bool, device_type: str) -> AbstractContextManager[Any]:
    return torch.autocast(device_type, dtype=torch.bfloat16) if bf16 else nullcontext()


def trainable(draft: Any) -> list[torch.nn.Parameter]:
    """Everything but the target's tensors: the embedding, the final norm and the head stay frozen."""
    params = []
    for name, param in draft.named_parameters():
        frozen = name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")
        param.requires_grad_(not frozen)
        if not frozen:
            params.append(param)
    return params


def init_for_training(draft: Any, seed: int) -> None:
    """fc starts as a pass-through of the (normed) feature: at step 0 the layer sees the target's
    feature, which already predicts the next-but-one token better than noise; the residual
    projections are scaled by 1/sqrt(2) for the layer's two residual branches (GPT-2's init)."""
    generator = torch.Generator().manual_seed(seed + 1)  # the CPU's: the same start on any device
    hidden = draft.config.hidden_size
    device = model_device(draft)
    with torch.no_grad():
        draft.fc.weight.copy_(torch.randn(draft.fc.weight.shape, generator=generator, device="cpu") * 0.02)
        draft.fc.weight[:, hidden:] += torch.eye(hidden, device=device)
        for layer in draft.model.layers:
            layer.self_attn.o_proj.weight.mul_(1 / math.sqrt(2))
            layer.mlp.down_proj.weight.mul_(1 / math.sqrt(2))


def lr_at(step: int, total: int, settings: TrainSettings) -> float:
    warm = min(1.0, (step + 1) / max(1, settings.warmup))
    frac = min(1.0, step / max(1, total))
    return settings.lr * warm * (settings.min_lr + (1 - settings.min_lr) * 0.5 * (1 + math.cos(math.pi * frac)))


@dataclass
class TrainState:
    step: int
    total: int | None
    seconds: float  # clock seconds spent training (all runs)


def train(draft: Any, rows: Sequence[Row], settings: TrainSettings, *, clock: Callable[[], float],
          deadline: float | None, progress: Progress, checkpoint: Callable[[dict[str, Any]], None] | None = None,
          checkpoint_s: float = 180.0, resume: dict[str, Any] | None = None) -> TrainState:
    """Train `draft` in place, on its device, until its fixed step count (from the budget or
    `settings.steps`). Batches are assembled on the CPU from `rows` and moved there."""
    torch.manual_seed(settings.seed)
    device = model_device(draft)
    params = trainable(draft)
    head = draft.lm_head.weight.detach()
    vocab_map = vocab_index(draft.vocab, draft.config.target_vocab_size)
    decay = [p for p in params if p.dim() >= 2]
    flat = [p for p in params if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                                   {"params": flat, "weight_decay": 0.0}], lr=settings.lr, betas=(0.9, 0.95))
    rng = random.Random(settings.seed)
    order: list[list[int]] = []
    cursor = 0
    state = TrainState(step=0, total=settings.steps, seconds=0.0)
    if resume is not None:
        draft.load_state_dict(resume["draft"])
        optimizer.load_state_dict(resume["optimizer"])
        rng.setstate(resume["rng"])
        order, cursor = resume["order"], resume["cursor"]
        state = TrainState(**resume["state"])
    started = clock() - state.seconds
    budget = None if deadline is None else deadline - started
    timing: list[float] = []
    last_save = previous = clock()
    pace = (state.step, previous)  # (step, clock) the pace is measured from
    draft.train()
    recent: list[dict[str, float]] = []
    with progress.task("training the feature draft", total=state.total) as task:
        task.advance(state.step)
        while state.total is None or state.step < state.total:
            if cursor >= len(order):
                order, cursor = batches(rows, settings.tokens_per_batch, settings.max_len, rng), 0
            batch = collate(rows, order[cursor], vocab_map, settings)
            if settings.feature_noise > 0:
                batch.features_in = noisy(batch.features_in, settings.feature_noise, settings.seed, state.step)
            batch = to_device(batch, device)
            cursor += 1
            for group in optimizer.param_groups:
                group["lr"] = lr_at(state.step, state.total or 10**9, settings)
            loss, stats = losses(draft, head, batch, settings)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            state.step += 1
            now = clock()  # read once a step: the schedule is fixed from these readings
            state.seconds = now - started
            recent.append(stats)
            task.advance()
            if state.total is None:
                timing.append(now - previous)
                state.total = _fix_steps(timing, budget, state)
                if state.total is not None:
                    task.describe(f"training the feature draft: {state.total} steps")
                    log.info("training: %.2f s a step, %d steps fit the budget", sum(timing) / len(timing),
                             state.total)
            previous = now
            if budget is not None and state.total is not None:
                planned = state.total
                pace, state.total = _replan(pace, now, budget, state)
                if state.total != planned:
                    task.describe(f"training the feature draft: {state.total} steps (re-planned)")
            if len(recent) >= 20:
                mean = {k: sum(s[k] for s in recent) / len(recent) for k in recent[0]}
                log.info("step %d/%s: %s", state.step, state.total,
                         " ".join(f"{k} {v:.3f}" for k, v in sorted(mean.items())))
                recent = []
            if deadline is not None and budget is not None and now > deadline + OVERRUN * budget:
                log.warning("training stopped at step %d of %d: the machine ran slower than its first steps",
                            state.step, state.total)
                break
            if checkpoint is not None and now - last_save >= checkpoint_s:
                checkpoint({"draft": draft.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng.getstate(),
                            "order": order, "cursor": cursor, "state": asdict(state)})
                last_save = now
    draft.eval()
    return state


def _fix_steps(timing: list[float], budget: float | None, state: TrainState) -> int | None:
    """The step count, once TIMING_STEPS steps are timed (or fewer when the budget is nearly spent)."""
    if budget is None:
        return None
    per_step = sum(timing) / len(timing)
    left = budget - state.seconds
    if len(timing) < TIMING_STEPS and left > per_step * 2 * TIMING_STEPS:
        return None
    return max(state.step, state.step + int(left / per_step))


def _replan(pace: tuple[int, float], now: float, budget: float,
            state: TrainState) -> tuple[tuple[int, float], int]:
    """(the new pace mark, the step count): what the budget left holds at the pace since the mark,
    once REPLAN_SHARE of the steps have passed since it and the plan would overrun or end early by
    more than REPLAN_SLACK of the budget."""
    assert state.total is not None
    since, then = pace
    if state.step - since < max(TIMING_STEPS, int(state.total * REPLAN_SHARE)):
        return pace, state.total
    per_step = (now - then) / (state.step - since)
    left = budget - state.seconds
    if abs((state.total - state.step) * per_step - left) <= REPLAN_SLACK * budget:
        return (state.step, now), state.total
    total = max(state.step + 1, state.step + int(left / per_step))
    log.info("training re-planned: %d steps instead of %d (%.2f s a step since step %d)", total, state.total,
             per_step, since)
    return (state.step, now), total


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomically: a killed write leaves the previous checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
