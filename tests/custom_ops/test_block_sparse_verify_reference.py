"""BlockSparseVerify numpy reference and host rrs: semantics, numerics, and losslessness."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specdec.custom_ops.block_sparse_verify import (
    Mode,
    block_sparse_verify,
    rrs_tests,
    sample_token,
    target_probs,
    verify_rrs,
)

# root(0) -> 1, 2 ; 1 -> 3 ; 3 -> 4
PARENTS = np.array([-1, 0, 0, 1, 3])
DEPTHS = np.array([0, 1, 1, 2, 3])


def logits_preferring(choices: list[int], vocab: int = 10) -> np.ndarray:
    logits = np.zeros((len(choices), vocab), np.float32)
    for node, token in enumerate(choices):
        logits[node, token] = 5.0
    return logits


def test_greedy_walks_the_matching_path() -> None:
    tokens = np.array([9, 4, 5, 6, 7])
    logits = logits_preferring([4, 6, 1, 7, 2])  # root wants 4 (node 1), node 1 wants 6 (node 3), 3 wants 7
    accepted, length, nxt = block_sparse_verify(logits, tokens, PARENTS, DEPTHS, np.zeros((5, 1)), 0.0, Mode.greedy)
    assert accepted.tolist() == [0, 1, 3, 4, -1] and length == 4 and nxt == 2


def test_greedy_rejects_at_root() -> None:
    tokens = np.array([9, 4, 5, 6, 7])
    logits = logits_preferring([8, 6, 1, 7, 2])
    accepted, length, nxt = block_sparse_verify(logits, tokens, PARENTS, DEPTHS, np.zeros((5, 1)), 0.0, Mode.greedy)
    assert accepted.tolist() == [0, -1, -1, -1, -1] and length == 1 and nxt == 8


def test_greedy_argmax_ties_take_the_lowest_id() -> None:
    logits = np.zeros((1, 6), np.float32)
    logits[0, [2, 4]] = 3.0
    _, _, nxt = block_sparse_verify(logits, np.array([1]), np.array([-1]), np.array([0]), np.zeros((1, 1)), 0.0, 0)
    assert nxt == 2


def test_match_follows_sampled_tokens() -> None:
    tokens = np.array([9, 4, 5, 6, 7])
    logits = np.full((5, 10), -30.0, np.float32)
    logits[0, 5] = 0.0  # root: certainly 5 (node 2)
    logits[2, 3] = 0.0
    accepted, length, nxt = block_sparse_verify(logits, tokens, PARENTS, DEPTHS, np.full((5, 1), 0.5), 1.0,
                                                Mode.match)
    assert accepted[:length].tolist() == [0, 2] and nxt == 3


def test_target_probs_top_k_and_top_p_follow_hf_semantics() -> None:
    logits = np.log(np.array([[0.5, 0.2, 0.15, 0.1, 0.05]], np.float32))
    p = target_probs(logits, 1.0, top_k=2)
    np.testing.assert_allclose(p[0], [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0], rtol=1e-5)
    p = target_probs(logits, 1.0, top_p=0.8)  # ascending cum: .05 .15 .3 .5 1 -> drop <= 0.2: tokens 4, 3
    np.testing.assert_allclose(p[0], np.array([0.5, 0.2, 0.15, 0, 0]) / 0.85, rtol=1e-5)
    hot = target_probs(logits, 0.5)
    assert hot[0, 0] > p[0, 0] * 0 + 0.5


def test_sample_token_never_draws_zero_mass() -> None:
    probs = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    draws = {sample_token(probs, u) for u in np.linspace(0, 1, 101)[:-1]}
    assert draws == {1, 3}
    assert sample_token(probs, 0.9999999999999999) == 3


@pytest.mark.parametrize("temperature", [1e-8, 1e-3, 1.0, 100.0])
def test_numerics_are_safe(temperature: float) -> None:
    logits = np.array([[-np.inf, 3e38, 3e38, 0.0], [-np.inf, -np.inf, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    tokens, parents, depths = np.array([0, 1, 2]), np.array([-1, 0, 1]), np.array([0, 1, 2])
    for mode in (Mode.greedy, Mode.match):
        _, length, nxt = block_sparse_verify(logits, tokens, parents, depths, np.full((3, 1), 0.7),
                                                    temperature, mode)
        assert 1 <= length <= 3 and 0 <= nxt < 4
    p = target_probs(logits, temperature)
    assert not np.isnan(p).any()
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-5)


# ---- losslessness: the first two emitted tokens follow the target exactly -------------------

V = 5
RNG_SEED = 1234


def _random_dist(rng: np.random.Generator) -> np.ndarray:
    return rng.dirichlet(np.full(V, 0.6)).astype(np.float64)


def _draw_without_replacement(q: np.ndarray, u: np.ndarray, k: int) -> np.ndarray:
    keys = np.log(np.maximum(q, 1e-300)) - np.log(-np.log(u))
    keys[q <= 0] = -np.inf
    return np.argsort(-keys, kind="stable")[:k]


def _sample_round(p: list[np.ndarray], q: list[np.ndarray], rng: np.random.Generator, naive: bool) -> tuple[int, int]:
    """One two-level round; returns the first two emitted tokens (or -1 when only one was emitted)."""
    k = 3
    children = np.argsort(-q[0], kind="stable")[:k] if naive else _draw_without_replacement(q[0], rng.random(V), k)
    tokens, parents, dist_ids, dist_logprob = [0], [-1], [np.arange(V)], [np.log(np.maximum(q[0], 1e-300))]
    for token in children:
        tokens.append(int(token))
        parents.append(0)
        dist_ids.append(np.full(V, -1))
        dist_logprob.append(np.full(V, -np.inf))
    logits = np.stack([np.log(np.maximum(p[0], 1e-300))] + [np.log(np.maximum(p[1 + t], 1e-300)) for t in children])
    uniforms = rng.random((len(tokens), k + 1))
    if naive:  # accept deterministic top-k children with min(1, p/q): the biased rule of docs/design.md §4
        for slot, child in enumerate(range(1, len(tokens))):
            x = tokens[child]
            if uniforms[0, slot] < p[0][x] / q[0][x]:
                return x, sample_token(p[1 + x], uniforms[child, 0])
        return sample_token(p[0], uniforms[0, k]), -1
    accepted, length, nxt = verify_rrs(logits.astype(np.float32), np.array(tokens), np.array(parents),
                                       np.array(dist_ids), np.array(dist_logprob), uniforms, 1.0)
    if length == 1:
        return nxt, -1
    return tokens[accepted[1]], nxt


def _joint_test(naive: bool, samples: int) -> float:
    rng = np.random.default_rng(RNG_SEED)
    p = [_random_dist(rng) for _ in range(V + 1)]
    q = [_random_dist(rng)]
    counts = np.zeros((V, V + 1))
    for _ in range(samples):
        first, second = _sample_round(p, q, rng, naive)
        counts[first, second if second >= 0 else V] += 1
    # The first token must follow p_root; when a child was accepted the second follows p_child.
    first_marginal = counts.sum(axis=1)
    chi_first = stats.chisquare(first_marginal, p[0] * samples).pvalue
    accepted_rows = counts[:, :V]
    pvalues = [chi_first]
    for token in range(V):
        row = accepted_rows[token]
        if row.sum() > 200:
            pvalues.append(stats.chisquare(row, p[1 + token] * row.sum()).pvalue)
    return float(min(pvalues) * len(pvalues))  # Bonferroni


def test_rrs_without_replacement_is_lossless() -> None:
    assert _joint_test(naive=False, samples=30000) > 1e-3


def test_naive_ratio_on_deterministic_children_is_biased() -> None:
    """The check above can fail: the naive p/q rule on top-k children is detected as biased."""
    assert _joint_test(naive=True, samples=30000) < 1e-6


# ---- losslessness with deterministic (lookup) proposals among the drafted siblings --------------

def _lookup_round(p: list[np.ndarray], q: np.ndarray, rng: np.random.Generator, case: str) -> tuple[int, int]:
    """One round whose root has drafted children and lookup (point-mass) children; a lookup child
    carries a lookup grandchild. Returns the first two emitted tokens (-1: only one)."""
    draws = _draw_without_replacement(q, rng.random(V), 3)
    kept = {"merged": [0, 1, 2], "separate": [0, 1], "two": [0], "gap": [0], "alone": []}[case]
    lookups = {"merged": [int(draws[1])], "separate": [int(np.argmin(q))], "two": [int(draws[2]), int(draws[0])],
               "gap": [int(draws[2])], "alone": [int(np.argmax(p[0])), int(np.argmin(p[0]))]}[case]
    tokens, parents, rank, point = [0], [-1], [-1], [False]
    for r in kept:
        tokens.append(int(draws[r]))
        parents.append(0)
        rank.append(r)
        point.append(False)
    for token in lookups:
        if token in tokens[1:]:
            point[tokens.index(token, 1)] = True
        else:
            tokens.append(token)
            parents.append(0)
            rank.append(2 if case == "gap" else -1)  # gap: draw 2 is in the tree, draw 1 is not
            point.append(True)
    for node in [i for i in range(1, len(tokens)) if point[i]]:  # a lookup chain continues below
        tokens.append((tokens[node] + 1) % V)
        parents.append(node)
        rank.append(-1)
        point.append(True)
    rows = [np.log(np.maximum(p[0], 1e-300))]
    rows += [np.log(np.maximum(p[1 + t] if parents[i] == 0 else p[0], 1e-300)) for i, t in enumerate(tokens) if i]
    dist_ids = np.full((len(tokens), V), -1)
    dist_ids[0] = np.arange(V)
    dist_logprob = np.full((len(tokens), V), -np.inf)
    dist_logprob[0] = np.log(np.maximum(q, 1e-300))
    draft_rank, point_mass = np.array(rank), np.array(point)
    uniforms = rng.random((len(tokens), rrs_tests(np.array(parents), draft_rank, point_mass)))
    accepted, length, nxt = verify_rrs(np.stack(rows).astype(np.float32), np.array(tokens), np.array(parents),
                                       dist_ids, dist_logprob, uniforms, 1.0, draft_rank=draft_rank,
                                       point_mass=point_mass)
    if length == 1:
        return nxt, -1
    return tokens[accepted[1]], tokens[accepted[2]] if length > 2 else nxt


def _lookup_joint_test(case: str, samples: int) -> float:
    rng = np.random.default_rng(RNG_SEED)
    p = [_random_dist(rng) for _ in range(V + 1)]
    q = _random_dist(rng)
    counts = np.zeros((V, V + 1))
    for _ in range(samples):
        first, second = _lookup_round(p, q, rng, case)
        counts[first, second if second >= 0 else V] += 1
    pvalues = [stats.chisquare(counts.sum(axis=1), p[0] * samples).pvalue]
    for token in range(V):
        row = counts[token, :V]
        if row.sum() > 200:
            pvalues.append(stats.chisquare(row, p[1 + token] * row.sum()).pvalue)
    return float(min(pvalues) * len(pvalues))  # Bonferroni


@pytest.mark.parametrize("case", ["merged", "separate", "two", "gap", "alone"])
def test_rrs_with_point_mass_siblings_is_lossless(case: str) -> None:
    """Lookup proposals (point masses) next to draws without replacement: merged with a draw,
    apart from them, two of them, after a gap in the draws, and alone."""
    assert _lookup_joint_test(case, samples=20000) > 1e-3


def test_point_mass_verified_as_a_draw_is_biased() -> None:
    """The check above can fail: a lookup token tested with the draft's p/q rule is detected."""
    rng = np.random.default_rng(RNG_SEED)
    p = [_random_dist(rng) for _ in range(V + 1)]
    q = _random_dist(rng)
    x = int(np.argmin(q))  # a token the draft rarely proposes: p/q over-accepts it
    counts = np.zeros(V)
    for _ in range(20000):
        draws = _draw_without_replacement(q, rng.random(V), 2)
        tokens = [0, *[int(t) for t in draws if t != x], x]
        logits = np.log(np.maximum(np.stack([p[0]] + [p[1 + t] for t in tokens[1:]]), 1e-300)).astype(np.float32)
        dist_ids = np.full((len(tokens), V), -1)
        dist_ids[0] = np.arange(V)
        dist_logprob = np.full((len(tokens), V), -np.inf)
        dist_logprob[0] = np.log(np.maximum(q, 1e-300))
        parents = np.array([-1] + [0] * (len(tokens) - 1))
        accepted, length, nxt = verify_rrs(logits, np.array(tokens), parents, dist_ids, dist_logprob,
                                           rng.random((len(tokens), len(tokens) + 1)), 1.0)
        counts[tokens[accepted[1]] if length > 1 else nxt] += 1
    assert stats.chisquare(counts, p[0] * counts.sum()).pvalue < 1e-6


def test_rrs_tests_counts_columns() -> None:
    parents = np.array([-1, 0, 0, 1])
    assert rrs_tests(parents) == 3  # two children at the root + the residual draw
    assert rrs_tests(parents, np.array([-1, 0, -1, 0]), np.array([False, True, True, False])) == 4
    assert rrs_tests(np.array([-1])) == 1
