"""What `specdec draft` is asked for (`DraftConfig`, either kind) and what it returns (`MadeDraft`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.draft.clock import ClockKind
from specdec.pipeline.draft.device import DraftDevice
from specdec.pipeline.errors import InputError, setting


class DraftMethod(enum.StrEnum):
    """How the draft is made."""

    feature = "feature"  # EAGLE-style: one decoder layer over the target's hidden states (feature_stage.py)
    pruned = "pruned"  # the target pruned at its width, then distilled (stage.py)


class RequestSource(enum.StrEnum):
    """Whose chat requests a feature draft's data answers (prompt_source.PromptSource)."""

    builtin = "builtin"  # the built-in requests (chat_prompts.py): English, word lists and templates
    target = "target"  # the target writes them, sampling its own user turns (self_prompts.py)
    mixed = "mixed"  # half of the batches each


# share of the batches (other than recycled ones, when on) whose requests the target writes
SELF_SHARE = {RequestSource.builtin: 0.0, RequestSource.target: 1.0, RequestSource.mixed: 0.5}


# options that only one kind reads: given to the other, they are an error, not ignored
_KIND_OPTIONS = {DraftMethod.pruned: ("size", "heads", "ffn"),
                 DraftMethod.feature: ("clock", "vocab_size", "max_prompts", "answer_tokens", "data", "eval_prompts",
                                         "requests", "train_prompts", "torch_device")}


def default_kind(given: dict[str, Any]) -> DraftMethod:
    """The kind a user who names none gets: a feature draft, which measured far better on a real target
    (SmolLM2-135M-Instruct: first-token acceptance 0.40-0.64 against the pruned kind's 0.22, docs/draft.md),
    unless an option only the pruned kind reads is given. `given`: the options set, by field name."""
    pruned_only = _KIND_OPTIONS[DraftMethod.pruned]
    return DraftMethod.pruned if any(given.get(key) is not None for key in pruned_only) else DraftMethod.feature


@dataclass(frozen=True)
class DraftConfig:
    target: str
    output: Path
    kind: DraftMethod = DraftMethod.pruned
    size: float | None = None  # share of the target's decoder-layer weights (default DEFAULT_SIZE) for what
    # layers / ffn leave open
    layers: int | None = None  # decoder layers kept (default: as many as `size` allows)
    heads: int | None = None  # KV heads (GQA groups) kept per layer (default: all)
    ffn: int | None = None  # FFN channels kept per layer, a multiple of 64 (default: measured)
    calib: Path | None = None  # user text (plain, or JSONL with text / input_ids) to distil on as well
    # wall-clock budget of the whole run — loading, the target's text, the importance probe, distillation,
    # the evaluation and saving (default: DEFAULT_MINUTES unless steps is given)
    minutes: float | None = None
    steps: int | None = None  # optimizer steps (with minutes: at most this many)
    samples: int = 512  # rows the target writes (sampled, and as many greedy continuations)
    seq: int = 128  # tokens per row
    batch: int = 16
    lr: float = 1e-3
    seed: int = 0
    threads: int | None = None  # torch threads (default: the cores other processes leave idle)
    checkpoint_minutes: float = 3.0
    resume: bool = False
    force: bool = False
    # feature drafts only
    clock: ClockKind | None = None  # what `minutes` counts: wall time (default), or CPU time / threads (clock.py)
    vocab_size: int | None = None  # rows of the draft's head: the most frequent tokens of the target's answers
    max_prompts: int | None = None  # at most this many prompts answered (default: as many as the budget allows)
    answer_tokens: int | None = None  # tokens an answer may take (default feature_stage.ANSWER_TOKENS)
    data: Path | None = None  # keep the target's answers here, and reuse them when they match
    requests: RequestSource | None = None  # whose chat requests the target answers (default builtin)
    # the user's own requests (JSONL, as bench reads), answered first: what the draft should be good at
    train_prompts: Path | None = None
    # a prompts file (JSONL, as bench reads) the report's acceptance is also measured on: the target answers
    # it greedily and the draft drafts along those answers. Not in record(): it does not decide the weights.
    eval_prompts: Path | None = None
    torch_device: DraftDevice | None = None  # where the answers, training and evaluation run (default auto)

    def __post_init__(self) -> None:
        for kind, keys in _KIND_OPTIONS.items():
            given = [key for key in keys if getattr(self, key) is not None]
            if given and self.kind is not kind:
                raise InputError(f"{', '.join(setting(k) for k in given)} only apply to {setting('kind')} {kind}",
                                 f"drop them, or pass {setting('kind')} {kind}")
        if self.requests not in (None, RequestSource.builtin) and self.calib is not None:
            raise InputError(f"{setting('requests')} {self.requests} and {setting('calib')} contradict each other: "
                             "with your text the target continues it instead of answering requests",
                             f"drop {setting('calib')}, or {setting('requests')}")
        if self.train_prompts is not None and self.calib is not None:
            raise InputError(f"{setting('train_prompts')} and {setting('calib')} contradict each other: with your "
                             "text the target continues it instead of answering requests",
                             f"drop {setting('calib')}, or {setting('train_prompts')}")
        if self.size is not None and self.layers is not None:
            raise InputError(f"{setting('size')} and {setting('layers')} contradict each other",
                             "give the draft's size either as a fraction or as a layer count")
        checks = [
            ("size", self.size is None or 0 < self.size <= 1, "pass a fraction such as 0.1"),
            ("layers", self.layers is None or self.layers >= 1, "pass 1 or more"),
            ("heads", self.heads is None or self.heads >= 1, "pass 1 or more KV heads"),
            ("ffn", self.ffn is None or (self.ffn >= 64 and self.ffn % 64 == 0), "pass a multiple of 64"),
            ("minutes", self.minutes is None or self.minutes > 0, "pass a positive number of minutes"),
            ("steps", self.steps is None or self.steps >= 1, "pass 1 or more"),
            ("samples", self.samples >= 8, "pass 8 or more"),
            ("seq", self.seq >= 16, "pass 16 or more"),
            ("batch", self.batch >= 1, "pass 1 or more"),
            ("lr", self.lr > 0, "pass a positive learning rate"),
            ("threads", self.threads is None or self.threads >= 1, "pass 1 or more"),
            ("checkpoint_minutes", self.checkpoint_minutes >= 0, "pass 0 (never) or more"),
            ("vocab_size", self.vocab_size is None or self.vocab_size >= 2, "pass 2 or more tokens"),
            ("max_prompts", self.max_prompts is None or self.max_prompts >= 1, "pass 1 or more"),
            ("answer_tokens", self.answer_tokens is None or self.answer_tokens >= 2, "pass 2 or more"),
        ]
        for key, ok, fix in checks:
            if not ok:
                raise InputError(f"{setting(key)} {getattr(self, key)} is out of range", fix)

    @property
    def budget_minutes(self) -> float | None:
        default = FEATURE_MINUTES if self.kind is DraftMethod.feature else DEFAULT_MINUTES
        return self.minutes if self.minutes is not None or self.steps is not None else default

    def record(self) -> dict[str, Any]:
        """What decides the weights (the checkpoint must have been made with the same)."""
        keep: tuple[str, ...] = ("size", "layers", "heads", "ffn", "samples", "seq", "batch", "lr", "seed", "steps",
                                 "minutes")
        extra: dict[str, str | None] = {}
        if self.kind is DraftMethod.feature:
            keep = ("layers", "lr", "seed", "steps", "minutes", "vocab_size", "max_prompts", "answer_tokens",
                    "requests")
            extra = {"kind": str(self.kind), "clock": str(self.clock),
                     "train_prompts": str(self.train_prompts) if self.train_prompts else None}
        return {key: getattr(self, key) for key in keep} | {"calib": str(self.calib) if self.calib else None} | extra


DEFAULT_MINUTES = 15.0
FEATURE_MINUTES = 30.0  # the feature kind's default budget (feature_stage.py says how it is spent)


@dataclass(frozen=True)
class MadeDraft:
    path: Path
    report: dict[str, Any]
