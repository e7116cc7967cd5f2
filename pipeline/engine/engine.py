"""The decoding engine: plain target decoding and tree speculative decoding (docs/design.md §5).

Imports only numpy, onnxruntime and the standard library (through the runtime modules), so
the same code runs on the phone. A round: the drafter proposes a tree (the draft model, prompt
lookup or both: engine/drafter.py), the target verifies every node in one forward with the tree
mask, BlockSparseVerify picks the accepted path, the caches keep exactly that path, and the
target's own next token becomes the next round's root.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from specdec.custom_ops.block_sparse_verify import (
    Mode,
    block_sparse_verify,
    rrs_tests,
    sample_token,
    target_probs,
    verify_rrs,
)
from specdec.pipeline.engine.bundle_info import BundleInfo, GraphInfo, read_bundle
from specdec.pipeline.engine.drafter import Drafter, DraftResult, RoundPlan
from specdec.pipeline.engine.graph import HIDDEN_STATES, SessionOptions
from specdec.pipeline.engine.int8_range import check_weight_range
from specdec.pipeline.engine.lookup import LookupDrafter, ModelLookupDrafter
from specdec.pipeline.engine.model_drafter import ModelDrafter
from specdec.pipeline.engine.processors import Constraints, ProcessorCache, build
from specdec.pipeline.engine.processors.base import REFUSED
from specdec.pipeline.engine.rng import Randomness, Stream
from specdec.pipeline.engine.runner import DynamicRunner, Runner, causal, no_scratch
from specdec.pipeline.engine.stats import ACCEPT, COMMIT, PROCESS, VERIFY, Reply, RoundStats, StageClock
from specdec.pipeline.engine.tree import LOOKUP, MODEL, DraftTree, ancestor_matrix
from specdec.pipeline.errors import BundleError, InputError, setting
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind, VerifyMode
from specdec.pipeline.records.manifest import GraphFlavour

TokenSink = Callable[[list[int]], None]


def _draft_model(model: ModelDrafter | None, config: DecodeConfig) -> ModelDrafter:
    if model is None:
        raise BundleError(f"this bundle has no draft graph, so {setting('drafter')} {config.drafter.value} cannot run",
                          f"pass {setting('drafter')} lookup (or --no-speculation), or export with --draft")
    return model


# DecodeConfig.drafter -> the reply's drafter, from the bundle's draft model (None without a draft graph)
DRAFTERS: dict[DrafterKind, Callable[[ModelDrafter | None, DecodeConfig], Drafter]] = {
    DrafterKind.model: _draft_model,
    DrafterKind.lookup: lambda model, config: LookupDrafter.from_config(config),
    DrafterKind.model_lookup: lambda model, config: ModelLookupDrafter(_draft_model(model, config),
                                                                       LookupDrafter.from_config(config)),
}


class RoundController(Protocol):
    """Decides how much to draft each round (see controllers.py); never what is accepted."""

    def plan(self, plan: RoundPlan) -> RoundPlan | None: ...  # None: decode this round plainly

    def observe(self, stats: RoundStats) -> None: ...


def make_runner(info: GraphInfo, bundle: BundleInfo, options: SessionOptions) -> Runner:
    """The runner of the bundle's compiled flavour (fused cpu graphs, static npu buckets), else dynamic."""
    buckets = bundle.buckets
    if buckets is None:
        return DynamicRunner(info, options)
    if buckets.flavour is GraphFlavour.cpu:
        from specdec.pipeline.engine.fused import FusedRunner

        graph = buckets.fused.get(info.role)
        if graph is None:
            raise BundleError(f"compiled bundle '{bundle.path}' has no fused {info.role} graph",
                              "re-run `specdec compile`")
        return FusedRunner(info, bundle.path / graph.runtime_file, buckets.max_context, options,
                           policy=buckets.kv_policy)
    if buckets.kv_policy.windowed:  # one fixed ring of slots, rows placed by the runner
        from specdec.pipeline.engine.static_window import StaticWindowRunner

        return StaticWindowRunner(info, bundle, options)
    from specdec.pipeline.engine.static import StaticRunner

    return StaticRunner(info, bundle, options)


class Engine:
    def __init__(self, bundle: str | Path | BundleInfo, options: SessionOptions | None = None) -> None:
        self.info = bundle if isinstance(bundle, BundleInfo) else read_bundle(bundle)
        check_weight_range(self.info.quantization)
        options = options or SessionOptions()
        self.target = make_runner(self.info.graphs["target"], self.info, options)
        self.vocab = self.info.graphs["target"].vocab_size
        draft = self.info.graphs.get("draft")
        # The draft model's drafter (None without a draft graph); DecodeConfig.drafter says how a
        # reply uses it (drafter_for).
        draft_options = dataclasses.replace(options, threads=options.draft_threads)
        features = self.info.draft.is_feature and draft is not None
        if features and HIDDEN_STATES not in self.info.graphs["target"].output_names:
            raise BundleError(f"bundle '{self.info.path}' has a feature draft but its target graph has no "
                              f"'{HIDDEN_STATES}' output", "re-export the bundle with the feature draft")
        self.drafter = (ModelDrafter(make_runner(draft, self.info, draft_options), self.vocab,
                                     vocab_map=self.info.draft_vocab(), features=features)
                        if draft is not None else None)
        self.eos = set(self.info.eos_token_ids)
        # A greedy root step the runner does in one call (FusedRunner), when the graph verifies itself.
        fast = getattr(self.target, "greedy_root_step", None)
        self._greedy_root_step: Callable[[int, int], int] | None = fast if self.target.has_verify else None
        self.max_context = min(self.target.max_context, self.drafter.runner.max_context if self.drafter else 1 << 62)
        self._processor_cache: ProcessorCache | None = None
        # The reply's logits processors (None: unconstrained). With them the logits must reach the
        # host, so the in-graph verify and the fused greedy step are not used.
        self._constraints: Constraints | None = None

    # -- helpers ---------------------------------------------------------------------------
    def _choose(self, logits_row: np.ndarray, generated_index: int, config: DecodeConfig, rand: Randomness) -> int:
        """The target's token from one logits row: argmax, or a draw with the position's uniform."""
        if config.effective_mode is VerifyMode.greedy:
            return int(np.argmax(logits_row))
        probs = target_probs(logits_row, config.temperature, config.top_k, config.top_p)[0]
        return sample_token(probs, rand.token_uniform(generated_index))

    def check_prompt(self, prompt: Sequence[int]) -> list[int]:
        """The prompt's ids, or InputError (exit 2: a prompt that cannot be used is bad input, not a decoding
        failure): empty, longer than the context, or holding ids the vocabulary has no token for."""
        ids = [int(t) for t in prompt]
        if not ids:
            raise InputError("the prompt is empty", "pass at least one token of text")
        if len(ids) >= self.max_context:
            raise InputError(
                f"the prompt has {len(ids)} tokens but the bundle's context is {self.max_context}",
                "shorten the prompt or pass --truncate to keep its last tokens",
            )
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary (0..{self.vocab - 1})",
                                  "tokenize with the bundle's tokenizer")
        return ids

    def constraints_for(self, config: DecodeConfig) -> Constraints | None:
        """A reply's logits processors (engine/processors/), compiled once per bundle and setting."""
        if not config.constrained:
            return None
        if self._processor_cache is None:
            self._processor_cache = ProcessorCache(self.info.tokenizer_dir / "tokenizer.json", self.vocab)
        return build(config, self._processor_cache)

    def root_rows(self, config: DecodeConfig) -> int:
        """Rows of a call on the root alone: the exact layout pads it to two, unless the target
        computes a single row bitwise as any row of a larger call (a fused w8a8 target)."""
        return 2 if config.exact_layout and not self.target.single_row_exact else 1

    def drafter_for(self, config: DecodeConfig) -> Drafter:
        """The drafter `config.drafter` names; BundleError if it needs a draft graph this bundle lacks."""
        return DRAFTERS[config.drafter](self.drafter, config)

    # -- public API ------------------------------------------------------------------------
    def generate(self, prompt: Sequence[int], config: DecodeConfig, on_tokens: TokenSink | None = None,
                 controller: RoundController | None = None) -> Reply:
        ids = self.check_prompt(prompt)
        drafter = self.drafter_for(config) if config.speculative else None
        constraints = self._constraints = self.constraints_for(config)
        rand = Randomness(config.seed)
        start = time.perf_counter_ns()
        target = self.target
        target.reset()
        fed = [*ids, 0] if len(ids) < self.root_rows(config) else ids  # never a single row (exact layout)
        # a feature draft reads the target's features of every committed row, the prompt's first
        wanted = _FEATURES if drafter is not None and drafter.needs_features else ()
        logits, extras = target.forward(np.array(fed), np.arange(len(fed)), no_scratch(len(fed)), causal(len(fed)),
                                        extra_outputs=wanted)
        assert logits is not None
        target.commit(np.arange(len(ids)))
        prefill_ns = time.perf_counter_ns() - start
        first = logits[len(ids) - 1] if constraints is None else constraints.process_row(logits[len(ids) - 1], ())
        output = [self._choose(first, 0, config, rand)]
        refused = False
        if constraints is not None:
            output, refused = constraints.accept(output)
        ttft_ns = time.perf_counter_ns() - start
        if on_tokens and output:
            on_tokens(list(output))
        rounds: list[RoundStats] = []
        if drafter is not None and output:
            drafter.reset(ids, output[0], _rows(extras, len(ids)) if wanted else None)
            drafter.constrain(constraints)
        stop = REFUSED if refused else self._stop_reason(output, config)
        while stop is None:
            round_start = time.perf_counter_ns()
            stats = RoundStats(index=len(rounds), kind="plain")
            plan = self._plan(drafter, output, config, controller) if drafter is not None else None
            if plan is None:
                emitted = self._plain_step(drafter, output, config, rand, stats)
            else:
                assert drafter is not None
                stats.kind = "speculative"
                emitted = self._speculative_round(drafter, output, config, rand, plan, stats)
            emitted = self._clip(emitted, output, config)
            if constraints is not None:
                with StageClock(stats)(PROCESS):
                    emitted, refused = constraints.accept(emitted)
            stats.wall_ns = time.perf_counter_ns() - round_start
            if controller is not None:
                controller.observe(stats)
            rounds.append(stats)
            output += emitted
            if on_tokens and emitted:
                on_tokens(emitted)
            stop = REFUSED if refused else self._stop_reason(output, config) or self._context_full()
        return Reply(ids, output, stop, ttft_ns, time.perf_counter_ns() - start, prefill_ns, rounds)

    # -- rounds ----------------------------------------------------------------------------
    def _plan(self, drafter: Drafter, output: list[int], config: DecodeConfig,
              controller: RoundController | None) -> RoundPlan | None:
        room = self.max_context - self.target.length  # slots left for the root and its drafts
        remaining = config.max_new_tokens - len(output)
        plan = RoundPlan(budget=min(config.tree_budget, room), depth=min(config.depth, remaining - 1, room - 1),
                         width=config.width)
        if controller is not None:
            adjusted = controller.plan(plan)
            if adjusted is None:
                return None
            plan = RoundPlan(min(adjusted.budget, plan.budget), min(adjusted.depth, plan.depth), adjusted.width,
                             adjusted.beta_base)
        plan = drafter.fit(plan)
        if plan.depth < 1 or plan.budget < 2:
            return None
        return plan

    def _plain_step(self, drafter: Drafter | None, output: list[int], config: DecodeConfig, rand: Randomness,
                    stats: RoundStats) -> list[int]:
        features = drafter is not None and drafter.needs_features
        token, rows = self._root_step(output, config, rand, stats, features)
        if drafter is not None:
            drafter.skip(output[-1], [token], stats, rows)
        return [token]

    def _root_step(self, output: list[int], config: DecodeConfig, rand: Randomness, stats: RoundStats,
                   features: bool = False) -> tuple[int, np.ndarray | None]:
        """One target call on the root alone, committed: a plain step, or a round with nothing drafted.
        The token, and with `features` the root's row of the target's hidden_states [1, H]."""
        clock = StageClock(stats)
        target = self.target
        rows = self.root_rows(config)
        constraints = self._constraints
        if (self._greedy_root_step is not None and config.effective_mode is VerifyMode.greedy
                and constraints is None and not features):
            with clock(VERIFY):
                token = self._greedy_root_step(output[-1], rows)
            stats.bytes_out += target.last_bytes_out
            return token, None
        wanted = _FEATURES if features else ()
        args = (np.array(output[-1:] + [0] * (rows - 1)), target.length + np.arange(rows), *_ROOT_VISIBLE[rows])
        if self._verify_in_graph(config):  # a one-node tree: the op returns the target's token
            # a pad row is a parentless node: never accepted, its token never emitted. Greedy needs
            # nothing but the op's defaults (parentless rows, mode greedy): the cheapest call.
            extra = None if config.effective_mode is VerifyMode.greedy else self.verify_inputs(
                np.full(rows, -1), np.zeros(rows, np.int64), config, rand, len(output))
            with clock(VERIFY):
                _, extras = target.forward(*args, extra_inputs=extra, extra_outputs=("next_token", *wanted),
                                           with_logits=False)
            token = int(extras["next_token"])
        else:
            with clock(VERIFY):
                logits, extras = target.forward(*args, extra_outputs=wanted)
            assert logits is not None
            row = logits[0]
            if constraints is not None:
                with clock(PROCESS):
                    row = constraints.process_row(row, ())
            with clock(ACCEPT):
                token = self._choose(row, len(output), config, rand)
        with clock(COMMIT):
            target.commit([0])
        stats.bytes_out += target.last_bytes_out
        return token, _rows(extras, rows)[:1] if features else None

    def _speculative_round(self, drafter: Drafter, output: list[int], config: DecodeConfig, rand: Randomness,
                           plan: RoundPlan, stats: RoundStats) -> list[int]:
        target = self.target
        generated = len(output)  # index of the token the root's children stand for
        drafted: DraftResult = drafter.draft(output[-1], target.length, plan, config, rand, generated, stats)
        tree = drafted.tree
        stats.tree_size, stats.tree_depth = tree.size, tree.max_depth
        features = drafter.needs_features
        if tree.size == 1:  # nothing proposed (e.g. no lookup match): the target decodes the root alone
            token, rows = self._root_step(output, config, rand, stats, features)
            emitted = [token]
            drafter.commit(drafted, [0], emitted, stats, rows)
            return emitted  # the stats' defaults describe this round (nothing drafted, one token)
        path, next_token, rows = self._verify_tree(tree, drafted, config, rand, generated, stats, features)
        emitted = [int(t) for t in tree.tokens[path[1:]]] + [next_token]
        drafter.commit(drafted, path, emitted, stats, rows)
        stats.accepted_len = len(path)
        order = np.argsort(tree.selected)[1:]  # non-root nodes in best-first order
        stats.order_depths = tree.depths[order].tolist()
        parents = tree.parents[order]
        stats.order_parents = np.where(parents >= 0, tree.selected[np.maximum(parents, 0)] - 1, -1).tolist()
        stats.order_gates = tree.gate_logprob[order].tolist()
        stats.path_positions = [int(tree.selected[node]) - 1 for node in path[1:]]
        stats.path_ranks = tree.rank[path[1:]].tolist()
        origin, accepted = tree.origin.tolist(), tree.origin[path[1:]].tolist()
        stats.proposed_model = sum(1 for o in origin if o & MODEL)
        stats.proposed_lookup = sum(1 for o in origin if o & LOOKUP)
        stats.accepted_model = sum(1 for o in accepted if o & MODEL)
        stats.accepted_lookup = sum(1 for o in accepted if o & LOOKUP)
        return emitted

    def _verify_tree(self, tree: DraftTree, drafted: DraftResult, config: DecodeConfig, rand: Randomness,
                     generated: int, stats: RoundStats, features: bool = False
                     ) -> tuple[list[int], int, np.ndarray | None]:
        """One target forward over the tree; the accepted path (tree nodes) and the token after it,
        committed; with `features`, the path's rows of the target's hidden_states [len(path), H]."""
        clock = StageClock(stats)
        target = self.target
        args = (tree.tokens, target.length + tree.depths, no_scratch(tree.size), ancestor_matrix(tree.parents))
        wanted = _FEATURES if features else ()
        if self._verify_in_graph(config):
            with clock(VERIFY):
                _, extras = target.forward(
                    *args, extra_inputs=self.verify_inputs(tree.parents, tree.depths, config, rand, generated),
                    extra_outputs=("accepted", "accepted_len", "next_token", *wanted), with_logits=False,
                )
            accepted, length, next_token = extras["accepted"], int(extras["accepted_len"]), int(extras["next_token"])
        else:
            with clock(VERIFY):
                logits, extras = target.forward(*args, extra_outputs=wanted)
            assert logits is not None
            constraints = self._constraints
            if constraints is not None and config.effective_mode is not VerifyMode.rrs:
                # greedy / match read one row per accepted node: only those rows are processed
                with clock(PROCESS):
                    walked, next_token = constraints.walk(
                        logits, tree.tokens, tree.parents,
                        lambda row, depth: self._choose(row, generated + depth, config, rand))
                accepted, length = np.array(walked, np.int64), len(walked)
            else:
                if constraints is not None:  # rrs reads residuals along the path: every node's row, own prefix
                    with clock(PROCESS):
                        logits = constraints.process_tree(logits, tree.tokens, tree.parents)
                with clock(ACCEPT):
                    accepted, length, next_token = self._verify(logits, tree, drafted, config, rand, generated)
        stats.bytes_out += target.last_bytes_out
        path: list[int] = accepted[:length].tolist()
        with clock(COMMIT):
            target.commit(path)
        return path, next_token, _rows(extras, tree.size)[path] if features else None

    def _verify_in_graph(self, config: DecodeConfig) -> bool:
        # the in-graph verify never hands the logits out, so logits processors cannot run there
        return self.target.has_verify and config.effective_mode is not VerifyMode.rrs and self._constraints is None

    def _match_uniforms(self, depths: np.ndarray, rand: Randomness, generated: int) -> np.ndarray:
        # The choice at a depth-d node is output token number `generated + d`; it gets the uniform
        # plain sampling uses for that position, so match reproduces plain sampling exactly.
        return np.array([[rand.token_uniform(generated + int(d))] for d in depths], np.float64)

    def verify_inputs(self, parents: np.ndarray, depths: np.ndarray, config: DecodeConfig, rand: Randomness,
                       generated: int) -> dict[str, np.ndarray]:
        mode = config.effective_mode
        uniforms = self._match_uniforms(depths, rand, generated) if mode is VerifyMode.match \
            else np.zeros((depths.size, 1))
        return {
            "tree_parent": np.asarray(parents, np.int64), "tree_depth": np.asarray(depths, np.int64),
            "uniforms": uniforms, "temperature": np.array(config.temperature, np.float32),
            "mode": np.array(int(_MODE_IDS[mode]), np.int64), "top_k": np.array(config.top_k, np.int64),
            "top_p": np.array(config.top_p, np.float32),
        }

    def _verify(self, logits: np.ndarray, tree: DraftTree, drafted: DraftResult, config: DecodeConfig,
                rand: Randomness, generated: int) -> tuple[np.ndarray, int, int]:
        mode = config.effective_mode
        if mode is VerifyMode.rrs:
            point_mass = tree.point_mass
            width = rrs_tests(tree.parents, tree.draft_rank, point_mass)
            uniforms = rand.uniforms(Stream.verify, generated, tree.size * width).reshape(tree.size, width)
            return verify_rrs(logits, tree.tokens, tree.parents, drafted.dist_ids, drafted.dist_logprob, uniforms,
                              config.temperature, config.top_k, config.top_p, draft_rank=tree.draft_rank,
                              point_mass=point_mass)
        uniforms = self._match_uniforms(tree.depths, rand, generated) if mode is VerifyMode.match \
            else np.zeros((tree.size, 1))
        accepted, length, token = block_sparse_verify(
            logits, tree.tokens, tree.parents, tree.depths, uniforms, config.temperature, int(_MODE_IDS[mode]),
            config.top_k, config.top_p,
        )
        return accepted, length, token

    # -- stopping ---------------------------------------------------------------------------
    def _clip(self, emitted: list[int], output: list[int], config: DecodeConfig) -> list[int]:
        emitted = emitted[: config.max_new_tokens - len(output)]
        for i, token in enumerate(emitted):
            if token in self.eos:
                return emitted[: i + 1]
        return emitted

    def _stop_reason(self, output: list[int], config: DecodeConfig) -> str | None:
        if output and output[-1] in self.eos:
            return "eos"
        if len(output) >= config.max_new_tokens:
            return "max_new_tokens"
        return None

    def _context_full(self) -> str | None:
        # The last emitted token still has to be fed: that needs one free slot.
        return "max_context" if self.target.length + 1 > self.max_context else None


_FEATURES = (HIDDEN_STATES,)  # what a feature draft reads from every target call


def _rows(extras: dict[str, np.ndarray], rows: int) -> np.ndarray:
    """The target's hidden_states of a call as [rows, H] (the graph's [1, q, H], pad rows dropped)."""
    hidden = extras[HIDDEN_STATES]
    return hidden.reshape(-1, hidden.shape[-1])[:rows]


def _read_only(scratch: np.ndarray, visible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scratch.flags.writeable = visible.flags.writeable = False
    return scratch, visible


# What a root step's rows see (no scratch; the pad row only itself), built once: this runs every step.
_ROOT_VISIBLE = {1: _read_only(no_scratch(1), causal(1)), 2: _read_only(no_scratch(2), np.eye(2, dtype=bool))}

_MODE_IDS = {VerifyMode.greedy: Mode.greedy, VerifyMode.match: Mode.match}
