"""Token trees: the candidates a round drafts, and the subset the target verifies.

Node 0 is the root: the last committed token, fed to the target together with the drafts. A
node's children are its parent's draft candidates in the order they were proposed (by
probability for deterministic trees, in draw order for sampled ones). Selection keeps the best
nodes by path log-probability under two closure rules: a node needs its parent, and, for
sampled trees, its previous sibling — dropping a middle sibling would make the later ones'
without-replacement proposal probabilities wrong (DESIGN §4, rrs).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Candidate:
    token: int
    parent: int
    depth: int
    path_logprob: float
    logq: float  # log q~(token) at the parent: the draft's renormalised proposal probability
    children: list[int] = field(default_factory=list)
    draft_slot: int = -1  # index among this round's new draft KV slots, -1 if never forwarded


@dataclass
class DraftTree:
    """The selected tree in topological order (parents before children)."""

    tokens: np.ndarray
    parents: np.ndarray
    depths: np.ndarray
    path_logprob: np.ndarray
    draft_slot: np.ndarray
    source: np.ndarray  # candidate index of each node, to find its draft distribution
    selected: np.ndarray  # best-first selection index of each node (root 0): trees of smaller budgets are prefixes
    rank: np.ndarray  # each node's position among its parent's children (0 = proposed first)

    @property
    def size(self) -> int:
        return int(self.tokens.size)

    @property
    def max_depth(self) -> int:
        return int(self.depths.max())

    def mask(self, past: int, dtype: np.dtype, valid_past: np.ndarray | None = None) -> np.ndarray:
        """Additive tree mask [1, 1, n, past + n]: every valid past slot, ancestors and self."""
        n = self.size
        neg = np.finfo(dtype).min
        mask = np.full((1, 1, n, past + n), neg, dtype=dtype)
        if valid_past is None:
            mask[..., :past] = 0
        else:
            mask[0, 0, :, :past][:, valid_past] = 0
        visible = ancestor_matrix(self.parents)
        mask[0, 0, :, past:][visible] = 0
        return mask


def ancestor_matrix(parents: np.ndarray) -> np.ndarray:
    """visible[i, j] is True when j is i or an ancestor of i (parents precede children)."""
    n = parents.size
    visible = np.eye(n, dtype=bool)
    for node in range(1, n):
        visible[node] |= visible[parents[node]]
    return visible


class CandidatePool:
    """Every candidate a round has drafted, before selection."""

    def __init__(self, root_token: int) -> None:
        self.nodes: list[Candidate] = [Candidate(root_token, -1, 0, 0.0, 0.0)]

    def add_children(self, parent: int, tokens: np.ndarray, logq: np.ndarray) -> list[int]:
        base = self.nodes[parent]
        created = []
        for token, lq in zip(tokens.tolist(), logq.tolist(), strict=True):
            index = len(self.nodes)
            self.nodes.append(Candidate(int(token), parent, base.depth + 1, base.path_logprob + float(lq), float(lq)))
            base.children.append(index)
            created.append(index)
        return created

    def best(self, indices: list[int], count: int) -> list[int]:
        ranked = sorted(indices, key=lambda i: (-self.nodes[i].path_logprob, i))
        return ranked[:count]

    def select(self, budget: int, sibling_prefix: bool, chain: bool = False) -> DraftTree:
        """Best `budget` nodes (root included) by path log-prob under the closure rules.

        `chain` keeps one child per node (the first proposed): the tree is a single path, so
        every node's row in the verify call is its depth (the exact layout).
        """
        chosen = [0]
        heap: list[tuple[float, int]] = []

        def offer(index: int) -> None:
            heapq.heappush(heap, (-self.nodes[index].path_logprob, index))

        def offer_children(index: int) -> None:
            children = self.nodes[index].children
            for child in children[:1] if sibling_prefix or chain else children:
                offer(child)

        offer_children(0)
        while heap and len(chosen) < budget:
            _, index = heapq.heappop(heap)
            chosen.append(index)
            offer_children(index)
            if sibling_prefix and not chain:
                siblings = self.nodes[self.nodes[index].parent].children
                position = siblings.index(index)
                if position + 1 < len(siblings):
                    offer(siblings[position + 1])
        return self._as_tree(chosen)

    def _as_tree(self, chosen: list[int]) -> DraftTree:
        # Depth-major order keeps parents before children and siblings in proposal order.
        keys = {i: self._sibling_key(i) for i in chosen}
        order = sorted(chosen, key=lambda i: (self.nodes[i].depth, keys[i]))
        position = {cand: pos for pos, cand in enumerate(order)}
        selected = {cand: index for index, cand in enumerate(chosen)}
        nodes = [self.nodes[i] for i in order]
        return DraftTree(
            tokens=np.array([n.token for n in nodes], np.int64),
            parents=np.array([position[n.parent] if n.parent >= 0 else -1 for n in nodes], np.int64),
            depths=np.array([n.depth for n in nodes], np.int64),
            path_logprob=np.array([n.path_logprob for n in nodes], np.float64),
            draft_slot=np.array([n.draft_slot for n in nodes], np.int64),
            source=np.array(order, np.int64),
            selected=np.array([selected[i] for i in order], np.int64),
            rank=np.array([keys[i][-1] if keys[i] else 0 for i in order], np.int64),
        )

    def _sibling_key(self, index: int) -> tuple[int, ...]:
        """Proposal-order path from the root, so siblings keep the order they were drafted in."""
        key: list[int] = []
        while index > 0:
            parent = self.nodes[index].parent
            key.append(self.nodes[parent].children.index(index))
            index = parent
        return tuple(reversed(key))
