"""Prompt lookup: the n-gram index, its chains, the acceptance estimate, the drafters' trees."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specdec.pipeline.engine.drafter import DRAFTER_NAMES, RoundPlan
from specdec.pipeline.engine.lookup import MIN_PATH_PROB, LookupAcceptance, LookupDrafter, NgramIndex
from specdec.pipeline.engine.rng import Randomness
from specdec.pipeline.engine.stats import LOOKUP, PRUNE, RoundStats
from specdec.pipeline.engine.tree import CandidatePool
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind


def test_the_longest_suffix_match_comes_first() -> None:
    index = NgramIndex(1, 3)
    index.reset([1, 2, 3, 9, 9, 2, 3, 4, 5, 7, 1, 2, 3])
    chains = index.propose(depth=3, branches=4)
    # suffix (1, 2, 3) matched at 0..2 -> 9 9 2; the 2-gram (2, 3) adds 4 5 7; the 1-gram (3,) nothing new
    assert chains == [(3, [9, 9, 2]), (2, [4, 5, 7])]
    assert index.propose(depth=2, branches=1) == [(3, [9, 9])]


def test_a_match_running_into_the_end_copies_itself() -> None:
    index = NgramIndex(1, 2)
    index.reset([5, 6, 7, 5, 6])
    assert index.propose(depth=7, branches=1) == [(2, [7, 5, 6, 7, 5, 6, 7])]  # the period continues


def test_frequent_continuations_rank_first_then_recent() -> None:
    index = NgramIndex(1, 1)
    index.reset([4, 1, 4, 2, 4, 2, 4, 3, 4])
    # after 4: 2 (twice) beats 3 (latest) beats 1
    assert [chain[0] for _, chain in index.propose(depth=1, branches=3)] == [2, 3, 1]


def test_extending_equals_indexing_at_once() -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, size=300).tolist()
    whole = NgramIndex(1, 4)
    whole.reset(tokens)
    grown = NgramIndex(1, 4)
    grown.reset(tokens[:10])
    for start in range(10, 300, 7):
        grown.extend(tokens[start: start + 7])
    assert grown.table == whole.table and grown.tokens == whole.tokens
    assert grown.propose(5, 4) == whole.propose(5, 4)


def test_no_match_no_chain() -> None:
    index = NgramIndex(2, 3)
    index.reset([1, 2, 3, 4])
    assert index.propose(4, 4) == []


def test_acceptance_estimate_learns_from_verified_nodes() -> None:
    estimate = LookupAcceptance(max_n=3)
    first, second = estimate.cells(n=2, rank=0, length=2)
    before = estimate.logp[first]
    assert math.exp(before) == pytest.approx(LookupAcceptance.prior(2, 0, 0))
    assert estimate.cells(n=1, rank=5, length=10)[-1] == estimate.cells(n=1, rank=1, length=8)[-1]
    pool = CandidatePool(root_token=1)
    pool.graft(0, [7, 8], [estimate.logp[first], estimate.logp[second]], [first, second])
    tree = pool.select(budget=3, sibling_prefix=False)
    estimate.observe(tree, path=[0, 1])  # 7 accepted, 8 rejected
    assert estimate.logp[first] > before and estimate.logp[second] < math.log(LookupAcceptance.prior(2, 0, 1))
    estimate.reset()
    assert estimate.logp[first] == before


def _round(drafter: LookupDrafter, config: DecodeConfig, plan: RoundPlan) -> tuple[list[int], RoundStats]:
    stats = RoundStats(index=0, kind="speculative")
    result = drafter.draft(drafter.index.tokens[-1], 0, plan, config, Randomness(0), 0, stats)
    return result.tree.tokens.tolist(), stats


def test_lookup_drafter_proposes_the_copy_and_times_it() -> None:
    drafter = LookupDrafter(1, 3)
    drafter.reset([10, 11, 12, 13, 14, 10, 11], 12)
    tokens, stats = _round(drafter, DecodeConfig(), RoundPlan(budget=16, depth=4, width=4))
    assert tokens[:3] == [12, 13, 14]  # root 12, then the copy of what followed 10 11 12
    assert [s.stage for s in stats.slices] == [LOOKUP, PRUNE]  # the final selection stays a PRUNE slice


def test_chains_stop_below_the_path_probability_floor() -> None:
    drafter = LookupDrafter(1, 1)
    drafter.reset([3, 4, 3, 5, 3, 6, 3, 7, 3, 8], 3)  # a 1-token match with five continuations
    tokens, _ = _round(drafter, DecodeConfig(), RoundPlan(budget=64, depth=6, width=8))
    scores = LookupAcceptance(1)
    best = scores.prior(1, 0, 0) * scores.prior(1, 0, 1) ** 5
    assert best < MIN_PATH_PROB  # a 1-gram copy is not trusted six tokens deep ...
    assert 1 < len(tokens) < 1 + 6 + 4  # ... so the chain is cut, and weak alternatives with it


def test_exact_layout_keeps_a_chain() -> None:
    drafter = LookupDrafter(1, 3)
    drafter.reset([1, 2, 3, 1, 2, 4, 1, 2, 3, 5, 1], 2)
    result = drafter.draft(2, 0, RoundPlan(16, 4, 4), DecodeConfig(exact_layout=True), Randomness(0), 0,
                           RoundStats(0, "speculative"))
    parents = result.tree.parents.tolist()
    assert parents == list(range(-1, len(parents) - 1))  # a single path


def test_drafter_names_are_the_config_choices() -> None:
    assert DRAFTER_NAMES == ("model", "lookup", "model+lookup")
    assert DecodeConfig(drafter="model+lookup").drafter is DrafterKind.model_lookup  # type: ignore[arg-type]
