"""The draft-graph drafter: one draft forward per level, DynamicTreePrune, best-first selection.

The draft cache holds every committed token except `pending` ones (accepted tokens the draft
never ran: at most the last of a round's path, or tokens decoded plainly). A round feeds
`pending + [root]` at level 0, then each level's frontier, each node seeing the committed
cache, the pending tokens and its own ancestors among the round's scratch slots.

A feature draft (pipeline/draft/feature_model.py: `features`) is the same expansion with one more
input per row, the feature: a row at position t reads the target's feature of position t - 1.
Rows the draft feeds at level 0 (pending tokens and the root) are committed tokens, whose
features the target computed; a drafted node's children read the row of their parent's
`hidden_out`, the draft's own guess of that feature. After verification only the level-0 rows
stay in the draft cache: every accepted token becomes pending, to be fed again next round with
the target's feature, so the cache of committed positions is always made of target features
(what the draft was trained on). Rejected rows leave with their KV, as for a model draft.

The confidence gate (`DecodeConfig.draft_gate`) drops a candidate whose path probability under
the draft's raw softmax is below it: the call then also returns the logits, whose log-sum-exp
gives each candidate's raw log-probability (DynamicTreePrune's are renormalised over the kept
candidates, so a lone kept candidate reads 1 whatever the draft thought of it). A dropped node is
never verified and never drafted from, so a doubtful round costs one draft call instead of
`depth`; a round whose first candidate is dropped decodes the root alone.

A reduced draft vocabulary (`vocab_map`, V' target ids) maps DynamicTreePrune's candidates, draft
rows, to target ids right after the op; nothing downstream sees a draft row. Tokens outside the
vocabulary are never proposed, so their proposal probability is 0, which match and rrs verify
exactly (docs/design.md §4).
"""

from __future__ import annotations

import math

import numpy as np

from specdec.custom_ops.dynamic_tree_prune import dynamic_tree_prune
from specdec.pipeline.engine.drafter import DraftResult, RoundPlan
from specdec.pipeline.engine.graph import HIDDEN_OUT, HIDDEN_STATES
from specdec.pipeline.engine.processors.base import Constraints
from specdec.pipeline.engine.rng import Randomness, Stream
from specdec.pipeline.engine.runner import Runner, causal
from specdec.pipeline.engine.stats import COMMIT, DRAFT, PROCESS, PRUNE, RoundStats, StageClock
from specdec.pipeline.engine.tree import CandidatePool
from specdec.pipeline.errors import GenerationError
from specdec.pipeline.records.decode import DecodeConfig, VerifyMode

_LEVEL_STRIDE = 64  # draft-stream index = round start * stride + level


def restrict(
    ids: np.ndarray, logprob: np.ndarray, vocab: int, top_k: int, top_p: float
) -> tuple[np.ndarray, np.ndarray]:
    """Apply the user's top-k / top-p to draft candidates and drop ids the target lacks.

    Works on DynamicTreePrune's small outputs, so it is the same whether the op ran on the host
    or inside the graph. The result is renormalised: it is the proposal distribution q.
    """
    ids = ids.copy()
    ids[ids >= vocab] = -1
    if top_k > 0:
        ids[:, top_k:] = -1
    valid = ids >= 0
    logprob = np.where(valid, logprob.astype(np.float64), -np.inf)
    if top_p < 1.0:
        probs = np.exp(logprob - np.logaddexp.reduce(logprob, axis=-1, keepdims=True))
        before = np.cumsum(probs, axis=-1) - probs  # mass of the better candidates
        valid &= before < top_p
        ids[~valid] = -1
        logprob = np.where(valid, logprob, -np.inf)
    alive = valid.any(axis=-1, keepdims=True)  # rows whose every candidate was out of vocabulary stay empty
    norm = np.where(alive, np.logaddexp.reduce(np.where(alive, logprob, 0.0), axis=-1, keepdims=True), 0.0)
    return ids, np.where(valid, logprob - norm, -np.inf)


def raw_logprob(logits: np.ndarray, ids: np.ndarray, temperature: float) -> np.ndarray:
    """log softmax(logits / T) at each candidate id (draft rows, -1: none -> -inf), in float64."""
    scaled = logits.astype(np.float64) / temperature
    peak = scaled.max(axis=-1, keepdims=True)
    norm = peak + np.log(np.exp(scaled - peak).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(scaled, np.maximum(ids, 0), axis=-1) - norm
    return np.where(ids >= 0, picked, -np.inf)


class ModelDrafter:
    """The bundle's draft graph as a drafter (engine/drafter.py's interface): a draft model, or with
    `features` a feature draft; `vocab_map` its reduced vocabulary (None: the target's)."""

    name = "model"

    def __init__(self, runner: Runner, target_vocab: int, vocab_map: np.ndarray | None = None,
                 features: bool = False) -> None:
        self.runner = runner
        self.target_vocab = target_vocab
        self.vocab_map = vocab_map
        self.needs_features = features
        self.pending: list[int] = []
        # feature drafts: the target's feature of the position before each pending token, and before the root
        self.pending_features: list[np.ndarray] = []
        self.root_feature: np.ndarray | None = None
        self.beta_base: float | None = None  # this round's plan override
        self.constraints: Constraints | None = None  # the reply's logits processors (engine/processors/)

    def constrain(self, constraints: Constraints | None) -> None:
        self.constraints = constraints

    def reset(self, prompt: list[int], first: int = -1, features: np.ndarray | None = None) -> None:
        # The draft's prefill happens in the first round's level 0, saving a call; `first` is
        # that round's root, fed then.
        self.runner.reset()
        self.pending = list(prompt)
        if self.needs_features:
            rows = self._features(features, len(prompt))
            # position 0 reads zeros (nothing precedes it); the root reads the prompt's last feature
            self.pending_features = [np.zeros_like(rows[0]), *rows[:-1]]
            self.root_feature = rows[-1]

    def fit(self, plan: RoundPlan) -> RoundPlan:
        # the draft feeds pending + root, then at most `width` nodes per further level
        room = self.runner.max_context - self.runner.length - len(self.pending) - 1
        # a window policy's static slots hold the round's scratch rows beside the window
        round_room = getattr(self.runner, "round_room", None)
        if round_room is not None:
            room = min(room, round_room(len(self.pending) + 1))
        depth = min(plan.depth, 1 + room // max(plan.width, 1)) if room >= 0 else 0
        return RoundPlan(plan.budget, depth, plan.width, plan.beta_base)

    def skip(self, root: int, emitted: list[int], stats: RoundStats, features: np.ndarray | None = None) -> None:
        # Keep the draft in step without running it: the fed token joins its pending list.
        self.pending.append(root)
        if self.needs_features:
            assert self.root_feature is not None
            self.pending_features.append(self.root_feature)
            self.root_feature = self._features(features, 1)[0]

    def _features(self, features: np.ndarray | None, rows: int) -> np.ndarray:
        if features is None or features.shape[0] != rows:
            raise GenerationError(f"the feature draft needs the target's features of {rows} committed rows, got "
                                  f"{'none' if features is None else features.shape[0]}",
                                  "report this with SPECDEC_DEBUG=1 output")
        return features

    def _forward_candidates(
        self, tokens: np.ndarray, positions: np.ndarray, scratch_visible: np.ndarray, new_visible: np.ndarray,
        rows: slice, config: DecodeConfig, stats: RoundStats, features: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """One draft forward and DynamicTreePrune on `rows` (in the graph when surgery put it there):
        the candidates as target ids, their log-probabilities, a feature draft's `hidden_out` rows
        of the call (None for a draft model), and with the gate on the candidates' raw
        log-probabilities (else None)."""
        clock = StageClock(stats)
        p = config.prune
        beta = p.beta_base if self.beta_base is None else self.beta_base
        scalars = {"temperature": config.draft_temperature, "entropy_low": p.entropy_low,
                   "entropy_high": p.entropy_high, "beta_base": beta, "rho_min": p.rho_min, "rho_max": p.rho_max}
        feeds = {HIDDEN_STATES: features[None]} if features is not None else {}
        hidden_out = (HIDDEN_OUT,) if features is not None else ()
        gated = config.draft_gate > 0
        with clock(DRAFT):
            if self.runner.has_prune:
                logits, extras = self.runner.forward(
                    tokens, positions, scratch_visible, new_visible,
                    extra_inputs={**{k: np.array(v, np.float32) for k, v in scalars.items()}, **feeds},
                    extra_outputs=("cand_ids", "cand_logprob", *hidden_out), with_logits=gated,
                )
                ids, logprob = extras["cand_ids"][rows], extras["cand_logprob"][rows]
            else:
                logits, extras = self.runner.forward(tokens, positions, scratch_visible, new_visible,
                                                     extra_inputs=feeds or None, extra_outputs=hidden_out)
        stats.draft_calls += 1
        stats.bytes_out += self.runner.last_bytes_out
        hidden = extras[HIDDEN_OUT].reshape(len(tokens), -1) if features is not None else None
        with clock(PRUNE):
            if not self.runner.has_prune:
                assert logits is not None
                ids, logprob, _keep, _entropy = dynamic_tree_prune(logits[rows], max_k=p.max_k, **scalars)
            raw = None
            if gated:
                assert logits is not None
                raw = raw_logprob(logits[rows], ids, config.draft_temperature)
            if self.vocab_map is not None:  # draft rows -> target ids (the op ranks the draft's own rows)
                ids = np.where(ids >= 0, self.vocab_map[np.maximum(ids, 0)], -1)
            ids, logprob = restrict(ids, logprob, self.target_vocab, config.top_k, config.top_p)
        return ids, logprob, hidden, raw

    def draft(self, root: int, root_position: int, plan: RoundPlan, config: DecodeConfig,
              rand: Randomness, round_key: int, stats: RoundStats, pool: CandidatePool | None = None
              ) -> DraftResult:
        """Expand the tree level by level, into `pool` when given (lookup chains grafted already)."""
        clock = StageClock(stats)
        self.beta_base = plan.beta_base
        sampled = config.effective_mode is VerifyMode.rrs
        pool = pool if pool is not None else CandidatePool(root)
        feed = [*self.pending, root]
        positions = np.arange(root_position - len(self.pending), root_position + 1)
        features = None
        if self.needs_features:
            assert self.root_feature is not None
            features = np.stack([*self.pending_features, self.root_feature])
        ids, logprob, hidden, raw = self._forward_candidates(
            np.array(feed), positions, np.zeros((len(feed), 0), bool), causal(len(feed)), slice(-1, None), config,
            stats, features,
        )
        min_logprob = math.log(config.draft_gate) if config.draft_gate > 0 else -math.inf
        pool.nodes[0].draft_slot = len(feed) - 1
        # a feature draft's hidden_out of each node it ran: the feature its children read
        node_hidden: dict[int, np.ndarray] = {0: hidden[-1]} if hidden is not None else {}
        dists: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        frontier = [0]
        for level in range(plan.depth):
            if self.constraints is not None:  # proposals comply with the target's constraints
                with clock(PROCESS):
                    ids, logprob = self._constrain(pool, frontier, ids, logprob)
            with clock(PRUNE):
                created: list[int] = []
                gumbel = self._gumbel(rand, round_key, level, ids.shape) if sampled else None
                for row, node in enumerate(frontier):
                    dists[node] = (ids[row], logprob[row])
                    proposable = ids[row] >= 0
                    if raw is not None:  # the confidence gate (never with gumbel: rrs turns it off)
                        proposable &= pool.nodes[node].gate_logprob + raw[row] >= min_logprob
                    order = np.flatnonzero(proposable)
                    if gumbel is not None:  # draws without replacement, in draw order
                        order = order[np.argsort(-(logprob[row][order] + gumbel[row][order]), kind="stable")]
                    created += pool.add_children(node, ids[row][order], logprob[row][order],
                                                 raw[row][order] if raw is not None else None)
                frontier = pool.best(created, plan.width)
            if level + 1 == plan.depth or not frontier or self._cannot_improve(pool, created, plan.budget,
                                                                               config.exact_layout, level):
                break
            slots = self.runner.scratch
            tokens = np.array([pool.nodes[i].token for i in frontier])
            positions = np.array([root_position + pool.nodes[i].depth for i in frontier])
            features = (np.stack([node_hidden[pool.nodes[i].parent] for i in frontier]) if self.needs_features
                        else None)
            ids, logprob, hidden, raw = self._forward_candidates(
                tokens, positions, self._scratch_visibility(pool, frontier, slots), np.eye(len(frontier), dtype=bool),
                slice(None), config, stats, features,
            )
            for offset, node in enumerate(frontier):
                pool.nodes[node].draft_slot = slots + offset
                if hidden is not None:
                    node_hidden[node] = hidden[offset]
        with clock(PRUNE):
            tree = pool.select(plan.budget, sibling_prefix=sampled, chain=config.exact_layout)
            width = ids.shape[1]
            dist_ids = np.full((tree.size, width), -1, np.int64)
            dist_logprob = np.full((tree.size, width), -np.inf)
            for position, candidate in enumerate(tree.source.tolist()):
                if candidate in dists:
                    dist_ids[position], dist_logprob[position] = dists[candidate]
        return DraftResult(tree, dist_ids, dist_logprob, slots_before_tree=len(feed))

    def _constrain(self, pool: CandidatePool, frontier: list[int], ids: np.ndarray, logprob: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Each frontier node's candidates restricted to what the constraints allow after its path."""
        assert self.constraints is not None
        return self.constraints.filter_candidates([pool.path(node) for node in frontier], ids, logprob)

    def _scratch_visibility(self, pool: CandidatePool, frontier: list[int], slots: int) -> np.ndarray:
        """Each frontier node sees the pending tokens and its ancestors' scratch slots."""
        visible = np.zeros((len(frontier), slots), dtype=bool)
        visible[:, : len(self.pending)] = True
        for row, node in enumerate(frontier):
            ancestor = pool.nodes[node].parent
            while ancestor >= 0:
                visible[row, pool.nodes[ancestor].draft_slot] = True
                ancestor = pool.nodes[ancestor].parent
        return visible

    @staticmethod
    def _cannot_improve(pool: CandidatePool, created: list[int], budget: int, chain: bool, level: int) -> bool:
        """Path log-probs only fall with depth: stop once the newest level cannot make the cut.

        A chain (the exact layout) takes one child per level whatever its siblings score, so only
        its length can run out of budget: ranking it against siblings it will never take cut chains
        to 3.9 of a planned 6 nodes on a draft whose every token was accepted (benchmarks/RESULTS-archive.md,
        2026-12-04).
        """
        if chain:
            return level + 2 >= budget  # the root and level + 1 drafted nodes fill the budget
        if not created or len(pool.nodes) <= budget:
            return False
        best_new = max(pool.nodes[i].path_logprob for i in created)
        scores = sorted((n.path_logprob for n in pool.nodes[1:]), reverse=True)
        return best_new < scores[budget - 2] if budget >= 2 else True

    @staticmethod
    def _gumbel(rand: Randomness, round_key: int, level: int, shape: tuple[int, ...]) -> np.ndarray:
        u = rand.uniforms(Stream.draft, round_key * _LEVEL_STRIDE + level, int(np.prod(shape)))
        u = np.clip(u, 1e-300, 1.0 - 1e-16)
        gumbel: np.ndarray = -np.log(-np.log(u)).reshape(shape)
        return gumbel

    def commit(self, result: DraftResult, path: list[int], emitted: list[int], stats: RoundStats,
               features: np.ndarray | None = None) -> None:
        """Keep pending + root + the accepted nodes the draft ran; the rest become pending. A feature
        draft keeps pending + root only: its rows of drafted nodes read drafted features, so every
        accepted token is fed again with the target's (`features`: the path's rows)."""
        with StageClock(stats)(COMMIT):
            keep = list(range(result.slots_before_tree))
            pending: list[int] = []
            for node in path[1:]:
                slot = int(result.tree.draft_slot[node])
                if slot >= 0 and not pending and not self.needs_features:
                    keep.append(slot)
                else:
                    pending.append(int(result.tree.tokens[node]))
            self.runner.commit(keep)
            self.pending = pending
            if self.needs_features:
                rows = self._features(features, len(path))
                # pending token k (path node k + 1) reads the feature of path node k; the next root the last one's
                self.pending_features = list(rows[:-1])
                self.root_feature = rows[-1]
