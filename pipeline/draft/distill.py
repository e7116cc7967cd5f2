"""Distillation of the pruned draft: KL(target || draft) on the target's own text, on CPU.

Training text is always the target's own: rows it samples (temperature 1) and rows it continues
greedily — what verification will accept is what the target itself writes (DistillSpec, Zhou et al.
2023) — plus, with `--calib`, windows of the user's text and its greedy continuations. A share of
every kind is held out for the report.

Only the decoder layers train; the embedding, the final norm and the head stay the target's,
bit for bit, so the bundle stores them once. The teacher's distribution is kept as its top
`TEACHER_TOP_K` log-probabilities per position (`TeacherTops`), taken while the target writes the rows,
and the loss is the KL divergence over those tokens plus one bucket for the rest (sparse distillation):
the whole 49,152-wide logits of SmolLM2's 1,024 default rows are 12.9 GB, so they used to be
recomputed by a target pass at every step, half of each step's time.

Deterministic for a seed and a thread count; a checkpoint (draft layers, optimizer, the batch
sampler's generator, the data) every few minutes lets `--resume` finish with the same weights an
uninterrupted run gets. A time budget fixes the step count once, from the measured step time, and
records it in the checkpoint.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from specdec.pipeline.draft import decode_cache
from specdec.pipeline.progress import Progress

log = logging.getLogger(__name__)

# Teacher tokens kept per position; the rest of the vocabulary is one bucket of the loss. On
# SmolLM2-135M's own rows (sampled and greedy, 16 of each) the top 64 hold 0.85 of the mass on average
# (0.60 at the 10th percentile; top 8: 0.69). Measured against whole logits in one 10-minute budget:
# 4.7 s a step instead of 14.1, 52 steps instead of 15, held-out agreement 0.247 instead of 0.091.
TEACHER_TOP_K = 64
OVERRUN_S = 30.0  # a budgeted run stops training this long past its deadline, whatever its step count
HOLDOUT = 8  # 1 row in HOLDOUT of each kind is held out
WARMUP_STEPS = 50
# Rows generated together: decoding a batch of rows reads the target's weights once per token for
# all of them, so wider batches cost less per token (realistic 61.6M target, 1 thread, loaded
# machine: 7 tok/s at 16 rows, 13 at 64, 17 at 256); 64 keeps a budget-cut corpus fine-grained.
GENERATION_BATCH = 64


@dataclass
class TeacherTops:
    """The target's top `TEACHER_TOP_K` log-probabilities (log-softmax over its whole vocabulary, float16)
    and their token ids, per position of each row."""

    logp: torch.Tensor  # [rows, positions, k] float16
    ids: torch.Tensor  # [rows, positions, k] int32

    @classmethod
    def of(cls, logits: torch.Tensor) -> TeacherTops:
        top = torch.log_softmax(logits.float(), dim=-1).topk(min(TEACHER_TOP_K, logits.shape[-1]), dim=-1)
        return cls(logp=top.values.half(), ids=top.indices.int())

    @classmethod
    def cat(cls, parts: Sequence[TeacherTops], dim: int = 0) -> TeacherTops:
        return cls(logp=torch.cat([p.logp for p in parts], dim), ids=torch.cat([p.ids for p in parts], dim))

    def __len__(self) -> int:
        return len(self.logp)

    def __getitem__(self, index: torch.Tensor | slice) -> TeacherTops:
        return TeacherTops(logp=self.logp[index], ids=self.ids[index])

    def state(self) -> dict[str, torch.Tensor]:
        return {"logp": self.logp, "ids": self.ids}


@dataclass
class Corpus:
    train: torch.Tensor  # [N, seq + 1] token rows
    heldout: torch.Tensor  # [M, seq + 1] sampled / user text, for top-1 agreement
    policy: torch.Tensor  # [K, context + continuation]: the target's greedy continuations, held out
    context: int  # tokens of `policy` rows before the target's continuation
    # the target's top log-probabilities over the rows of `train`, kept from generating them (and, for
    # the user's text, from one pass in the text phase, where the budget counts it)
    teacher: TeacherTops | None = None

    def state(self) -> dict[str, Any]:
        return {"train": self.train, "heldout": self.heldout, "policy": self.policy, "context": self.context,
                "teacher": None if self.teacher is None else self.teacher.state()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Corpus:
        kept = state.get("teacher")
        if isinstance(kept, torch.Tensor):  # a checkpoint written before TeacherTops kept whole logits
            teacher: TeacherTops | None = TeacherTops.cat([TeacherTops.of(c) for c in chunks(kept, 32)])
        else:
            teacher = TeacherTops(**kept) if kept is not None else None
        return cls(train=state["train"], heldout=state["heldout"], policy=state["policy"],
                   context=int(state["context"]), teacher=teacher)


def chunks(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


@torch.no_grad()
def continue_rows(model: Any, prefix: torch.Tensor, length: int, generator: torch.Generator | None,
                  batch: int = 64) -> torch.Tensor:
    """`prefix` rows followed by `length` target tokens: sampled with `generator`, greedy without one."""
    return continue_rows_tops(model, prefix, length, generator, batch, keep=False)[0]


@torch.no_grad()
def continue_rows_tops(model: Any, prefix: torch.Tensor, length: int, generator: torch.Generator | None,
                      batch: int = 64, keep: bool = True) -> tuple[torch.Tensor, TeacherTops | None]:
    """`continue_rows`, and with `keep` the target's top log-probabilities over each row but its last
    token: what a teacher-forced pass over the row computes, here at no extra cost."""
    rows: list[torch.Tensor] = []
    kept: list[TeacherTops] = []
    for chunk in chunks(prefix, batch):
        cache = decode_cache.preallocated(model, chunk.shape[1] + length)
        out = model(input_ids=chunk, cache=cache, use_cache=True)
        ids = [chunk]
        seen = [TeacherTops.of(out.logits)] if keep else []
        for step in range(length):
            logits = out.logits[:, -1].float()
            if generator is None:
                token = logits.argmax(-1, keepdim=True)
            else:
                token = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
            ids.append(token)
            if step + 1 < length:
                out = model(input_ids=token, cache=out.cache, use_cache=True)
                if keep:
                    seen.append(TeacherTops.of(out.logits))
        rows.append(torch.cat(ids, dim=1))
        if keep:
            kept.append(TeacherTops.cat(seen, dim=1))
    return torch.cat(rows), (TeacherTops.cat(kept) if keep else None)


Rows = TypeVar("Rows", torch.Tensor, TeacherTops)


def _split(rows: Rows) -> tuple[Rows, Rows]:
    held = max(1, len(rows) // HOLDOUT)
    return rows[held:], rows[:held]


def build_corpus(model: Any, *, samples: int, seq: int, seed: int, start_token: int,
                 calib: Sequence[int] | None, progress: Progress,
                 chunk_rows: Callable[[int], int] | None = None) -> Corpus:
    """Up to `samples` sampled rows and as many greedy continuations, made a chunk at a time (each
    chunk's sampled rows, then their greedy continuations, so a corpus cut short still holds both
    kinds). `chunk_rows(rows done)` sizes each chunk (0: stop; a budget sizes them to its share);
    without it, GENERATION_BATCH rows a chunk until `samples`."""
    generator = torch.Generator().manual_seed(seed)
    half = seq // 2
    windows = _windows(torch.tensor(list(calib), dtype=torch.long), seq + 1, samples, generator) if calib else None
    sampled_parts: list[torch.Tensor] = []
    greedy_parts: list[torch.Tensor] = []
    tops: dict[str, list[TeacherTops]] = {"sampled": [], "greedy": [], "text": []}
    with progress.task(f"target writes up to {samples} sampled rows and their greedy continuations",
                       total=samples) as task:
        begin = 0
        while begin < samples:
            count = min(GENERATION_BATCH, samples - begin)
            if chunk_rows is not None:
                count = min(count, chunk_rows(begin))
            if count < 1 and sampled_parts:
                log.info("corpus: %d of %d rows fit the budget's share", begin, samples)
                break
            count = max(1, count)
            if windows is not None:
                sampled, seen = continue_rows_tops(model, windows[begin:begin + count, :half], seq + 1 - half,
                                                   generator)
            else:
                sampled, seen = continue_rows_tops(model, torch.full((count, 1), start_token, dtype=torch.long),
                                                   seq, generator)
            greedy, seen_greedy = continue_rows_tops(model, sampled[:, :half], seq + 1 - half, None)
            sampled_parts.append(sampled)
            greedy_parts.append(greedy)
            assert seen is not None and seen_greedy is not None  # continue_rows_tops keeps them by default
            tops["sampled"].append(seen)
            tops["greedy"].append(seen_greedy)
            if windows is not None:
                # here, not at the first training step: the budget counts this pass as the text's
                # (it was 250 s of a 368 s distillation share at 448 rows, leaving 170 steps)
                with torch.no_grad():
                    tops["text"].append(TeacherTops.of(model(input_ids=windows[begin:begin + count, :-1]).logits))
            task.advance(count)
            begin += count
    sampled, greedy = torch.cat(sampled_parts), torch.cat(greedy_parts)
    train_sampled, held_sampled = _split(sampled)
    train_greedy, held_greedy = _split(greedy)
    parts = [train_sampled, train_greedy]
    kinds_kept = ("sampled", "greedy", "text") if windows is not None else ("sampled", "greedy")
    teacher = TeacherTops.cat([_split(TeacherTops.cat(tops[kind]))[0] for kind in kinds_kept])
    heldout = [held_sampled]
    if windows is not None:
        train_text, held_text = _split(windows[:len(sampled)])
        parts.append(train_text)
        heldout.append(held_text)
    return Corpus(train=torch.cat(parts), heldout=torch.cat(heldout), policy=held_greedy, context=half,
                  teacher=teacher)


def _windows(stream: torch.Tensor, length: int, count: int, generator: torch.Generator) -> torch.Tensor:
    if len(stream) <= length:
        stream = stream.repeat(math.ceil((length + 1) / max(1, len(stream))))
    starts = torch.randint(0, len(stream) - length, (count,), generator=generator)
    return torch.stack([stream[s:s + length] for s in starts.tolist()])


# ---- metrics -----------------------------------------------------------------------------------

CHAIN = 8


@torch.no_grad()
def target_tops(target: Any, corpus: Corpus) -> torch.Tensor:
    """The target's top-1 on the held-out rows: computed once for the evaluations before and after training."""
    return torch.cat([target(input_ids=c).logits.argmax(-1) for c in chunks(corpus.heldout[:, :-1], 16)])


@torch.no_grad()
def evaluate(target: Any, draft: Any, corpus: Corpus, tops: torch.Tensor | None = None) -> dict[str, float]:
    """Held-out top-1 agreement, on-policy next-token match, expected accepted tokens of an 8-token chain."""
    tops = target_tops(target, corpus) if tops is None else tops
    drafted = torch.cat([draft(input_ids=c).logits.argmax(-1) for c in chunks(corpus.heldout[:, :-1], 16)])
    rows = corpus.policy
    predicted = torch.cat([draft(input_ids=c[:, :-1]).logits.argmax(-1) for c in chunks(rows, 16)])
    hits = (predicted[:, corpus.context - 1:] == rows[:, corpus.context:]).float()
    windows = hits.unfold(1, CHAIN, 1) if hits.shape[1] >= CHAIN else hits.unsqueeze(1)
    accepted = windows.cumprod(dim=-1).sum(dim=-1)  # tokens an 8-token chain drafted at each position keeps
    return {"heldout_agreement": (drafted == tops).float().mean().item(), "on_policy_match": hits.mean().item(),
            "expected_accepted": accepted.mean().item()}


# ---- training ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainSettings:
    steps: int | None
    minutes: float | None
    batch: int
    lr: float
    seed: int
    checkpoint_minutes: float


def _kl_loss(student: torch.Tensor, teacher: TeacherTops) -> torch.Tensor:
    """KL(target || draft) over the target's top tokens and one bucket for the rest of the vocabulary:
    a divergence between two distributions over k + 1 outcomes, zero exactly when the draft gives each
    kept token and the tail the target's probability."""
    q_log = torch.log_softmax(student.float(), dim=-1).gather(-1, teacher.ids.long())
    p_log = teacher.logp.float()
    p, q = p_log.exp(), q_log.exp()
    p_rest = (1 - p.sum(-1)).clamp_min(1e-8)
    q_rest = (1 - q.sum(-1)).clamp_min(1e-8)
    kept = (p * (p_log - q_log)).sum(-1)
    return (kept + p_rest * (p_rest.log() - q_rest.log())).mean()


def lr_at(step: int, total: int, peak: float) -> float:
    warmup = min(WARMUP_STEPS, max(1, total // 10))
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def trainable(draft: Any) -> list[torch.nn.Parameter]:
    params = []
    for name, param in draft.named_parameters():
        param.requires_grad_(name.startswith("model.layers."))
        if param.requires_grad:
            params.append(param)
    return params


class Teacher:
    """The target's top log-probabilities over the training rows, all computed once (they are small)."""

    def __init__(self, target: Any, rows: torch.Tensor, known: TeacherTops | None = None) -> None:
        """`known`: those of the first rows, kept from generating them."""
        done = 0 if known is None else len(known)
        with torch.no_grad():
            rest = [TeacherTops.of(target(input_ids=c[:, :-1]).logits) for c in chunks(rows[done:], 32)]
        self.tops = TeacherTops.cat(([known] if known is not None else []) + rest)

    def of(self, index: torch.Tensor) -> TeacherTops:
        return self.tops[index]


Saver = Callable[[dict[str, Any]], None]


def train(target: Any, draft: Any, corpus: Corpus, settings: TrainSettings, *, deadline: float | None,
          resume: dict[str, Any] | None, save: Saver, progress: Progress) -> dict[str, Any]:
    """Distil in place; returns {"steps", "loss"}. `deadline` (time.time()) bounds a --minutes run."""
    params = trainable(draft)
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    picker = torch.Generator().manual_seed(settings.seed + 1)
    teacher = Teacher(target, corpus.train, corpus.teacher)
    step, total, losses = 0, settings.steps, []
    if resume is not None:
        step, total = int(resume["step"]), int(resume["total"])
        draft.load_state_dict(resume["draft"])
        optimizer.load_state_dict(resume["optimizer"])
        picker.set_state(resume["picker"])
        losses = list(resume["losses"])
    draft.train()
    last_save = time.time()

    def state() -> dict[str, Any]:
        return {"step": step, "total": total, "draft": draft.state_dict(), "optimizer": optimizer.state_dict(),
                "picker": picker.get_state(), "losses": losses}

    def one_step(total_steps: int) -> None:
        nonlocal step
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, total_steps, settings.lr)
        index = torch.randint(0, len(corpus.train), (settings.batch,), generator=picker)
        loss = _kl_loss(draft(input_ids=corpus.train[index, :-1]).logits, teacher.of(index))
        loss.backward()  # type: ignore[no-untyped-call]  # torch's stubs leave backward untyped
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 5))
        step += 1

    if resume is None and deadline is not None:  # a time budget: measure a few steps, then fix the count
        # under the provisional count the warmup is WARMUP_STEPS long, as for any count >= 500
        # up to 3 timed steps, fewer when another would end past the deadline: at the 0.5B shape a
        # step took 60 s and three of them were the whole distillation of a 5-minute budget
        probe = min(3, settings.steps or 3)
        started, timed = time.time(), 0
        while timed < probe:
            one_step(10 * WARMUP_STEPS)
            timed += 1
            if time.time() + (time.time() - started) / timed > deadline:
                break
        per_step = (time.time() - started) / timed
        total = max(timed, int((deadline - time.time()) / per_step) + timed)
        if settings.steps is not None:
            total = min(total, settings.steps)
        log.info("%.2f s a step: %d steps fit the budget", per_step, total)
        save(state())  # the count is fixed: a resumed run follows the same schedule
        last_save = time.time()
    assert total is not None  # DraftConfig gives a step count, a time budget, or both
    with progress.task("distilling the draft", total=total) as task:
        task.advance(step)
        while step < total:
            if deadline is not None and time.time() > deadline + OVERRUN_S:
                # the machine got slower than the probe measured: the budget bounds the run
                log.warning("distillation stopped at step %d of %d: the time budget is spent", step, total)
                break
            one_step(total)
            task.advance()
            if settings.checkpoint_minutes > 0 and time.time() - last_save >= settings.checkpoint_minutes * 60:
                save(state())
                last_save = time.time()
    draft.eval()
    tail = losses[-20:]
    return {"steps": step, "final_kl": sum(tail) / max(1, len(tail))}


def default_threads() -> int:
    """Torch threads for a run that names none: the cores other processes leave idle, at least one.
    On a shared machine torch's default (all cores) loses to one thread by far: its threads wait
    for each other at every kernel while the scheduler runs others (realistic 61.6M target, 2 cores
    at load 6-10: 3 generated tokens/s on 2 threads vs 7 on 1)."""
    cores = os.cpu_count() or 1
    busy = busy_cores()
    idle = cores - (busy if busy is not None else os.getloadavg()[0])
    # rounded, not cut: a shell's leftovers (load 0.27 on 2 cores) once gave a 50-minute run 1 thread
    return max(1, min(cores, round(idle)))


def busy_cores(window_s: float = 0.5, stat: Path = Path("/proc/stat")) -> float | None:
    """Cores busy right now (Linux: /proc/stat over `window_s`, while this process sleeps), or None
    where the file is not there. Not the load average: its 1-minute mean still counted a job that
    had ended (load 1.2 on an idle 2-core machine gave a 30-minute run 1 thread)."""

    def ticks() -> tuple[int, int] | None:
        try:
            fields = [int(v) for v in stat.read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])  # steal counted, guest already in user

    before = ticks()
    if before is None:
        return None
    time.sleep(window_s)
    after = ticks()
    if after is None or after[1] <= before[1]:
        return None
    return (os.cpu_count() or 1) * (after[0] - before[0]) / (after[1] - before[1])


def threads_note() -> str:
    return f"{torch.get_num_threads()} torch threads ({os.cpu_count()} cores)"


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write a checkpoint atomically: a killed write leaves the previous one."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
