"""The logits-processor interface and the per-reply chain the engine and the drafters use.

A processor transforms the target's distribution at a position given the generated prefix: it
names the tokens allowed next (a mask; the rest get probability 0) and may stop a reply early
(the refuse policy). The prefix is the reply's committed output plus, inside a verified tree, the
path from the root to the node, so every node is processed exactly as plain decoding would
process that position. Verification (greedy, match, rrs) then runs on the processed logits, and
the draft's proposals are filtered by the same masks (so they comply and keep being accepted).
Because a mask depends on the prefix only, speculative output equals plain output under the same
processors, and sampling follows the processed target distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from specdec.pipeline.errors import GenerationError

REFUSED = "refused"  # a reply's stop reason when a processor stopped it (the refuse policy)


class Processor(Protocol):
    """One constraint, bound to one reply. `extra` is a path of tokens after the committed output."""

    name: str

    def allowed(self, extra: Sequence[int]) -> np.ndarray | None:
        """Bool mask [vocab] of the tokens allowed after committed + extra; None: every token."""

    def advance(self, tokens: Sequence[int]) -> None:
        """`tokens` were emitted: they join the committed output."""

    def stop_at(self, tokens: Sequence[int]) -> int | None:
        """Index of the first of `tokens` (about to be emitted) that must not be emitted: the reply stops
        before it. None: all may be emitted."""


class Constraints:
    """The processors of one reply, combined: masks are ANDed, the earliest stop wins.

    Masks are cached per path within a round (the draft asks for a node's mask, verification asks
    again for the same node), and the cache is cleared when tokens are committed.
    """

    def __init__(self, processors: Sequence[Processor], vocab: int) -> None:
        self.processors = list(processors)
        self.vocab = vocab
        self._masks: dict[tuple[int, ...], np.ndarray | None] = {}

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.processors]

    def allowed(self, extra: Sequence[int]) -> np.ndarray | None:
        key = tuple(extra)
        if key in self._masks:
            return self._masks[key]
        combined: np.ndarray | None = None
        for processor in self.processors:
            mask = processor.allowed(key)
            if mask is None:
                continue
            mask = mask[: self.vocab] if mask.size >= self.vocab else np.pad(mask, (0, self.vocab - mask.size))
            combined = mask if combined is None else combined & mask
        self._masks[key] = combined
        return combined

    def process_row(self, row: np.ndarray, extra: Sequence[int]) -> np.ndarray:
        """One logits row with the disallowed tokens at -inf (a copy; the input is untouched)."""
        mask = self.allowed(extra)
        if mask is None:
            return row
        if not mask.any():
            raise GenerationError(
                f"the constraints ({', '.join(self.names)}) allow no token after {len(extra)} drafted tokens",
                "loosen the ban list, schema or pattern",
            )
        return np.where(mask, row, -np.inf).astype(row.dtype, copy=False)

    def process_tree(self, logits: np.ndarray, tokens: np.ndarray, parents: np.ndarray) -> np.ndarray:
        """Every node's row processed with its own prefix (its path from the root, the root excluded).

        A node whose path holds a token its parent's mask forbids can never be accepted (the
        parent's processed probability of it is 0), so its row is left as it is.
        """
        out = np.array(logits, copy=True)
        paths: list[tuple[int, ...] | None] = [()]
        for node in range(1, len(tokens)):
            parent_path = paths[int(parents[node])]
            token = int(tokens[node])
            if parent_path is None or not self._permits(parent_path, token):
                paths.append(None)
                continue
            paths.append((*parent_path, token))
        for node, path in enumerate(paths):
            if path is not None:
                out[node] = self.process_row(out[node], path)
        return out

    def walk(self, logits: np.ndarray, tokens: np.ndarray, parents: np.ndarray,
             choose: Callable[[np.ndarray, int], int]) -> tuple[list[int], int]:
        """Greedy / match verification with rows processed lazily, only along the accepted path.

        The same walk as BlockSparseVerify (custom_ops/block_sparse_verify): at each node the
        target's choice from its processed row (`choose(row, depth)`), then the lowest-index child
        holding that token. Only the rows the walk reads are processed — the accepted path — where
        `process_tree` would mask every node. Returns (the path, the token after it).
        """
        path = [0]
        extra: list[int] = []
        while True:
            node = path[-1]
            choice = choose(self.process_row(logits[node], extra), len(extra))
            children = np.flatnonzero((parents == node) & (tokens == choice))
            if children.size == 0:
                return path, choice
            path.append(int(children[0]))
            extra.append(choice)

    def _permits(self, path: tuple[int, ...], token: int) -> bool:
        mask = self.allowed(path)
        return mask is None or (0 <= token < mask.size and bool(mask[token]))

    def filter(self, extra: Sequence[int], ids: np.ndarray) -> np.ndarray:
        """Bool per candidate id (-1 = empty slot): which may follow committed + extra."""
        valid: np.ndarray = ids >= 0
        mask = self.allowed(extra)
        if mask is None:
            return valid
        result: np.ndarray = valid & mask[np.clip(ids, 0, self.vocab - 1)]
        return result

    def filter_candidates(self, paths: Sequence[Sequence[int]], ids: np.ndarray, logprob: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
        """The draft's candidate rows (one per node, `paths[row]` its path) restricted to the allowed
        tokens and renormalised: the proposal the node's children are drawn from (rrs needs exactly
        that q). Rows the constraints leave alone are returned as they are."""
        valid = ids >= 0
        keep = valid.copy()
        for row, path in enumerate(paths):
            mask = self.allowed(path)
            if mask is not None:
                keep[row] &= mask[np.clip(ids[row], 0, self.vocab - 1)]
        changed = (keep != valid).any(axis=1, keepdims=True)
        if not changed.any():
            return ids, logprob
        ids = np.where(keep, ids, -1)
        logprob = np.where(keep, logprob, -np.inf)
        alive = keep.any(axis=1, keepdims=True)
        norm = np.logaddexp.reduce(np.where(alive, logprob, 0.0), axis=1, keepdims=True)
        logprob = np.where(changed & keep, logprob - np.where(alive, norm, 0.0), logprob)
        return ids, logprob

    def compliant_prefix(self, tokens: Sequence[int]) -> int:
        """How many of `tokens` (a chain after the committed reply) the constraints allow in a row."""
        for i, token in enumerate(tokens):
            if not self._permits(tuple(tokens[:i]), int(token)):
                return i
        return len(tokens)

    def accept(self, tokens: list[int]) -> tuple[list[int], bool]:
        """Commit tokens about to be emitted: (the ones kept, whether a processor stopped the reply).

        A processor that stops at token i keeps tokens[:i] (the refuse policy never emits the token
        that completes a banned phrase).
        """
        cut = None
        for processor in self.processors:
            at = processor.stop_at(tokens)
            if at is not None and (cut is None or at < cut):
                cut = at
        kept = tokens if cut is None else tokens[:cut]
        for processor in self.processors:
            processor.advance(kept)
        self._masks.clear()
        return kept, cut is not None
