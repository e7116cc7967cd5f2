"""Numpy reference of BlockSparseVerify. Torch-free: the device runtime calls it directly.

The tree is given by parent indices (node 0 is the root: the last committed token, fed to the
target with the drafts). For each node the target's choice y is computed once — argmax
(`greedy`) or an inverse-CDF draw with the node's uniform (`match`) — and the accepted path is
the walk from the root that descends, at each node, into the lowest-index child whose token
equals y. No per-path copies of anything are made. `next_token` is y at the deepest accepted
node, so a round always emits `accepted_len` tokens.

`match` is exact sampling from the target for any tree (docs/design.md §4). `rrs` (recursive rejection
sampling over children drawn without replacement) needs the draft's distributions and stays on
the host: `verify_rrs`.
"""

from __future__ import annotations

import enum

import numpy as np

from specdec.custom_ops import numerics
from specdec.custom_ops.schema import OpSchema, Port


class Mode(enum.IntEnum):
    greedy = 0
    match = 1
    rrs = 2


MODES = {mode.name: mode for mode in Mode}

SCHEMA = OpSchema(
    name="BlockSparseVerify",
    inputs=(
        Port("logits", "float", ("n", "vocab")),
        Port("tree_tokens", "int64", ("n",)),
        Port("tree_parent", "int64", ("n",), "-1 for the root, node 0"),
        Port("tree_depth", "int64", ("n",)),
        Port("uniforms", "double", ("n", "r"), "U[0,1) per node; column 0 drives the match draw"),
        Port("temperature", "float", ()),
        Port("mode", "int64", (), "0 greedy, 1 match"),
        Port("top_k", "int64", (), "0 disables"),
        Port("top_p", "float", (), "1 disables"),
    ),
    outputs=(
        Port("accepted", "int64", ("n",), "node indices of the accepted path from the root, -1 padded"),
        Port("accepted_len", "int64", (), "number of accepted nodes including the root"),
        Port("next_token", "int64", (), "the target's token after the deepest accepted node"),
    ),
    attributes={},
)

_F32 = np.float32


def target_probs(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """The target's sampling distribution: temperature, then top-k, then top-p (as in HF generate).

    top-k keeps every logit >= the k-th largest (ties kept); top-p drops, in ascending order,
    the tokens whose cumulative probability stays <= 1 - top_p, always keeping the largest.
    """
    x = numerics.scale(logits, temperature)
    vocab = x.shape[-1]
    if 0 < top_k < vocab:
        kth = -np.partition(-x, top_k - 1, axis=-1)[:, top_k - 1 : top_k]
        x = np.where(x < kth, -np.inf, x).astype(_F32)
    if top_p < 1.0:
        order = np.argsort(x, axis=-1, kind="stable")
        ascending = np.take_along_axis(x, order, axis=-1)
        probs = numerics.softmax(ascending)
        # 1 - top_p in float32 arithmetic, exactly as the ONNX function computes it
        drop = np.cumsum(probs, axis=-1, dtype=_F32) <= _F32(1.0) - _F32(top_p)
        drop[:, -1] = False
        removed = np.zeros_like(drop)
        np.put_along_axis(removed, order, drop, axis=-1)
        x = np.where(removed, -np.inf, x).astype(_F32)
    return numerics.softmax(x)


def sample_token(probs: np.ndarray, uniform: float) -> int:
    """Inverse-CDF draw: the first token whose cumulative mass exceeds u * total.

    Strictly greater, so a zero-probability token is never drawn; the CDF is accumulated in
    float64 so the result does not depend on summation order at float32 resolution.
    """
    cdf = np.cumsum(np.asarray(probs, np.float64))
    threshold = float(uniform) * cdf[-1]
    index = int(np.searchsorted(cdf, threshold, side="right"))
    if index >= len(cdf):  # u * total rounded up to total: take the last token with mass
        index = int(np.flatnonzero(np.asarray(probs) > 0)[-1])
    return index


def node_choices(logits: np.ndarray, uniforms: np.ndarray, temperature: float, mode: int,
                 top_k: int, top_p: float) -> np.ndarray:
    """The target's token at every node: argmax (greedy, or any mode at temperature 0) or a draw."""
    if mode == Mode.greedy or temperature <= 0:
        greedy: np.ndarray = np.argmax(np.asarray(logits), axis=-1).astype(np.int64)
        return greedy
    probs = target_probs(logits, temperature, top_k, top_p)
    return np.array([sample_token(probs[i], uniforms[i, 0]) for i in range(len(probs))], np.int64)


def walk(tokens: np.ndarray, parents: np.ndarray, choice: np.ndarray) -> list[int]:
    """Accepted path: from the root, descend into the lowest-index child whose token is the choice."""
    path = [0]
    while True:
        node = path[-1]
        children = np.flatnonzero((parents == node) & (tokens == choice[node]))
        if children.size == 0:
            return path
        path.append(int(children[0]))


def block_sparse_verify(
    logits: np.ndarray,
    tree_tokens: np.ndarray,
    tree_parent: np.ndarray,
    tree_depth: np.ndarray,
    uniforms: np.ndarray,
    temperature: float,
    mode: int,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[np.ndarray, int, int]:
    if mode not in (Mode.greedy, Mode.match):
        raise ValueError(f"BlockSparseVerify handles greedy and match; mode {mode} runs on the host (verify_rrs)")
    tokens = np.asarray(tree_tokens, np.int64)
    parents = np.asarray(tree_parent, np.int64)
    choice = node_choices(logits, np.atleast_2d(uniforms), temperature, mode, top_k, top_p)
    path = walk(tokens, parents, choice)
    accepted = np.full(len(tokens), -1, np.int64)
    accepted[: len(path)] = path
    return accepted, len(path), int(choice[path[-1]])


def verify_rrs(
    logits: np.ndarray,
    tree_tokens: np.ndarray,
    tree_parent: np.ndarray,
    draft_ids: np.ndarray,
    draft_logprob: np.ndarray,
    uniforms: np.ndarray,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
    draft_rank: np.ndarray | None = None,
    point_mass: np.ndarray | None = None,
) -> tuple[np.ndarray, int, int]:
    """Recursive rejection sampling over siblings drawn without replacement (docs/design.md §4).

    `draft_ids[i], draft_logprob[i]` is the draft's distribution at node i from which node i's
    drafted children were drawn. At each node the children are tested in turn against the
    current residual p (the target's distribution at first); every test is a valid step of
    recursive rejection sampling, so the emitted token follows the target exactly:

    - drafted children, in draw order (`draft_rank`; default: tree order, every child drafted):
      child j is tested against q_j, the draft distribution with the earlier draws removed and
      renormalised: accept with min(1, p(x)/q_j(x)), else p <- norm(max(p - q_j, 0)). Only the
      unbroken prefix of draws 0, 1, 2, ... present in the tree is tested; a later draw alone
      has the wrong proposal distribution.
    - then the deterministic children (`point_mass`, e.g. prompt lookup), in tree order: the
      proposal is a point mass at x, so the rule becomes accept with p(x), else p <- p with x
      removed, renormalised. A token that was also drafted and rejected is tested again here:
      the residual may still hold mass at it.

    When every test fails (or a node has no children) the next token is drawn from the residual.
    `uniforms[i, j]` drives test j at node i; the column after the last test drives the draw.
    """
    tokens = np.asarray(tree_tokens, np.int64)
    parents = np.asarray(tree_parent, np.int64)
    probs = target_probs(logits, temperature, top_k, top_p).astype(np.float64)
    path = [0]
    while True:
        node = path[-1]
        p = probs[node].copy()
        q = np.zeros_like(p)
        valid = draft_ids[node] >= 0
        q[draft_ids[node][valid]] = np.exp(draft_logprob[node][valid].astype(np.float64))
        drafted, points = _test_order(np.flatnonzero(parents == node), draft_rank, point_mass)
        chosen = -1
        slot = 0
        for child in drafted:
            total = q.sum()
            if total <= 0:
                break
            q_j = q / total
            x = tokens[child]
            if uniforms[node, slot] * q_j[x] < p[x]:
                chosen = int(child)
                break
            slot += 1
            residual = np.maximum(p - q_j, 0.0)
            if residual.sum() > 0:  # p == q_j exactly would have accepted; guard rounding
                p = residual / residual.sum()
            q[x] = 0.0
        if chosen < 0:
            for child in points:
                x = tokens[child]
                if uniforms[node, slot] < p[x]:
                    chosen = int(child)
                    break
                slot += 1
                rest = p.sum() - p[x]
                if rest > 0:  # p(x) == 1 always accepts; guard rounding
                    p[x] = 0.0
                    p /= rest
        if chosen < 0:
            next_token = sample_token(p, uniforms[node, slot])
            accepted = np.full(len(tokens), -1, np.int64)
            accepted[: len(path)] = path
            return accepted, len(path), next_token
        path.append(chosen)


def rrs_tests(tree_parent: np.ndarray, draft_rank: np.ndarray | None = None,
              point_mass: np.ndarray | None = None) -> int:
    """Uniform columns verify_rrs may use at a node of this tree: its tests plus the residual draw."""
    parents = np.asarray(tree_parent, np.int64)
    children = parents[1:]
    if children.size == 0:
        return 1
    drafted = children if draft_rank is None else children[np.asarray(draft_rank)[1:] >= 0]
    counts = np.bincount(drafted, minlength=parents.size)
    if point_mass is not None:
        counts += np.bincount(children[np.asarray(point_mass, bool)[1:]], minlength=parents.size)
    return int(counts.max()) + 1


def _test_order(children: np.ndarray, draft_rank: np.ndarray | None,
                point_mass: np.ndarray | None) -> tuple[list[int], list[int]]:
    """(drafted children in draw order, the unbroken prefix only; point-mass children in tree order)."""
    if draft_rank is None:
        drafted = children.tolist()
    else:
        by_rank = {int(draft_rank[c]): int(c) for c in children if draft_rank[c] >= 0}
        drafted = []
        while len(drafted) in by_rank:
            drafted.append(by_rank[len(drafted)])
    points = [int(c) for c in children if point_mass is not None and point_mass[c]]
    return drafted, points
