"""Batch invariance of a target graph: is a token's output the same however it shares a call?

Speculation is exact only if a token verified inside a round gets the logits it would get when
decoded alone. Kernels do not promise that: onnxruntime's MatMulNBits and GroupQueryAttention
take a different path for a single row than for several, and an attention row whose window holds
masked siblings re-associates its sums. Float32 weights only move the last bits, but int8
activation quantization (MatMulNBits accuracy level 4) turns such a bit into a different code,
and greedy outputs diverge. This module measures, on the graph itself:

- `single_row`: is a token decoded alone bit-identical to the same token in a call of several rows?
- `chain`: with every call at least two rows (a pad row for plain steps), are the rows of a chain
  bit-identical to the same tokens decoded one step at a time? This is the exact layout
  (DecodeConfig.exact_layout) and what makes speculative output provably equal to plain output;
- `tree`: the same for the nodes of a branching tree (rows separated by masked siblings).
"""

from __future__ import annotations

import numpy as np

from specdec.pipeline.engine.runner import Runner, causal, no_scratch, prefill
from specdec.pipeline.engine.tree import ancestor_matrix
from specdec.pipeline.records.reports import Invariance

_PROMPT = 24
_CHAIN = 8
_TREE_PARENTS = np.array([-1, 0, 0, 1, 2, 3, 3, 5], np.int64)


def _step(runner: Runner, token: int, pad: bool) -> np.ndarray:
    position = runner.length
    if pad:
        logits, _ = runner.forward(np.array([token, 0]), position + np.arange(2), no_scratch(2), np.eye(2, dtype=bool))
    else:
        logits, _ = runner.forward(np.array([token]), np.array([position]), no_scratch(1), causal(1))
    assert logits is not None
    runner.commit([0])
    row: np.ndarray = logits[0].copy()
    return row


def measure(runner: Runner, vocab: int, seed: int = 0) -> Invariance:
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, vocab, _PROMPT)
    chain = rng.integers(0, vocab, _CHAIN)

    def chain_logits() -> np.ndarray:
        prefill(runner, prompt)
        logits, _ = runner.forward(chain, _PROMPT + np.arange(_CHAIN), no_scratch(_CHAIN), causal(_CHAIN))
        assert logits is not None
        runner.commit([])
        return logits

    together = chain_logits()
    prefill(runner, prompt)
    padded = np.array([_step(runner, int(t), pad=True) for t in chain])
    prefill(runner, prompt)
    alone = _step(runner, int(chain[0]), pad=False)

    depths = np.zeros(_TREE_PARENTS.size, np.int64)
    for node in range(1, _TREE_PARENTS.size):
        depths[node] = depths[_TREE_PARENTS[node]] + 1
    tokens = rng.integers(0, vocab, _TREE_PARENTS.size)
    prefill(runner, prompt)
    tree, _ = runner.forward(tokens, _PROMPT + depths, no_scratch(tokens.size), ancestor_matrix(_TREE_PARENTS))
    assert tree is not None
    runner.commit([])
    leaf = _TREE_PARENTS.size - 1
    path = [leaf]
    while _TREE_PARENTS[path[-1]] >= 0:
        path.append(int(_TREE_PARENTS[path[-1]]))
    path.reverse()
    prefill(runner, prompt)
    stepped = np.array([_step(runner, int(tokens[node]), pad=True) for node in path])
    runner.reset()
    return Invariance(
        single_row=bool(np.array_equal(alone, padded[0])),
        chain=bool(np.array_equal(together, padded)),
        tree=bool(np.array_equal(tree[path], stepped)),
        max_tree_diff=float(np.max(np.abs(tree[path].astype(np.float64) - stepped))),
    )
