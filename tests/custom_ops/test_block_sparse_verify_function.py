"""The BlockSparseVerify ONNX function equals the numpy reference, in stock onnxruntime."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from custom_ops.op_models import session, single_op_model

from specdec.custom_ops.block_sparse_verify import block_sparse_verify


@pytest.fixture(scope="module")
def verify_session():  # type: ignore[no-untyped-def]
    return session(single_op_model("BlockSparseVerify"))


def _tree(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "chain":
        return np.arange(-1, n - 1)
    if kind == "star":
        return np.array([-1] + [0] * (n - 1))
    return np.array([-1] + [int(rng.integers(max(0, i - 2), i)) for i in range(1, n)])  # deep, branching


def _depths(parents: np.ndarray) -> np.ndarray:
    depths = np.zeros(parents.size, np.int64)
    for node in range(1, parents.size):
        depths[node] = depths[parents[node]] + 1
    return depths


def _check(sess, logits, tokens, parents, uniforms, temperature, mode, top_k=0, top_p=1.0):  # type: ignore[no-untyped-def]
    depths = _depths(parents)
    feeds = {"logits": logits.astype(np.float32), "tree_tokens": tokens.astype(np.int64),
             "tree_parent": parents.astype(np.int64), "tree_depth": depths, "uniforms": uniforms,
             "temperature": np.array(temperature, np.float32), "mode": np.array(mode, np.int64),
             "top_k": np.array(top_k, np.int64), "top_p": np.array(top_p, np.float32)}
    got = sess.run(None, feeds)
    want = block_sparse_verify(logits, tokens, parents, depths, uniforms, temperature, mode, top_k, top_p)
    np.testing.assert_array_equal(got[0], want[0])
    assert int(got[1]) == want[1] and int(got[2]) == want[2]


@pytest.mark.parametrize("kind", ["chain", "star", "deep"])
@pytest.mark.parametrize("mode,temperature", [(0, 0.0), (1, 1e-4), (1, 0.7), (1, 1.0), (1, 30.0), (1, 0.0)])
def test_random_trees(verify_session, kind: str, mode: int, temperature: float) -> None:  # type: ignore[no-untyped-def]
    # a seed from the case itself, the same in every run (hash() of a str is salted per process)
    rng = np.random.default_rng(zlib.crc32(f"{kind}/{mode}/{temperature}".encode()))
    for _ in range(25):
        n, vocab = int(rng.integers(1, 14)), int(rng.integers(2, 40))
        parents = _tree(kind, n, rng)
        logits = rng.normal(scale=2.0, size=(n, vocab))
        # make many children match so paths get long
        tokens = np.array([int(np.argmax(logits[max(p, 0)])) if rng.random() < 0.7 else int(rng.integers(vocab))
                           for p in parents])
        _check(verify_session, logits, tokens, parents, rng.random((n, 1)), temperature, mode)


@pytest.mark.parametrize("top_k,top_p", [(1, 1.0), (3, 1.0), (0, 0.5), (5, 0.9), (100, 0.99)])
def test_top_k_top_p(verify_session, top_k: int, top_p: float) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(top_k)
    for _ in range(20):
        n, vocab = 6, 20
        parents = _tree("deep", n, rng)
        logits = rng.normal(scale=2.0, size=(n, vocab))
        tokens = rng.integers(0, vocab, n)
        _check(verify_session, logits, tokens, parents, rng.random((n, 2)), 0.9, 1, top_k, top_p)


def test_adversarial_logits(verify_session) -> None:  # type: ignore[no-untyped-def]
    logits = np.array([
        [-np.inf, 3e38, 3e38, 0.0],  # tie at the argmax, huge values
        [-np.inf, -np.inf, -np.inf, -np.inf],
        [0.0, 0.0, 0.0, 0.0],
        [np.inf, 1.0, 1.0, 1.0],
    ], np.float32)
    parents = np.array([-1, 0, 1, 2])
    tokens = np.array([0, 1, 0, 0])
    for mode, temperature in ((0, 0.0), (1, 1e-6), (1, 1.0), (1, 50.0)):
        for u in (0.0, 0.3, 0.999999):
            _check(verify_session, logits, tokens, parents, np.full((4, 1), u), temperature, mode)


def test_duplicate_sibling_tokens_take_the_lowest_index(verify_session) -> None:  # type: ignore[no-untyped-def]
    logits = np.zeros((3, 5), np.float32)
    logits[0, 2] = 4.0
    tokens, parents = np.array([1, 2, 2]), np.array([-1, 0, 0])
    _check(verify_session, logits, tokens, parents, np.zeros((3, 1)), 0.0, 0)
