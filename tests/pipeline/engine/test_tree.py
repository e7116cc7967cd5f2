"""Candidate selection: budget, closure rules, masks."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.pipeline.engine.tree import LOOKUP, MODEL, CandidatePool, ancestor_matrix


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


# ---- lookup chains grafted into the draft model's tree -----------------------------------------

def test_graft_dedups_against_model_children_and_keeps_the_better_score() -> None:
    pool = CandidatePool(root_token=100)
    pool.graft(0, [2, 7, 8], [np.log(0.9)] * 3, [0, 1, 2])  # lookup: 2 -> 7 -> 8
    a, b = pool.add_children(0, np.array([1, 2]), np.log(np.array([0.6, 0.3])))  # the model drafts 1 and 2
    assert b == 1  # token 2 under the root is the lookup node: one node, both origins
    node = pool.nodes[b]
    assert node.origin == MODEL | LOOKUP and node.model_rank == 1 and node.lookup_cell == 0
    assert node.path_logprob == pytest.approx(np.log(0.9))  # max(log 0.3, log 0.9)
    pool.add_children(b, np.array([7, 5]), np.log(np.array([0.99, 0.01])))  # the model agrees with the copy
    seven = pool.nodes[b].children[0]
    assert pool.nodes[seven].origin == MODEL | LOOKUP
    assert pool.nodes[seven].path_logprob == pytest.approx(np.log(0.9) + np.log(0.99))
    eight = pool.nodes[seven].children[0]  # its lookup child rose with it
    assert pool.nodes[eight].path_logprob == pytest.approx(np.log(0.9) + np.log(0.99) + np.log(0.9))
    tree = pool.select(budget=5, sibling_prefix=False)
    assert tree.tokens.tolist() == [100, 2, 1, 7, 8]
    assert tree.origin.tolist() == [0, MODEL | LOOKUP, MODEL, MODEL | LOOKUP, LOOKUP]
    assert tree.draft_rank.tolist() == [-1, 1, 0, 0, -1] and a == 4  # nodes 1-3 are the lookup chain


def test_sampled_trees_offer_lookup_nodes_without_their_draw_order() -> None:
    pool = CandidatePool(root_token=100)
    pool.graft(0, [9], [np.log(0.8)], [0])
    pool.add_children(0, np.array([7, 8, 9]), np.log(np.array([0.1, 0.2, 0.7])))  # 9 is draw 2 and a lookup
    tree = pool.select(budget=2, sibling_prefix=True)
    assert tree.tokens.tolist() == [100, 9]  # allowed as a lookup proposal although draws 0 and 1 are not in
    assert tree.point_mass.tolist() == [False, True] and tree.draft_rank.tolist() == [-1, 2]
    assert pool.select(budget=4, sibling_prefix=True).tokens.tolist() == [100, 9, 7, 8]


Op = tuple[str, tuple[int, ...], list[int]]  # ("lookup", (), chain) or ("model", parent path, tokens)


def _random_ops(rng: np.random.Generator) -> list[Op]:
    """Random model expansions and lookup grafts, each model expansion under a node that exists then."""
    pool = CandidatePool(root_token=0)
    ops: list[Op] = []
    for _ in range(12):
        if rng.random() < 0.25:
            op: Op = ("lookup", (), rng.integers(1, 6, size=int(rng.integers(1, 6))).tolist())
        else:
            open_nodes = [i for i, n in enumerate(pool.nodes) if not n.model_children and (i == 0 or n.model_rank >= 0)]
            parent = open_nodes[int(rng.integers(0, len(open_nodes)))]
            tokens = rng.choice(np.arange(1, 9), size=int(rng.integers(1, 5)), replace=False).tolist()
            op = ("model", _path(pool, parent), tokens)
        _apply(pool, op, 99)
        ops.append(op)
    return ops


def _apply(pool: CandidatePool, op: Op, max_depth: int) -> None:
    kind, parent_path, tokens = op
    if kind == "lookup":
        chain = tokens[:max_depth]
        pool.graft(0, chain, [float(np.log(0.3 + 0.1 * (t % 5))) for t in chain], list(range(len(chain))))
        return
    if len(parent_path) >= max_depth:
        return
    parent = 0
    for token in parent_path:
        parent = next(c for c in pool.nodes[parent].children if pool.nodes[c].token == token)
    pool.add_children(parent, np.array(tokens), np.log(np.array([0.5, 0.3, 0.15, 0.05])[: len(tokens)]))


def _random_pool(ops: list[Op], max_depth: int) -> CandidatePool:
    """The pool a drafter limited to `max_depth` would have built from the same proposals."""
    pool = CandidatePool(root_token=0)
    for op in ops:
        _apply(pool, op, max_depth)
    return pool


@pytest.mark.parametrize("sibling_prefix,chain", [(False, False), (True, False), (False, True), (True, True)])
def test_merged_selection_is_prefix_consistent_in_budget_and_depth(sibling_prefix: bool, chain: bool) -> None:
    """The planner's replay rule holds for merged trees: the tree of budget n is the first n nodes of
    any larger budget's tree, and a depth-D pool's tree is the full order filtered to depth <= D."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        ops = _random_ops(rng)
        full = _random_pool(ops, 99)
        big = full.select(budget=64, sibling_prefix=sibling_prefix, chain=chain)
        order = big.source[np.argsort(big.selected)].tolist()  # candidates in best-first order
        for budget in range(1, len(order) + 1):
            small = full.select(budget=budget, sibling_prefix=sibling_prefix, chain=chain)
            assert small.source[np.argsort(small.selected)].tolist() == order[:budget]
        for depth in range(1, 5):
            shallow = _random_pool(ops, depth)
            tree = shallow.select(budget=64, sibling_prefix=sibling_prefix, chain=chain)
            got = [(shallow.nodes[c].depth, _path(shallow, c)) for c in tree.source[np.argsort(tree.selected)]]
            want = [(full.nodes[c].depth, _path(full, c)) for c in order if full.nodes[c].depth <= depth]
            assert got == want
        if chain:
            assert all(np.count_nonzero(big.parents == node) <= 1 for node in range(big.size))


def _path(pool: CandidatePool, index: int) -> tuple[int, ...]:
    tokens = []
    while index > 0:
        tokens.append(pool.nodes[index].token)
        index = pool.nodes[index].parent
    return tuple(reversed(tokens))


def test_a_pool_with_nothing_proposed_selects_the_root() -> None:
    tree = CandidatePool(root_token=42).select(budget=16, sibling_prefix=False)
    assert tree.size == 1 and tree.tokens.tolist() == [42] and tree.max_depth == 0
