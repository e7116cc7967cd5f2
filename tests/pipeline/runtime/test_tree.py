"""Candidate selection: budget, closure rules, masks."""

from __future__ import annotations

import numpy as np

from specdec.pipeline.runtime.tree import CandidatePool, ancestor_matrix


def _pool() -> CandidatePool:
    pool = CandidatePool(root_token=100)
    a, _, c = pool.add_children(0, np.array([1, 2, 3]), np.log(np.array([0.6, 0.3, 0.1])))
    pool.add_children(a, np.array([4, 5]), np.log(np.array([0.9, 0.1])))
    pool.add_children(c, np.array([6]), np.log(np.array([1.0])))
    return pool


def test_select_keeps_best_paths_within_budget() -> None:
    tree = _pool().select(budget=4, sibling_prefix=False)
    assert tree.size == 4
    assert tree.tokens.tolist() == [100, 1, 2, 4]  # 0.6, 0.54 (1->4), 0.3 beat 0.1 and 0.06
    assert tree.parents.tolist() == [-1, 0, 0, 1]
    assert tree.depths.tolist() == [0, 1, 1, 2]


def test_sibling_prefix_rule_keeps_draw_order() -> None:
    pool = CandidatePool(root_token=100)
    # drawn order 7, 8, 9 but 9 has the best probability: without its earlier siblings it is not allowed
    pool.add_children(0, np.array([7, 8, 9]), np.log(np.array([0.1, 0.2, 0.7])))
    tree = pool.select(budget=2, sibling_prefix=True)
    assert tree.tokens.tolist() == [100, 7]
    free = pool.select(budget=2, sibling_prefix=False)
    assert free.tokens.tolist() == [100, 9]


def test_parents_precede_children_and_mask_matches_ancestry() -> None:
    tree = _pool().select(budget=7, sibling_prefix=False)
    assert all(p < i for i, p in enumerate(tree.parents.tolist()) if p >= 0)
    mask = tree.mask(past=3, dtype=np.dtype("float32"))[0, 0]
    visible = mask == 0
    assert visible[:, :3].all()
    np.testing.assert_array_equal(visible[:, 3:], ancestor_matrix(tree.parents))
    for node in range(tree.size):
        ancestors = set()
        current = node
        while current >= 0:
            ancestors.add(current)
            current = tree.parents[current]
        assert set(np.flatnonzero(visible[node, 3:]).tolist()) == ancestors
