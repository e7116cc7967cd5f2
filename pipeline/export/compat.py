"""Draft/target compatibility: both must speak the same tokenizer (docs/design.md §2)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from specdec.pipeline.errors import CompatibilityError

log = logging.getLogger(__name__)

_SPECIAL_ATTRS = ("bos_token", "eos_token", "pad_token", "unk_token")


@dataclass(frozen=True)
class PairReport:
    tokenizer_size: int
    target_vocab: int
    draft_vocab: int | None  # None: a target-only export
    warnings: tuple[str, ...]


def _first_differences(left: dict[str, int], right: dict[str, int], limit: int = 3) -> str:
    diffs = []
    for token in sorted(set(left) | set(right)):
        if left.get(token) != right.get(token):
            diffs.append(f"{token!r}: {left.get(token)} vs {right.get(token)}")
            if len(diffs) == limit:
                break
    return "; ".join(diffs)


def check_target(target_tokenizer: Any, target_vocab: int) -> PairReport:
    """A target exported alone (no draft): its output rows must cover the tokenizer."""
    size = len(target_tokenizer)
    _check_covers(size, "target", target_vocab)
    return PairReport(size, target_vocab, None, ())


def _check_covers(size: int, role: str, vocab: int) -> None:
    if vocab < size:
        raise CompatibilityError(
            f"the {role} has {vocab} output rows but the tokenizer has {size} tokens",
            f"the {role} cannot produce every token; use a checkpoint whose vocab_size covers the tokenizer",
        )


def check_pair(target_tokenizer: Any, draft_tokenizer: Any, target_vocab: int, draft_vocab: int) -> PairReport:
    """Raise CompatibilityError unless the draft's proposals mean the same tokens to the target.

    A difference in embedding rows is fine when it is padding: ids at or above the tokenizer's
    size are not tokens, and the engine masks whatever one model has beyond the other.
    """
    target_map = target_tokenizer.get_vocab()
    draft_map = draft_tokenizer.get_vocab()
    if target_map != draft_map:
        raise CompatibilityError(
            f"draft and target tokenizers differ ({len(target_map)} vs {len(draft_map)} tokens; "
            f"first differences {_first_differences(target_map, draft_map)})",
            "use a draft trained with the target's tokenizer",
        )
    for attr in _SPECIAL_ATTRS:
        left, right = getattr(target_tokenizer, attr, None), getattr(draft_tokenizer, attr, None)
        if left != right:
            raise CompatibilityError(
                f"draft and target disagree on the special token {attr} ({left!r} vs {right!r})",
                "use a draft saved with the target's tokenizer files",
            )
    size = len(target_tokenizer)
    warnings: list[str] = []
    for role, vocab in (("target", target_vocab), ("draft", draft_vocab)):
        _check_covers(size, role, vocab)
    if target_vocab != draft_vocab:
        note = (
            f"vocab sizes differ (target {target_vocab}, draft {draft_vocab}) only in padding rows "
            f"at ids >= {size}, which are not tokens; the engine masks the extra rows"
        )
        log.warning(note)
        warnings.append(note)
    return PairReport(size, target_vocab, draft_vocab, tuple(warnings))
