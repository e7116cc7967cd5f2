"""Banned phrases: never emit a token that completes one (mask), or stop and refuse (refuse).

Phrases are matched on the reply's bytes (engine/processors/vocab.py), not on token ids, so a
phrase split across tokens — or a UTF-8 character split across byte-level tokens — is caught.
Matching uses pyahocorasick (a C Aho–Corasick automaton with manylinux aarch64 wheels, so the
portable device runtime ships it; marisa-trie only does prefix lookups of one key at a time):

- `full`, an automaton over the phrases: does tail + token contain a phrase that ends inside the
  token? (the refuse check and the draft's few candidates);
- `partial`, an automaton over every proper prefix of every phrase: the phrase prefixes the
  reply currently ends with. A token completes phrase P after the reply iff P lies inside the
  token, or the reply ends with P[:i] and the token starts with P[i:] — so the banned set of a
  position is a union of precomputed token ranges (tokens sorted by bytes), with no per-token
  work over the vocabulary.

Matching is exact (case and spacing as written in the file); the reply's text only, not the prompt.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.decode import BanPolicy

_PAST_LATIN1 = "\u0100"  # sorts after every latin-1 character: the end of a prefix range


def _automaton(words: dict[str, object]) -> object:
    try:
        import ahocorasick
    except ImportError as exc:
        raise BundleError("banned phrases need the pyahocorasick package, which is not installed",
                          "pip install pyahocorasick (the portable device runtime ships it)") from exc
    automaton = ahocorasick.Automaton()
    for word, value in words.items():
        automaton.add_word(word, value)
    if words:
        automaton.make_automaton()
    return automaton


class BanList:
    """The compiled phrases over one vocabulary; shared by every reply that uses the same list."""

    def __init__(self, phrases: Sequence[str], texts: Sequence[str]) -> None:
        encoded = sorted({p.encode("utf-8").decode("latin-1") for p in phrases})
        self.longest = max(len(p) for p in encoded)
        self.full = _automaton({p: len(p) for p in encoded})
        prefixes: dict[str, list[str]] = {}
        for phrase in encoded:
            for i in range(1, len(phrase)):
                prefixes.setdefault(phrase[:i], []).append(phrase[i:])
        self.partial = _automaton(dict(prefixes.items()))
        self.texts = list(texts)
        self.vocab = len(texts)
        order = sorted(range(self.vocab), key=lambda i: self.texts[i])
        self._sorted_ids = np.array(order, np.int64)
        self._sorted_texts = [self.texts[i] for i in order]
        self._ranges: dict[str, np.ndarray] = {}
        # tokens that hold a whole phrase are banned after any reply
        self.always = np.array([i for i, text in enumerate(self.texts) if text and self.completes("", text)],
                               np.int64)

    def completes(self, tail: str, text: str) -> bool:
        """Whether tail + text contains a phrase that ends inside `text`."""
        if not text:
            return False
        end_min = len(tail)
        return any(end >= end_min for end, _ in self.full.iter(tail + text))  # type: ignore[attr-defined]

    def starting_with(self, rest: str) -> np.ndarray:
        """Ids of the tokens whose bytes start with `rest` (cached)."""
        ids = self._ranges.get(rest)
        if ids is None:
            lo = bisect.bisect_left(self._sorted_texts, rest)
            hi = bisect.bisect_left(self._sorted_texts, rest + _PAST_LATIN1, lo)
            ids = self._ranges[rest] = self._sorted_ids[lo:hi]
        return ids

    def banned_after(self, tail: str) -> np.ndarray:
        """Ids of the tokens that would complete a phrase after a reply ending with `tail`."""
        parts = [self.always]
        last = len(tail) - 1
        if tail:
            for end, rests in self.partial.iter(tail):  # type: ignore[attr-defined]
                if end == last:
                    parts += [self.starting_with(rest) for rest in rests]
        return np.concatenate(parts) if len(parts) > 1 else self.always


class BanProcessor:
    """A ban list bound to one reply: the reply's last bytes, and the policy."""

    name = "ban"

    def __init__(self, bans: BanList, policy: BanPolicy) -> None:
        self.bans = bans
        self.policy = policy
        self.tail = ""  # the reply's last `longest - 1` bytes: all a phrase completed next can overlap

    def _tail_after(self, extra: Sequence[int]) -> str:
        texts = self.bans.texts
        text = self.tail + "".join(texts[t] if 0 <= t < len(texts) else "" for t in extra)
        return text[-(self.bans.longest - 1):] if self.bans.longest > 1 else ""

    def allowed(self, extra: Sequence[int]) -> np.ndarray | None:
        if self.policy is not BanPolicy.mask:
            return None  # refuse leaves the distribution as it is and stops the reply instead
        mask = np.ones(self.bans.vocab, bool)
        mask[self.bans.banned_after(self._tail_after(extra))] = False
        return mask

    def advance(self, tokens: Sequence[int]) -> None:
        self.tail = self._tail_after(tokens)

    def stop_at(self, tokens: Sequence[int]) -> int | None:
        if self.policy is not BanPolicy.refuse:
            return None
        tail = self.tail
        texts = self.bans.texts
        for i, token in enumerate(tokens):
            text = texts[token] if 0 <= token < len(texts) else ""
            if self.bans.completes(tail, text):
                return i
            tail = (tail + text)[-(self.bans.longest - 1):] if self.bans.longest > 1 else ""
        return None
