"""DynamicTreePrune numpy reference: the semantics of docs/design.md §3, and numerics on adversarial rows."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.custom_ops.dynamic_tree_prune import dynamic_tree_prune

DEFAULTS = {"temperature": 1.0, "entropy_low": 0.8, "entropy_high": 2.5, "beta_base": 0.3, "rho_min": 0.05,
            "rho_max": 0.6}


def prune(logits: np.ndarray, max_k: int = 8, **overrides: float):  # type: ignore[no-untyped-def]
    args = {**DEFAULTS, **overrides}
    return dynamic_tree_prune(np.asarray(logits, np.float32), max_k=max_k, **args)


def test_low_entropy_keeps_top1() -> None:
    ids, logprob, keep, entropy = prune([[10.0, 0.0, 0.0, 0.0]])
    assert keep.tolist() == [1] and ids[0, 0] == 0 and logprob[0, 0] == 0.0
    assert (ids[0, 1:] == -1).all() and np.isneginf(logprob[0, 1:]).all()
    assert entropy[0] < 0.01


def test_cumulative_mass_rule_matches_a_direct_computation() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(scale=2.0, size=(64, 50)).astype(np.float32)
    ids, logprob, keep, entropy = prune(logits, max_k=50)
    for row in range(64):
        p = np.exp(logits[row] - logits[row].max())
        p /= p.sum()
        h = -(p * np.log(p)).sum()
        assert entropy[row] == pytest.approx(h, rel=1e-4)
        alpha = np.clip((h - 0.8) / (2.5 - 0.8), 0, 1)
        ratio = np.clip(alpha * 0.3, 0.05, 0.6)
        order = np.argsort(-p, kind="stable")
        expected_keep = int(np.searchsorted(np.cumsum(p[order]), 1 - ratio) + 1)
        assert keep[row] == min(expected_keep, 50)
        assert ids[row, : keep[row]].tolist() == order[: keep[row]].tolist()
        kept_p = p[order[: keep[row]]]
        np.testing.assert_allclose(np.exp(logprob[row, : keep[row]]), kept_p / kept_p.sum(), rtol=1e-4)


def test_high_entropy_keeps_more_than_low_entropy() -> None:
    flat = np.zeros((1, 100), np.float32)
    peaked = np.zeros((1, 100), np.float32)
    peaked[0, 3] = 6.0
    assert prune(flat, max_k=64)[2][0] > prune(peaked, max_k=64)[2][0]


def test_max_k_caps_and_pads() -> None:
    ids, logprob, keep, _ = prune(np.zeros((2, 3), np.float32), max_k=8)
    assert ids.shape == (2, 8) and keep.tolist() == [3, 3]
    assert (ids[:, 3:] == -1).all()
    np.testing.assert_allclose(np.exp(logprob[:, :3]), 1 / 3, rtol=1e-6)


def test_ties_keep_lower_ids_first() -> None:
    logits = np.array([[1.0, 5.0, 5.0, 5.0, 0.0]], np.float32)
    ids, _, _, _ = prune(logits, max_k=2)
    assert ids[0].tolist() == [1, 2]


@pytest.mark.parametrize(
    "row",
    [
        [-np.inf, 0.0, 1.0, -np.inf],
        [-np.inf, -np.inf, -np.inf, -np.inf],
        [3e38, -3e38, 0.0, 1.0],
        [1e30, 1e30, 1e30, 1e30],
        [0.0, 0.0, 0.0, 0.0],
        [np.inf, 0.0, 0.0, 0.0],
    ],
)
@pytest.mark.parametrize("temperature", [1e-9, 1e-3, 1.0, 50.0])
def test_no_nan_on_adversarial_rows(row: list[float], temperature: float) -> None:
    ids, logprob, keep, entropy = prune(np.array([row], np.float32), max_k=3, temperature=temperature)
    assert not np.isnan(logprob).any() and not np.isnan(entropy).any()
    assert 1 <= keep[0] <= 3
    kept = logprob[0, : keep[0]]
    assert np.isfinite(kept).all()
    assert np.exp(kept).sum() == pytest.approx(1.0, abs=1e-5)
    assert (ids[0, : keep[0]] >= 0).all()
    finite = np.isfinite(np.array(row)) | (np.array(row) > 0)
    if finite.any():  # a -inf logit is never proposed while something else is possible
        assert all(finite[i] for i in ids[0, : keep[0]])
