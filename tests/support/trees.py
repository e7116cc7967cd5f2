"""Random draft trees for the tests that compare a tree step with the reference row by row."""

from __future__ import annotations

import numpy as np


def random_tree(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Parents (root -1), depths, and the root-to-last-node path of a random tree of `size` nodes."""
    parents = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, size)])
    depths = np.zeros(size, np.int64)
    for node in range(1, size):
        depths[node] = depths[parents[node]] + 1
    path = [size - 1]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    return parents, depths, path[::-1]
