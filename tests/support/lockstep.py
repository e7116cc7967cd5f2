"""Feed a runner under test and the dynamic reference the same rows, round after round, and check
the logits agree: the one comparison the fused, windowed and static-ring runners are all held to."""

from __future__ import annotations

import numpy as np

from specdec.pipeline.engine.runner import Runner, causal, no_scratch
from specdec.pipeline.engine.tree import ancestor_matrix
from support.trees import random_tree

TOLERANCE = 1e-5


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want))) / max(1.0, float(np.max(np.abs(want))))


class Lockstep:
    """A runner under test beside the reference; each step feeds both, compares, commits both."""

    def __init__(self, runner: Runner, reference: Runner, seed: int) -> None:
        self.runner, self.reference = runner, reference
        self.rng = np.random.default_rng(seed)
        self.vocab = reference.info.vocab_size

    def step(self, ids: np.ndarray, positions: np.ndarray, visible: np.ndarray, keep: list[int]) -> None:
        want, _ = self.reference.forward(ids, positions, no_scratch(ids.size), visible)
        got, _ = self.runner.forward(ids, positions, no_scratch(ids.size), visible)
        assert want is not None and got is not None
        assert relative_error(got, want) <= TOLERANCE, self.runner.length
        self.reference.commit(keep)
        self.runner.commit(keep)

    def prompt(self, length: int) -> None:
        """A random prompt, every row kept."""
        self.step(self.rng.integers(1, self.vocab, length), np.arange(length), causal(length), list(range(length)))

    def tree(self, size: int) -> None:
        """A random tree after what is committed; one root-to-leaf path is accepted."""
        parents, depths, path = random_tree(self.rng, size)
        self.step(self.rng.integers(1, self.vocab, size), self.runner.length + depths,
                  ancestor_matrix(parents), path)

    def trees_until(self, length: int, largest: int = 8) -> None:
        while self.runner.length < length:
            self.tree(int(self.rng.integers(1, largest + 1)))
