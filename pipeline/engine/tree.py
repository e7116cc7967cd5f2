"""Token trees: the candidates a round drafts, and the subset the target verifies.

Node 0 is the root: the last committed token, fed to the target together with the drafts. A
node's children come from two proposers (engine/drafter.py): the draft model (`add_children`:
its candidates in the order proposed — by probability for deterministic trees, in draw order
for sampled ones) and prompt lookup (`graft`: chains copied from the context). A token both
propose under the same parent is one node with both origins.

Selection keeps the best nodes by score under closure rules. A node's score is the sum of its
path's edge weights, an edge weight being the best log-probability estimate either proposer
gives it: the draft's log q~ (its renormalised proposal probability) or lookup's log of the
running acceptance estimate (engine/lookup.py) — both estimate log P(accepted), so they rank
on one scale. Closure: a node needs its parent, and, for sampled trees, a draft-model child
needs its previous draft-model sibling — dropping a middle draw would make the later ones'
without-replacement proposal probabilities wrong (docs/design.md §4, rrs). Lookup proposals are
deterministic (point masses), so they need only their parent.

Selection is best-first, so it is prefix-consistent: the tree of budget n is the first n nodes
of the tree of any larger budget, and the tree restricted to depth <= D is that order filtered
by depth (the planner replays calibration rounds on this; tests/pipeline/engine/test_tree.py).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

MODEL = 1  # origin bits of a node: who proposed it
LOOKUP = 2


@dataclass(slots=True)
class Candidate:
    token: int
    parent: int
    depth: int
    path_logprob: float  # the selection score: the sum of the path's edge weights
    logq: float = -math.inf  # log q~(token) at the parent (the draft's proposal); -inf: not drafted
    lookup_logp: float = -math.inf  # lookup's log acceptance estimate; -inf: not proposed by lookup
    model_rank: int = -1  # position among the parent's draft-model children (draw order)
    lookup_cell: int = -1  # the acceptance-estimate cell of a lookup proposal (engine/lookup.py)
    children: list[int] = field(default_factory=list)
    model_children: list[int] = field(default_factory=list)
    draft_slot: int = -1  # index among this round's new draft KV slots, -1 if never forwarded
    # log of the path's probability under the draft's raw softmax, a lookup edge counting as certain:
    # what the confidence gate (DecodeConfig.draft_min_prob) compares; 0 where nobody measured it
    gate_logprob: float = 0.0

    @property
    def weight(self) -> float:
        return max(self.logq, self.lookup_logp)

    @property
    def origin(self) -> int:
        return (MODEL if self.model_rank >= 0 else 0) | (LOOKUP if self.lookup_cell >= 0 else 0)


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
    origin: np.ndarray  # MODEL | LOOKUP bits per node (root 0)
    draft_rank: np.ndarray  # position among the parent's draft-model children, -1 where the model did not draft it
    lookup_cell: np.ndarray  # acceptance-estimate cell of lookup proposals, -1 elsewhere
    gate_logprob: np.ndarray  # Candidate.gate_logprob per node

    @property
    def size(self) -> int:
        return int(self.tokens.size)

    @property
    def max_depth(self) -> int:
        return int(self.depths.max())

    @classmethod
    def root_only(cls, token: int, draft_slot: int = -1) -> DraftTree:
        """The tree of a round that proposed nothing: the target decodes the root alone.

        Most rounds of prompt lookup look like this, so the constant arrays are shared (read-only).
        """
        return cls(tokens=np.array([token], np.int64), parents=_NONE, depths=_ZERO, path_logprob=_ZERO_F,
                   draft_slot=_NONE if draft_slot < 0 else np.array([draft_slot], np.int64), source=_ZERO,
                   selected=_ZERO, rank=_ZERO, origin=_ZERO, draft_rank=_NONE, lookup_cell=_NONE, gate_logprob=_ZERO_F)

    @property
    def point_mass(self) -> np.ndarray:
        """Nodes proposed deterministically (lookup): verify_rrs tests them as point masses."""
        result: np.ndarray = (self.origin & LOOKUP) != 0
        return result

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


def _constant(value: float, dtype: type) -> np.ndarray:
    array: np.ndarray = np.full(1, value, dtype)
    array.setflags(write=False)
    return array


_ZERO, _NONE, _ZERO_F = _constant(0, np.int64), _constant(-1, np.int64), _constant(0.0, np.float64)


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

    def add_children(self, parent: int, tokens: np.ndarray, logq: np.ndarray,
                     raw_logprob: np.ndarray | None = None) -> list[int]:
        """The draft model's candidates under `parent`, in proposal order; returns their node indices.

        A token lookup already proposed there becomes that node's model role (no duplicate node).
        `raw_logprob`: each candidate's log-probability under the draft's raw softmax (the gate's measure).
        """
        base = self.nodes[parent]
        existing = {self.nodes[c].token: c for c in base.children} if base.children else None
        created = []
        raws = raw_logprob.tolist() if raw_logprob is not None else [0.0] * len(tokens)
        for token, lq, raw in zip(tokens.tolist(), logq.tolist(), raws, strict=True):
            rank = len(base.model_children)
            index = existing.get(int(token), -1) if existing else -1
            if index < 0:
                index = len(self.nodes)
                self.nodes.append(Candidate(int(token), parent, base.depth + 1, base.path_logprob + float(lq),
                                            float(lq), model_rank=rank, gate_logprob=base.gate_logprob + raw))
                base.children.append(index)
            else:
                node = self.nodes[index]
                before = node.weight
                node.logq, node.model_rank = float(lq), rank
                self._reweight(index, node.weight - before)
            base.model_children.append(index)
            created.append(index)
        return created

    def graft(self, parent: int, tokens: list[int], logps: list[float], cells: list[int]) -> None:
        """A lookup chain below `parent`: reuse the child with the same token where there is one."""
        at = parent
        for token, logp, cell in zip(tokens, logps, cells, strict=True):
            base = self.nodes[at]
            child = -1
            for index in base.children:
                if self.nodes[index].token == token:
                    child = index
                    break
            if child < 0:
                child = len(self.nodes)
                self.nodes.append(Candidate(token, at, base.depth + 1, base.path_logprob + logp, lookup_logp=logp,
                                            lookup_cell=cell, gate_logprob=base.gate_logprob))
                base.children.append(child)
            else:
                node = self.nodes[child]
                if logp > node.lookup_logp:
                    before = node.weight
                    node.lookup_logp, node.lookup_cell = logp, cell
                    self._reweight(child, node.weight - before)
            at = child

    def _reweight(self, index: int, delta: float) -> None:
        """An edge weight rose by `delta`: the node's subtree scores rise with it."""
        if delta <= 0:
            return
        stack = [index]
        while stack:
            node = self.nodes[stack.pop()]
            node.path_logprob += delta
            stack.extend(node.children)

    def path(self, index: int) -> list[int]:
        """The tokens from the root's child down to node `index` (the root excluded)."""
        tokens: list[int] = []
        while index > 0:
            node = self.nodes[index]
            tokens.append(node.token)
            index = node.parent
        return tokens[::-1]

    def best(self, indices: list[int], count: int) -> list[int]:
        ranked = sorted(indices, key=lambda i: (-self.nodes[i].path_logprob, i))
        return ranked[:count]

    def select(self, budget: int, sibling_prefix: bool, chain: bool = False) -> DraftTree:
        """Best `budget` nodes (root included) by score under the closure rules.

        `chain` keeps one child per node (the best-scoring one the closure allows: the draft's
        first candidate or a lookup proposal): the tree is a single path, so every node's row
        in the verify call is its depth (the exact layout).
        """
        nodes = self.nodes
        if not nodes[0].children or budget < 2:  # nothing proposed (a lookup miss): skip the machinery
            return self._as_tree([0])
        chosen = [0]
        taken = {0}
        offered = {0}
        heap: list[tuple[float, int]] = []

        def offer(index: int) -> None:
            if index not in offered:
                offered.add(index)
                heapq.heappush(heap, (-nodes[index].path_logprob, index))

        def offer_children(index: int) -> None:
            node = nodes[index]
            if not node.children:
                return
            if not (sibling_prefix or chain):
                options = node.children
            else:  # the first draw, and every lookup proposal (a point mass needs no earlier sibling)
                options = node.model_children[:1]
                options = options + [c for c in node.children if nodes[c].lookup_cell >= 0 and c not in options]
            if chain:
                options = [max(options, key=lambda c: nodes[c].path_logprob)]
            for child in options:
                offer(child)

        offer_children(0)
        while heap and len(chosen) < budget:
            _, index = heapq.heappop(heap)
            chosen.append(index)
            taken.add(index)
            offer_children(index)
            if sibling_prefix and not chain and nodes[index].model_rank >= 0:
                # the next draw becomes eligible once every earlier draw is in the tree
                siblings = nodes[nodes[index].parent].model_children
                prefix = 0
                while prefix < len(siblings) and siblings[prefix] in taken:
                    prefix += 1
                if prefix < len(siblings):
                    offer(siblings[prefix])
        return self._as_tree(chosen)

    def _as_tree(self, chosen: list[int]) -> DraftTree:
        nodes = self.nodes
        if len(chosen) == 1:
            return DraftTree.root_only(nodes[0].token, nodes[0].draft_slot)
        # Proposal-order path from the root (parents are chosen before their children), so
        # depth-major order keeps parents before children and siblings in proposal order.
        keys: dict[int, tuple[int, ...]] = {0: ()}
        for index in chosen[1:]:
            parent = nodes[index].parent
            keys[index] = (*keys[parent], nodes[parent].children.index(index))
        order = sorted(chosen, key=lambda i: (nodes[i].depth, keys[i]))
        position = {cand: pos for pos, cand in enumerate(order)}
        position[-1] = -1
        selected = {cand: index for index, cand in enumerate(chosen)}
        # one array for every integer column (a round builds this tree, so allocations count)
        columns = np.array([(n.token, position[n.parent], n.depth, n.draft_slot, i, selected[i],
                             keys[i][-1] if keys[i] else 0, n.origin if i else 0, n.model_rank, n.lookup_cell)
                            for i, n in ((i, nodes[i]) for i in order)], np.int64).T.copy()
        tokens, parents, depths, draft_slot, source, chosen_at, rank, origin, draft_rank, lookup_cell = columns
        return DraftTree(tokens=tokens, parents=parents, depths=depths,
                         path_logprob=np.array([nodes[i].path_logprob for i in order], np.float64),
                         gate_logprob=np.array([nodes[i].gate_logprob for i in order], np.float64),
                         draft_slot=draft_slot, source=source, selected=chosen_at, rank=rank, origin=origin,
                         draft_rank=draft_rank, lookup_cell=lookup_cell)
