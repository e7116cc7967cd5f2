"""Prompt lookup: draft by copying from the context, alone or grafted into the draft model's tree.

Prompt-lookup decoding (Hugging Face `prompt_lookup_num_tokens`, llama.cpp's lookup decoding,
vLLM's n-gram speculator) proposes what followed earlier occurrences of the context's last n
tokens. Here:

- `NgramIndex` maps every n-gram of the context (n_min <= n <= n_max) to the tokens that
  followed it, with a count and the position of the latest occurrence. It is extended token by
  token as the reply grows, so a round's lookup is a few dict reads and a slice — no rescan of
  the context, no array that grows with it. Queries match the longest suffix first; the
  continuations of a match are ranked by frequency among its most recent continuations.
- Each continuation becomes a chain below the root: the tokens that followed the match, copied
  with overlap (LZ77-style) when the match runs into the end of the context, so a repeating
  pattern continues itself.
- `LookupAcceptance` scores chain nodes for best-first selection: the running estimate of
  P(node accepted | its parent accepted) per (branch rank, position along the chain), a Beta
  posterior mean updated from every round's verification. Its log sits on the same scale as a
  draft node's log q~ — both estimate the log-probability the target accepts the node — so a
  merged tree's selection ranks model and lookup nodes against each other directly (tree.py).
  The estimate restarts with every reply so a seeded reply is reproducible on its own.
"""

from __future__ import annotations

import math
from itertools import islice

import numpy as np

from specdec.pipeline.engine.drafter import DraftResult, RoundPlan, no_distributions
from specdec.pipeline.engine.model_drafter import ModelDrafter
from specdec.pipeline.engine.processors.base import Constraints
from specdec.pipeline.engine.rng import Randomness
from specdec.pipeline.engine.stats import LOOKUP, PRUNE, RoundStats, StageClock
from specdec.pipeline.engine.tree import CandidatePool, DraftTree
from specdec.pipeline.records.decode import DecodeConfig, VerifyMode

_RECENT = 8  # continuations of a match considered: its most recent ones, ranked by count
# Lookup nodes whose estimated path acceptance falls below this are not proposed: on the demo
# pair a tree node costs about a tenth of a plain step to verify on a CPU, and gains a token
# only when accepted. The draft model's tree is pruned likewise (DynamicTreePrune).
MIN_PATH_PROB = 0.1
_MIN_PATH_LOGP = math.log(MIN_PATH_PROB)


class NgramIndex:
    """n-gram -> {next token: [count, end of the latest occurrence]} over a growing token list."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self.table: dict[tuple[int, ...], dict[int, list[int]]] = {}

    def reset(self, tokens: list[int]) -> None:
        """Index a new context (a prompt): one pass per n over C-built n-gram tuples."""
        history = self.tokens = [int(t) for t in tokens]
        table: dict[tuple[int, ...], dict[int, list[int]]] = {}
        self.table = table
        length = len(history)
        for n in range(self.min_n, min(self.max_n, length - 1) + 1):
            # the n-grams that have a next token
            keys = zip(*(history[i: length - n + i] for i in range(n)), strict=True)
            for end, (key, token) in enumerate(zip(keys, history[n:], strict=True), start=n - 1):
                nexts = table.get(key)
                if nexts is None:
                    table[key] = {token: [1, end]}
                    continue
                seen = nexts.pop(token, None)
                if seen is None:
                    nexts[token] = [1, end]
                else:
                    seen[0] += 1
                    seen[1] = end
                    nexts[token] = seen

    def extend(self, tokens: list[int]) -> None:
        """Append tokens; each indexes the n-grams that end just before it (it is their continuation)."""
        history, table, low, high = self.tokens, self.table, self.min_n, self.max_n
        tail = tuple(history[-high:])  # the last max_n tokens: every key is a suffix of it
        for token in tokens:
            end = len(history) - 1
            for n in range(low, min(high, end + 1) + 1):
                key = tail[-n:]
                nexts = table.get(key)
                if nexts is None:
                    table[key] = {token: [1, end]}
                    continue
                seen = nexts.pop(token, None)  # re-inserted last: dict order is recency order
                if seen is None:
                    nexts[token] = [1, end]
                else:
                    seen[0] += 1
                    seen[1] = end
                    nexts[token] = seen
            history.append(token)
            tail = (*tail[1 - high:], token) if high > 1 else (token,)

    def propose(self, depth: int, branches: int) -> list[tuple[int, list[int]]]:
        """Up to `branches` (match length, chain of `depth` tokens) continuing the context, best first.

        The longest matching suffix gives the first chains; shorter suffixes add continuations
        not seen yet. Within a match: most frequent first among its `_RECENT` latest, then latest.
        """
        history = self.tokens
        length = len(history)
        chains: list[tuple[int, list[int]]] = []
        seen: set[int] = set()
        for n in range(min(self.max_n, length), self.min_n - 1, -1):
            nexts = self.table.get(tuple(history[length - n:]))
            if not nexts:
                continue
            recent = list(islice(reversed(nexts.items()), _RECENT))
            recent.sort(key=lambda item: -item[1][0])  # stable: equal counts stay latest first
            for token, (_count, end) in recent:
                if token in seen:
                    continue
                seen.add(token)
                chains.append((n, self._chain(end + 1, depth)))
                if len(chains) >= branches:
                    return chains
        return chains

    def _chain(self, start: int, depth: int) -> list[int]:
        history = self.tokens
        length = len(history)
        chain = history[start: start + depth]
        while len(chain) < depth:  # past the context's end the copy continues from itself
            chain.append(chain[start + len(chain) - length])
        return chain


class LookupAcceptance:
    """Running P(accepted | parent accepted) of lookup nodes, per cell (match length n, branch rank
    0 / other, position along the chain): a Beta posterior mean, restarted every reply.

    The priors come from greedy replies of the demo pair (16 held-out prompts, 64 tokens): the
    first copied token was the target's 21 % of the time after a 1-token match, 37 % after 2,
    70 % after 3 and 75 % or more after 4; once a copy is accepted the next token follows 40-90 %
    of the time; a second-ranked continuation 4-10 %.
    """

    POSITIONS = 8  # positions beyond share the last cell
    RANKS = 2  # the best branch, the others
    STRENGTH = 3.0  # prior weight, in observations

    def __init__(self, max_n: int) -> None:
        self.max_n = max_n
        self.accepted: list[float] = []
        self.tested: list[float] = []
        self.logp: list[float] = []  # log of the posterior mean per cell: a lookup node's edge weight
        self.reset()

    @staticmethod
    def prior(n: int, rank: int, position: int) -> float:
        if rank > 0:
            return 0.1 if position == 0 else 0.5
        if position == 0:
            return (0.25, 0.4, 0.6)[n - 1] if n <= 3 else 0.7
        return 0.5 if n == 1 else 0.75

    def reset(self) -> None:
        priors = [self.prior(n, rank, position) for n in range(1, self.max_n + 1) for rank in range(self.RANKS)
                  for position in range(self.POSITIONS)]
        self.accepted = [p * self.STRENGTH for p in priors]
        self.tested = [self.STRENGTH] * len(priors)
        self.logp = [math.log(p) for p in priors]

    def cells(self, n: int, rank: int, length: int) -> list[int]:
        """The cells of a chain of `length` tokens from a match of `n` tokens, branch `rank`."""
        base = ((n - 1) * self.RANKS + min(rank, self.RANKS - 1)) * self.POSITIONS
        last = base + self.POSITIONS - 1
        return [base + position if position < self.POSITIONS else last for position in range(length)]

    def observe(self, tree: DraftTree, path: list[int]) -> None:
        """Every lookup node whose parent was accepted was tested; it passed if it is on the path."""
        on_path = set(path)
        parents = tree.parents
        for node, cell in enumerate(tree.lookup_cell.tolist()):
            if cell >= 0 and int(parents[node]) in on_path:
                self.tested[cell] += 1
                self.accepted[cell] += node in on_path
                self.logp[cell] = math.log(self.accepted[cell] / self.tested[cell])


class LookupDrafter:
    """Prompt lookup alone: chains copied from the context, no model call."""

    name = "lookup"
    needs_features = False

    def __init__(self, min_n: int, max_n: int) -> None:
        self.index = NgramIndex(min_n, max_n)
        self.acceptance = LookupAcceptance(max_n)
        self.constraints: Constraints | None = None

    def constrain(self, constraints: Constraints | None) -> None:
        self.constraints = constraints

    @classmethod
    def from_config(cls, config: DecodeConfig) -> LookupDrafter:
        return cls(config.lookup_min_ngram, config.lookup_max_ngram)

    def reset(self, prompt: list[int], first: int, features: np.ndarray | None = None) -> None:
        self.index.reset([*prompt, first])
        self.acceptance.reset()

    def fit(self, plan: RoundPlan) -> RoundPlan:
        return plan

    def graft(self, pool: CandidatePool, plan: RoundPlan) -> None:
        """Lookup chains below the pool's root (the last context token), up to `width` of them,
        each cut where its estimated path acceptance falls below MIN_PATH_PROB."""
        self.graft_chains(pool, self.index.propose(plan.depth, plan.width))

    def graft_chains(self, pool: CandidatePool, chains: list[tuple[int, list[int]]]) -> None:
        logp = self.acceptance.logp
        for rank, (n, chain) in enumerate(chains):
            if self.constraints is not None:  # a chain is cut where it leaves the constraints
                chain = chain[: self.constraints.compliant_prefix(chain)]
                if not chain:
                    continue
            cells = self.acceptance.cells(n, rank, len(chain))
            weights = []
            path = 0.0
            for cell in cells:
                path += logp[cell]
                if path < _MIN_PATH_LOGP:
                    break
                weights.append(logp[cell])
            if weights:
                pool.graft(0, chain[: len(weights)], weights, cells[: len(weights)])

    def draft(self, root: int, root_position: int, plan: RoundPlan, config: DecodeConfig, rand: Randomness,
              round_key: int, stats: RoundStats) -> DraftResult:
        clock = StageClock(stats)
        with clock(LOOKUP):
            chains = self.index.propose(plan.depth, plan.width)
            if not chains:  # no match: most rounds of text that does not repeat itself
                tree = DraftTree.root_only(root)
                return DraftResult(tree, *no_distributions(1))
            pool = CandidatePool(root)
            self.graft_chains(pool, chains)
        with clock(PRUNE):  # the final selection, as with the draft model (tuning reads it there)
            tree = pool.select(plan.budget, sibling_prefix=config.effective_mode is VerifyMode.rrs,
                               chain=config.exact_layout)
        return DraftResult(tree, *no_distributions(tree.size))

    def commit(self, result: DraftResult, path: list[int], emitted: list[int], stats: RoundStats,
               features: np.ndarray | None = None) -> None:
        with StageClock(stats)(LOOKUP):
            if result.tree.size > 1:
                self.acceptance.observe(result.tree, path)
            self.index.extend(emitted)

    def skip(self, root: int, emitted: list[int], stats: RoundStats, features: np.ndarray | None = None) -> None:
        with StageClock(stats)(LOOKUP):
            self.index.extend(emitted)


class ModelLookupDrafter:
    """Lookup chains grafted into the draft model's tree, competing for the same node budget.

    The chains are grafted first, so the model's candidates merge into them (one node, both
    origins) and its early stop already counts them; the model never expands lookup-only nodes.
    """

    name = "model+lookup"

    def __init__(self, model: ModelDrafter, lookup: LookupDrafter) -> None:
        self.model = model
        self.lookup = lookup
        self.needs_features = model.needs_features

    def reset(self, prompt: list[int], first: int, features: np.ndarray | None = None) -> None:
        self.model.reset(prompt, first, features)
        self.lookup.reset(prompt, first)

    def fit(self, plan: RoundPlan) -> RoundPlan:
        return self.model.fit(plan)

    def constrain(self, constraints: Constraints | None) -> None:
        self.model.constrain(constraints)
        self.lookup.constrain(constraints)

    def draft(self, root: int, root_position: int, plan: RoundPlan, config: DecodeConfig, rand: Randomness,
              round_key: int, stats: RoundStats) -> DraftResult:
        with StageClock(stats)(LOOKUP):
            pool = CandidatePool(root)
            self.lookup.graft(pool, plan)
        return self.model.draft(root, root_position, plan, config, rand, round_key, stats, pool=pool)

    def commit(self, result: DraftResult, path: list[int], emitted: list[int], stats: RoundStats,
               features: np.ndarray | None = None) -> None:
        self.model.commit(result, path, emitted, stats, features)
        self.lookup.commit(result, path, emitted, stats)

    def skip(self, root: int, emitted: list[int], stats: RoundStats, features: np.ndarray | None = None) -> None:
        self.model.skip(root, emitted, stats, features)
        self.lookup.skip(root, emitted, stats)
