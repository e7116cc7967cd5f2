"""Counter-based randomness (Philox, docs/design.md §4): reproducible on any machine, and addressable.

Uniforms are indexed by (stream, index) rather than drawn in sequence. The sampling stream is
indexed by the position of the generated token, so speculative `match` decoding consumes the
very same uniforms as plain sampling and reproduces its output token for token.
"""

from __future__ import annotations

import enum

import numpy as np


class Stream(enum.IntEnum):
    sample = 0  # one uniform per generated token position
    verify = 1  # rrs acceptance tests, indexed by round
    draft = 2  # draft-tree sampling (Gumbel keys), indexed by round


class Randomness:
    def __init__(self, seed: int) -> None:
        self.seed = int(seed) & 0xFFFFFFFFFFFFFFFF

    def uniforms(self, stream: Stream, index: int, count: int) -> np.ndarray:
        """`count` uniforms in [0, 1) for (stream, index); the same arguments give the same values."""
        generator = np.random.Generator(
            np.random.Philox(key=[self.seed, int(stream)], counter=[0, int(index), 0, 0])
        )
        return generator.random(count)

    def token_uniform(self, position: int) -> float:
        return float(self.uniforms(Stream.sample, position, 1)[0])
