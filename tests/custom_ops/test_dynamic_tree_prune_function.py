"""The DynamicTreePrune ONNX function equals the numpy reference, in stock onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from custom_ops.op_models import session, single_op_model

from specdec.custom_ops.dynamic_tree_prune import dynamic_tree_prune

MAX_K = 8
SCALARS = {"temperature": 0.9, "entropy_low": 0.8, "entropy_high": 2.5, "beta_base": 0.3, "rho_min": 0.05,
           "rho_max": 0.6}


@pytest.fixture(scope="module")
def prune_session():  # type: ignore[no-untyped-def]
    return session(single_op_model("DynamicTreePrune", max_k=MAX_K))


def _compare(sess, logits: np.ndarray, **overrides: float) -> None:  # type: ignore[no-untyped-def]
    scalars = {**SCALARS, **overrides}
    feeds = {k: np.array(v, np.float32) for k, v in scalars.items()}
    got = sess.run(None, {"logits": logits.astype(np.float32), **feeds})
    want = dynamic_tree_prune(logits, max_k=MAX_K, **scalars)
    np.testing.assert_array_equal(got[0], want[0])  # candidate ids
    np.testing.assert_array_equal(got[2], want[2])  # keep
    np.testing.assert_array_equal(np.isneginf(got[1]), np.isneginf(want[1]))
    finite = np.isfinite(want[1])
    np.testing.assert_allclose(got[1][finite], want[1][finite], atol=2e-6)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-6)
    assert not np.isnan(got[1]).any() and not np.isnan(got[3]).any()


@pytest.mark.parametrize("vocab", [3, 8, 50, 300])
def test_random_rows(prune_session, vocab: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(vocab)
    for scale in (0.3, 2.0, 8.0):
        _compare(prune_session, rng.normal(scale=scale, size=(32, vocab)))


@pytest.mark.parametrize("temperature", [1e-7, 1e-3, 0.5, 1.0, 40.0])
def test_adversarial_rows(prune_session, temperature: float) -> None:  # type: ignore[no-untyped-def]
    rows = np.array([
        [-np.inf] * 6,  # nothing possible: uniform
        [-np.inf, 0, 1, -np.inf, 2, -np.inf],
        [3e38, -3e38, 0, 1, 2, 3],  # huge values
        [1e30] * 6,  # all equal and huge
        [0.0] * 6,  # all equal: ties everywhere
        [5, 5, 1, 0, 0, 0],  # tie at the argmax
        [2, 1, 1, 1, 0, -1],  # ties around the truncation boundary
        [np.inf, 0, 0, 0, 0, 0],
    ], np.float32)
    _compare(prune_session, rows, temperature=temperature)


def test_boundary_rows_with_exact_mass(prune_session) -> None:  # type: ignore[no-untyped-def]
    # four equal tokens, prune ratio chosen so the kept mass hits 1 - prune exactly at 3 tokens
    rows = np.log(np.array([[0.25, 0.25, 0.25, 0.25, 1e-30, 1e-30]], np.float32))
    _compare(prune_session, rows, rho_min=0.25, rho_max=0.25)
    _compare(prune_session, rows, rho_min=0.5, rho_max=0.5)
