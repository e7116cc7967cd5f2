"""Drafters: who proposes a round's token tree (docs/design.md §5, §8 "Drafters").

A drafter turns the context into a `DraftTree` each round; verification never asks who proposed
a node, so greedy and match stay exact for any drafter, and rrs stays exact because each node
says how it was proposed (drawn from the draft model without replacement, or a deterministic
point mass — `verify_rrs`). Three implementations, chosen by `DecodeConfig.drafter`:

- `model` (engine/model_drafter.py): the bundle's draft graph expands the tree level by level —
  a draft model, or a feature draft that also reads the target's features (`needs_features`: the
  engine hands it the target's `hidden_states` of every committed row);
- `lookup` (engine/lookup.py): prompt lookup copies what followed earlier occurrences of the
  context's last n tokens — no model call, microseconds per round;
- `model+lookup` (engine/lookup.py): lookup chains grafted into the model's tree as extra
  branches, deduplicated against the model's children, within the same node budget.

The engine (engine/engine.py) builds the configured drafter per reply (`DRAFTERS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specdec.pipeline.engine.processors.base import Constraints
from specdec.pipeline.engine.rng import Randomness
from specdec.pipeline.engine.stats import RoundStats
from specdec.pipeline.engine.tree import DraftTree
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind

DRAFTER_NAMES = tuple(kind.value for kind in DrafterKind)  # what a plan or a calibration may name


@dataclass
class RoundPlan:
    """How much to draft this round; controllers change it, never what is accepted."""

    budget: int
    depth: int
    width: int
    beta_base: float | None = None  # overrides the prune parameters' beta_base (online adaptation)


@dataclass
class DraftResult:
    tree: DraftTree
    dist_ids: np.ndarray  # per tree node: the draft's candidate ids (its drafted children's proposal)
    dist_logprob: np.ndarray
    slots_before_tree: int = 0  # draft model: scratch slots of pending + root


def no_distributions(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Distribution rows for nodes nobody drafted from (verify_rrs reads them as empty)."""
    if size == 1:
        return _NO_IDS, _NO_LOGPROB
    return np.full((size, 1), -1, np.int64), np.full((size, 1), -np.inf)


_NO_IDS, _NO_LOGPROB = np.full((1, 1), -1, np.int64), np.full((1, 1), -np.inf)
_NO_IDS.setflags(write=False)
_NO_LOGPROB.setflags(write=False)


class Drafter(Protocol):
    """One reply's proposer: reset, then per round draft -> (verify) -> commit, or skip.

    `features` are the target's `hidden_states` rows [n, H] of the tokens the call committed (the
    prompt; the accepted path from the root; the plainly decoded root), given when `needs_features`."""

    name: str
    needs_features: bool

    def reset(self, prompt: list[int], first: int, features: np.ndarray | None = None) -> None:
        """A new reply: the prompt and the first token the target chose after it (the first root)."""

    def constrain(self, constraints: Constraints | None) -> None:
        """The reply's logits processors: proposals are restricted to what they allow (None: none)."""

    def fit(self, plan: RoundPlan) -> RoundPlan:
        """The plan cut to what this drafter can do now (e.g. the draft model's free KV slots)."""

    def draft(self, root: int, root_position: int, plan: RoundPlan, config: DecodeConfig, rand: Randomness,
              round_key: int, stats: RoundStats) -> DraftResult:
        """The tree to verify; a tree of the root alone means nothing was proposed."""

    def commit(self, result: DraftResult, path: list[int], emitted: list[int], stats: RoundStats,
               features: np.ndarray | None = None) -> None:
        """The target accepted `path` (tree nodes from the root) and emitted `emitted` tokens."""

    def skip(self, root: int, emitted: list[int], stats: RoundStats, features: np.ndarray | None = None) -> None:
        """The round was decoded plainly: `root` was fed, `emitted` came out."""
