"""Which prompts the target answers for a feature draft's data, batch by batch.

The user's own requests (`--train-prompts`) come first, in their order; then built-in chat requests
(chat_prompts.py) through the target's chat template, or windows of the user's text (`--calib`, or a
checkpoint with no chat template); optionally batches about the target's earlier answers
(`DataSettings.recycle_every`) and batches of requests the target writes itself (self_prompts.py,
`DataSettings.self_share`). Deterministic for a seed and the answers seen, so a resumed run asks
what the first run asked.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from specdec.pipeline.draft import chat_prompts, self_prompts


# What this module reads of feature_data's DataSettings and Row, as protocols: feature_data asks a
# PromptSource for its prompts, so importing those classes here would make an import cycle.
class PromptSettings(Protocol):
    @property
    def batch(self) -> int: ...
    @property
    def max_prompt(self) -> int: ...
    @property
    def recycle_every(self) -> int: ...
    @property
    def self_share(self) -> float: ...
    @property
    def seed(self) -> int: ...


class Answered(Protocol):
    @property
    def ids(self) -> torch.Tensor: ...  # prompt + answer
    @property
    def prompt_len(self) -> int: ...


def encode_chat(tokenizer: Any, prompt: str, max_prompt: int) -> list[int]:
    """The prompt as the target's chat template renders a one-turn conversation, cut to `max_prompt`
    tokens from the front (the template's closing tokens, which start the answer, stay)."""
    return encode_messages(tokenizer, [{"role": "user", "content": prompt}], max_prompt)


def encode_messages(tokenizer: Any, messages: Sequence[Mapping[str, str]], max_prompt: int) -> list[int]:
    """A conversation through the target's chat template, ready for the answer, cut as encode_chat cuts."""
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # a BatchEncoding in newer transformers
        ids = ids["input_ids"]
    ids = [int(i) for i in ids]
    return ids[-max_prompt:]


RequestWriter = Callable[[int, int], list[str]]  # (seed, count) -> requests the target wrote


class PromptSource:
    """Prompts batch by batch: the user's own requests first (`requests`, token ids, in their order),
    then fresh chat requests (or windows of the user's text); with `recycle_every` N > 0 every N-th
    batch requests about the target's earlier answers, and with a `writer` a `self_share` of the other batches
    requests the target writes itself. Deterministic for a seed and the answers seen, so a resumed
    run asks what the first run asked."""

    def __init__(self, tokenizer: Any, settings: PromptSettings, user_text: list[int] | None,
                 writer: RequestWriter | None = None, requests: Sequence[list[int]] = ()) -> None:
        self.tokenizer, self.settings, self.user_text = tokenizer, settings, user_text
        self.yours = [list(r) for r in requests]  # not yet asked
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        self.writer = writer if self.chat and user_text is None else None
        self.answers: list[str] = []
        self.fresh: list[list[int]] = []
        self._pool_seed = settings.seed * 1_000_003  # runs with other seeds draw disjoint pools
        self.last_kind = ""  # what the last batch asked: built-in, recycled or self-written

    def _refill(self) -> None:
        b = self.settings.batch
        if self.chat and self.user_text is None:
            texts = chat_prompts.fresh(self._pool_seed, 4 * b)
            encoded = [encode_chat(self.tokenizer, t, self.settings.max_prompt) for t in texts]
        else:
            encoded = self._windows(4 * b)
        self._pool_seed += 1
        encoded.sort(key=len)  # rows of similar length share a batch: less padding to compute
        chunks = [encoded[i:i + b] for i in range(0, len(encoded), b)]
        random.Random(self._pool_seed).shuffle(chunks)
        self.fresh = [ids for chunk in chunks for ids in chunk]

    def _windows(self, count: int) -> list[list[int]]:
        """Windows of the user's text (plain continuation), or of the built-in prompts as plain text."""
        rng = random.Random(self._pool_seed)
        if self.user_text is None:
            texts = chat_prompts.fresh(self._pool_seed, count)
            return [[int(i) for i in self.tokenizer.encode(t)][-self.settings.max_prompt:] for t in texts]
        stream = self.user_text
        length = min(64, max(8, len(stream) // 2))
        starts = [rng.randrange(0, max(1, len(stream) - length)) for _ in range(count)]
        return [list(stream[s:s + length]) for s in starts]

    def self_written(self, index: int) -> bool:
        """Whether batch `index` asks the target's own requests (a coin seeded by the index)."""
        every = self.settings.recycle_every
        if self.writer is None or (every > 0 and index % every == every - 1):
            return False
        return random.Random(self.settings.seed * 7_919 + index).random() < self.settings.self_share

    def batch(self, index: int, *, needed: bool = True) -> list[list[int]]:
        """Batch `index`'s prompts; with `needed` False (its answers are on disk) only what keeps the
        source's state as the first run left it, so nothing is generated for a self-written batch."""
        b = self.settings.batch
        every = self.settings.recycle_every
        if self.chat and self.user_text is None and every > 0 and index % every == every - 1 and self.answers:
            texts = chat_prompts.recycled(self.answers, self.settings.seed * 100_003 + index, b)
            if texts:
                self.last_kind = "recycled"
                return self._requests(texts)
        if self.yours:
            taken, self.yours = self.yours[:b], self.yours[b:]
            self.last_kind = "your prompts"
            return sorted(taken, key=len)  # a batch's rows pad to its longest
        if self.writer is not None and self.self_written(index):
            self.last_kind = "self-written"
            if not needed:
                return []
            seed = self.settings.seed * 1_000_033 + index
            # none kept (every one on a held-out topic): built-in ones, not from the pool, whose state a
            # resumed run (which writes nothing for this batch) could not repeat
            texts = self.writer(seed, b) or chat_prompts.fresh(seed, b)
            return self._requests(texts)
        if len(self.fresh) < b:
            self._refill()
        taken, self.fresh = self.fresh[:b], self.fresh[b:]
        self.last_kind = "built-in" if self.chat and self.user_text is None else "text"
        return taken

    def _requests(self, texts: Sequence[str]) -> list[list[int]]:
        """Requests through the chat template, shortest first (a batch's rows pad to its longest)."""
        return sorted((encode_chat(self.tokenizer, t, self.settings.max_prompt) for t in texts), key=len)

    def saw(self, rows: Sequence[Answered]) -> None:
        self.answers += [self.tokenizer.decode(r.ids[r.prompt_len:].tolist(), skip_special_tokens=True)
                         for r in rows]


def request_writer(model: Any, tokenizer: Any, stop_ids: set[int]) -> RequestWriter | None:
    """The target writing requests (self_prompts.py), or None when its template has no user turn."""
    start = self_prompts.user_turn_start(tokenizer) if getattr(tokenizer, "chat_template", None) else None
    if start is None:
        return None

    def write(seed: int, count: int) -> list[str]:
        return self_prompts.write_requests(model, tokenizer, start, count, seed=seed, stop_ids=stop_ids)

    return write
