"""Measure a device's cost curve and a bundle's acceptance, then plan the tree (issue: hardware-aware).

Runs where the engine runs (this machine for `specdec tune --device local`, the phone inside the
bench runner), torch-free:

1. plain decoding of the calibration prompts gives the plain step time (host work included), and
2. the target's verify time c(n) is timed for trees of n nodes at the calibration context, the two
   interleaved: the prediction divides one by the other, so drift between them must cancel;
3. one calibration pass per drafter configuration (the draft model, prompt lookup with a few
   n-gram lengths, both; a few widths each) decodes the prompts speculatively with a generous
   tree and records every round the planner needs (planner.CalibrationRound);
4. planner.plan_tree picks the drafter and the tree, or plain decoding;
5. the pick is confirmed by measurement: the calibration prompts decoded plainly and with the
   planned tree, interleaved. A plan that does not measure faster than plain decoding gives way to
   the next candidate, and plain decoding is planned when none does: the model's prediction is
   only as good as its inputs, and speculation must never lose to plain decoding. When another
   drafter's best was predicted close behind (RIVAL_SHARE), it is measured too and the faster kept.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specdec.pipeline.engine.bundle_info import BundleInfo
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.rng import Randomness
from specdec.pipeline.engine.runner import no_scratch, prefill
from specdec.pipeline.engine.stats import DRAFT, PRUNE, VERIFY, RoundStats
from specdec.pipeline.engine.tree import ancestor_matrix
from specdec.pipeline.engine.tune.planner import (
    Calibration,
    CalibrationRound,
    CostCurve,
    TreePlan,
    plain_choice,
    plan_tree,
)
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind
from specdec.pipeline.records.kv_policy import KVPolicy
from specdec.pipeline.records.plan import CostFit, DevicePlan, PlanChoice, TuneRequest

log = logging.getLogger(__name__)

VERIFY_SIZES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
RECORDING_GATE = 1e-6  # far below any gate the planner tries (planner.GATES)


@dataclass(frozen=True)
class TuneSettings:
    widths: tuple[int, ...] = (1, 2, 4)  # the draft model's frontier
    lookup_widths: tuple[int, ...] = (1, 2)  # prompt lookup's chains per round
    mixed_widths: tuple[int, ...] = (2, 4)  # model+lookup: the model's frontier, lookup chains as extra branches
    # prompt lookup's (min, max) suffix lengths; empty: the run's own
    lookup_ngrams: tuple[tuple[int, int], ...] = ((1, 3), (2, 4))
    drafters: tuple[DrafterKind, ...] = tuple(DrafterKind)  # those the bundle can run are calibrated
    max_budget: int = 32
    max_depth: int = 6
    max_new_tokens: int = 48
    repeats: int = 7  # timing rounds over the verify sizes (median per size)
    confirm_repeats: int = 2  # interleaved plain/plan passes over the prompts that confirm a plan (0: trust the model)
    confirm_tries: int = 3  # candidates confirmed at most before planning plain decoding

    def exact(self) -> TuneSettings:
        """The exact layout verifies chains only: width 1 for every drafter."""
        return dataclasses.replace(self, widths=(1,), lookup_widths=(1,), mixed_widths=(1,))


@dataclass(frozen=True)
class CalibrationSpec:
    """One calibration pass: a drafter, its width, and prompt lookup's n-gram lengths if it uses lookup."""

    drafter: DrafterKind
    width: int
    lookup_ngrams: tuple[int, int] | None = None

    def config(self, base: DecodeConfig, max_budget: int) -> DecodeConfig:
        config = dataclasses.replace(base, drafter=self.drafter, tree_budget=max_budget, width=self.width)
        if self.drafter.needs_model and base.draft_min_prob == 0:
            # the draft's raw probabilities are measured only with a gate on: one that drops nothing
            # the planner would keep lets it replay every gate from this one pass
            config = dataclasses.replace(config, draft_min_prob=RECORDING_GATE)
        if self.lookup_ngrams is not None:
            config = dataclasses.replace(config, lookup_min_ngram=self.lookup_ngrams[0],
                                         lookup_max_ngram=self.lookup_ngrams[1])
        return config

    def label(self) -> str:
        ngrams = f", n-grams {self.lookup_ngrams[0]}-{self.lookup_ngrams[1]}" if self.lookup_ngrams else ""
        return f"{self.drafter.value}, width {self.width}{ngrams}"


def calibration_specs(settings: TuneSettings, config: DecodeConfig, has_draft: bool) -> list[CalibrationSpec]:
    """The passes to run: every drafter of `settings` this bundle can run (the model needs a draft graph)."""
    own = (config.lookup_min_ngram, config.lookup_max_ngram)
    ngrams = settings.lookup_ngrams or (own,)
    widths = {DrafterKind.model: settings.widths, DrafterKind.lookup: settings.lookup_widths,
              DrafterKind.model_lookup: settings.mixed_widths}
    specs: list[CalibrationSpec] = []
    for drafter in settings.drafters:
        if drafter.needs_model and not has_draft:
            continue
        # model+lookup grafts the run's own lookup: one more n-gram axis would double its passes for little
        lookups: tuple[tuple[int, int] | None, ...] = (
            (None,) if not drafter.uses_lookup else ngrams if drafter is DrafterKind.lookup else (own,))
        specs += [CalibrationSpec(drafter, width, lookup) for lookup in lookups for width in widths[drafter]]
    return specs


@dataclass
class TuneResult:
    plan: TreePlan
    verify: CostCurve
    plain_step_ms: float
    calibrations: list[Calibration]
    context: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    confirmed_speedup: float | None = None  # the kept plan's measured decode speedup (None: not confirmed)

    def as_dict(self) -> dict[str, object]:
        return {
            "plan": self.plan.as_dict(), "verify_cost": self.verify.as_dict(),
            "plain_step_ms": round(self.plain_step_ms, 4), "context": self.context,
            "tune_seconds": round(self.seconds, 2), "notes": self.notes,
            "confirmed_speedup": None if self.confirmed_speedup is None else round(self.confirmed_speedup, 4),
            "calibration": [{"name": c.name, "drafter": c.drafter, "width": c.width, "max_budget": c.max_budget,
                             "max_depth": c.max_depth, "rounds": len(c.rounds),
                             "acceptance_profile": c.acceptance_profile()} for c in self.calibrations],
        }


def calibration_round(stats: RoundStats) -> CalibrationRound:
    """The planner's view of one measured speculative round."""
    draft: list[float] = []
    prune: list[float] = []
    prune_slices = [s for s in stats.slices if s.stage == PRUNE]
    last_prune = prune_slices[-1] if prune_slices else None
    for piece in stats.slices:
        if piece.stage == DRAFT:
            draft.append(piece.duration_ns / 1e6)
            prune.append(0.0)
        elif piece.stage == PRUNE and draft and piece is not last_prune:
            prune[-1] += piece.duration_ns / 1e6
    # everything that is not a draft forward, its pruning or the verify call (selection included)
    rest = (stats.wall_ns - stats.stage_ns(VERIFY)) / 1e6 - sum(draft) - sum(prune)
    return CalibrationRound(order_depths=tuple(stats.order_depths), path_positions=tuple(stats.path_positions),
                            path_ranks=tuple(stats.path_ranks), draft_ms=tuple(draft), prune_ms=tuple(prune),
                            rest_ms=max(rest, 0.0), order_parents=tuple(stats.order_parents),
                            order_gates=tuple(stats.order_gates))


def plain_pass(engine: Engine, prompt: list[int], config: DecodeConfig) -> tuple[int, int]:
    """(nanoseconds, tokens) of one prompt's plainly decoded rounds, prefill excluded."""
    reply = engine.generate(prompt, dataclasses.replace(config, speculative=False))
    return sum(r.wall_ns for r in reply.rounds), sum(r.accepted_len for r in reply.rounds)


def _per_token_ms(passes: Sequence[tuple[int, int]]) -> float:
    """Milliseconds per plainly decoded token over the passes (the baseline the plan must beat)."""
    tokens = sum(t for _, t in passes)
    if not tokens:
        raise ValueError("calibration produced no tokens")
    return sum(ns for ns, _ in passes) / tokens / 1e6


def _tree(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A binary tree of `size` nodes: parents, depths, visibility."""
    parents = np.array([-1] + [(i - 1) // 2 for i in range(1, size)], np.int64)
    depths = np.zeros(size, np.int64)
    for node in range(1, size):
        depths[node] = depths[parents[node]] + 1
    return parents, depths, ancestor_matrix(parents)


def _time_verify(engine: Engine, context: list[int], config: DecodeConfig, size: int,
                 tree: tuple[np.ndarray, np.ndarray, np.ndarray], rand: Randomness) -> int:
    """Nanoseconds of one verify call of `size` nodes after the committed context (the engine's call)."""
    target = engine.target
    parents, depths, visible = tree
    tokens = np.resize(np.asarray(context[-size:], np.int64), size)
    start = time.perf_counter_ns()
    if target.has_verify:
        target.forward(tokens, target.length + depths, no_scratch(size), visible,
                       extra_inputs=engine.verify_inputs(parents, depths, config, rand, 0),
                       extra_outputs=("accepted", "accepted_len", "next_token"), with_logits=False)
    else:
        target.forward(tokens, target.length + depths, no_scratch(size), visible)
    elapsed = time.perf_counter_ns() - start
    target.commit([])
    return elapsed


def measure_costs(engine: Engine, prompts: Sequence[list[int]], context: list[int], config: DecodeConfig,
                  sizes: Sequence[int], repeats: int) -> tuple[float, CostCurve]:
    """The plain step (ms per token over the prompts decoded plainly) and the verify curve on
    `context` (median of `repeats` round-robin rounds over the sizes), interleaved pass by pass.

    Round-robin over the sizes, a device whose speed drifts (heat, other load) shifts every size
    alike instead of bending the curve. And a plan's prediction is plain step / round time:
    measured minutes apart, drift biases that ratio (a 10 % slower plain pass on the VM this was
    built on overstated the predicted speedup by as much); interleaved, it hits both alike.
    """
    rand = Randomness(config.seed)
    trees = {size: _tree(size) for size in sizes}
    samples: dict[int, list[int]] = {size: [] for size in sizes}
    passes: list[tuple[int, int]] = []
    for index in range(max(len(prompts), repeats)):
        decoded = index < len(prompts)
        if decoded:
            passes.append(plain_pass(engine, prompts[index], config))
        if index < repeats:
            if decoded or index == 0:  # plain decoding reset the target (untimed); verify rounds keep it
                prefill(engine.target, np.asarray(context, np.int64))
            for size in sizes:
                samples[size].append(_time_verify(engine, context, config, size, trees[size], rand))
    curve = CostCurve(tuple((size, statistics.median(samples[size]) / 1e6) for size in sizes))
    return _per_token_ms(passes), curve


def tune(engine: Engine, prompts: Sequence[list[int]], config: DecodeConfig, settings: TuneSettings | None = None,
         budgets: Sequence[int] | None = None, on_step: Callable[[str], None] | None = None) -> TuneResult:
    """Measure and plan; `budgets` limits tree sizes (a compiled bundle's buckets)."""
    settings = settings or TuneSettings()
    step = on_step or (lambda text: None)
    started = time.perf_counter()
    base = dataclasses.replace(config, max_new_tokens=settings.max_new_tokens, depth=settings.max_depth)
    max_budget = min(settings.max_budget, max(budgets) if budgets else settings.max_budget)
    step("warming up")
    # First calls allocate buffers and pick kernels: untimed, or the plain step (the baseline every
    # prediction divides by) comes out slow and speculation looks better than it is.
    warm = dataclasses.replace(base, max_new_tokens=min(8, base.max_new_tokens))
    engine.generate(prompts[0], dataclasses.replace(warm, speculative=False))
    for spec in calibration_specs(settings, base, has_draft=engine.drafter is not None):
        engine.generate(prompts[0], spec.config(warm, max_budget))
    step("timing plain decoding and target verification by tree size")
    context = list(prompts[0]) + list(range(1, settings.max_new_tokens // 2))
    sizes = sorted({s for s in (budgets or VERIFY_SIZES) if s <= max(max_budget, 1)} | {1})
    plain_ms, verify = measure_costs(engine, prompts, context, base, sizes, settings.repeats)
    calibrations: list[Calibration] = []
    notes: list[str] = []
    specs = calibration_specs(settings, base, has_draft=engine.drafter is not None)
    if not specs:
        notes.append("no drafter this bundle can run was asked for: plain decoding")
    for spec in specs:
        step(f"calibrating acceptance ({spec.label()})")
        wide = spec.config(base, max_budget)
        rounds = [calibration_round(r) for prompt in prompts for r in engine.generate(prompt, wide).speculative_rounds]
        calibrations.append(Calibration(spec.drafter.value, spec.width, max_budget, settings.max_depth, tuple(rounds),
                                        spec.lookup_ngrams, fixed_gate=base.draft_min_prob or None))
    # a lone root costs two rows in the exact layout unless the target computes a single row exactly
    plan = plan_tree(calibrations, verify, plain_ms, budgets=budgets, min_rows=engine.root_rows(base))
    confirmed = None
    if plan.choice.speculative and settings.confirm_repeats > 0:
        step("confirming the plan against plain decoding")
        plan, confirmed = confirm(engine, prompts, base, plan, settings, notes)
    return TuneResult(plan, verify, plain_ms, calibrations, len(context), time.perf_counter() - started, notes,
                      confirmed)


MIN_CONFIRMED = 1.02  # a plan must measure this much faster than plain decoding to be kept (noise margin)
# Another drafter's best predicted within this share of the pick is measured against it: on
# SmolLM2-135M-Instruct the model's calibrations predicted model+lookup 1.25x and lookup 1.245x,
# and model+lookup, kept, measured 1.02x on other chat requests where lookup measured 1.17x.
RIVAL_SHARE = 0.9


def decode_rate(engine: Engine, prompts: Sequence[list[int]], config: DecodeConfig) -> tuple[int, int]:
    """(tokens after the first, nanoseconds they took) over the prompts: the phase a plan speeds up."""
    tokens = ns = 0
    for prompt in prompts:
        reply = engine.generate(prompt, config)
        tokens += len(reply.output_ids) - 1
        ns += reply.total_ns - reply.ttft_ns
    return tokens, ns


def measured_speedup(engine: Engine, prompts: Sequence[list[int]], base: DecodeConfig, choice: PlanChoice,
                     repeats: int) -> float:
    """The plan's decode speedup over plain decoding, the two interleaved so drift hits both alike."""
    plain = dataclasses.replace(base, speculative=False)
    planned = apply_choice(dataclasses.replace(base, speculative=True), choice)
    plain_tokens = plain_ns = tokens = ns = 0
    for _ in range(repeats):
        more_tokens, more_ns = decode_rate(engine, prompts, plain)
        plain_tokens, plain_ns = plain_tokens + more_tokens, plain_ns + more_ns
        more_tokens, more_ns = decode_rate(engine, prompts, planned)
        tokens, ns = tokens + more_tokens, ns + more_ns
    if not (plain_tokens and plain_ns and tokens and ns):
        return 0.0
    return (tokens / ns) / (plain_tokens / plain_ns)


def rival(candidates: Sequence[PlanChoice], choice: PlanChoice,
          measured: Sequence[PlanChoice] = ()) -> PlanChoice | None:
    """The best-predicted speculative candidate of another drafter predicted within RIVAL_SHARE of
    `choice` and not already `measured`, or None: the one worth measuring against it."""
    for candidate in candidates:
        if (candidate.speculative and candidate.drafter != choice.drafter and candidate not in measured
                and candidate.predicted_speedup >= RIVAL_SHARE * choice.predicted_speedup):
            return candidate
    return None


def confirm(engine: Engine, prompts: Sequence[list[int]], base: DecodeConfig, plan: TreePlan, settings: TuneSettings,
            notes: list[str]) -> tuple[TreePlan, float | None]:
    """The plan, or the first candidate after it, that measures at least MIN_CONFIRMED× plain decoding,
    or the rival drafter's best when that measures faster still; plain decoding when none of
    `settings.confirm_tries` does. Returns the plan kept and its measurement."""
    tried = [plan.choice] + [c for c in plan.candidates if c.speculative and c != plan.choice]
    for index, choice in enumerate(tried[: settings.confirm_tries]):
        speedup = measured_speedup(engine, prompts, base, choice, settings.confirm_repeats)
        label = _label(choice)
        if speedup >= MIN_CONFIRMED:
            if choice is not plan.choice:
                notes.append(f"kept {label}: it measured {speedup:.2f}x plain decoding")
            other = rival(plan.candidates, choice, measured=tried[:index])  # those measured slower than plain
            if other is not None:
                other_speedup = measured_speedup(engine, prompts, base, other, settings.confirm_repeats)
                if other_speedup > speedup:
                    notes.append(f"kept {_label(other)} (predicted {other.predicted_speedup:.2f}x) over {label}: "
                                 f"it measured {other_speedup:.2f}x plain decoding against {speedup:.2f}x")
                    return dataclasses.replace(plan, choice=other), other_speedup
                notes.append(f"{_label(other)} (predicted {other.predicted_speedup:.2f}x) measured "
                             f"{other_speedup:.2f}x plain decoding against {speedup:.2f}x: not kept")
            return dataclasses.replace(plan, choice=choice), speedup
        notes.append(f"{label} (predicted {choice.predicted_speedup:.2f}x) measured {speedup:.2f}x plain decoding "
                     f"on the calibration prompts: not kept")
    plain = plain_choice(plan.plain_step_ms)
    notes.append("plain decoding planned: no candidate measured faster than it")
    return dataclasses.replace(plan, choice=plain), None


def _label(choice: PlanChoice) -> str:
    gate = f", gate {choice.draft_min_prob:g}" if choice.draft_min_prob else ""
    return f"{choice.drafter} {choice.budget}/{choice.depth}/{choice.width}{gate}"


def apply_choice(config: DecodeConfig, choice: PlanChoice, pinned: frozenset[str] = frozenset()) -> DecodeConfig:
    """`config` with a plan's drafter, tree and gate, except the fields the user fixed (`pinned`: tree_budget,
    depth, width, drafter, lookup_min_ngram, lookup_max_ngram, draft_min_prob).

    A plan of plain decoding turns speculation off unless the user fixed a tree field or the drafter.
    """
    if not choice.speculative:
        return config if pinned else dataclasses.replace(config, speculative=False)
    chosen: dict[str, Any] = {"tree_budget": choice.budget, "depth": choice.depth, "width": choice.width,
                                 "drafter": DrafterKind(choice.drafter), "draft_min_prob": choice.draft_min_prob}
    if choice.lookup_ngrams:
        chosen["lookup_min_ngram"], chosen["lookup_max_ngram"] = choice.lookup_ngrams
    return dataclasses.replace(config, **{k: v for k, v in chosen.items() if k not in pinned})


def run_request(engine: Engine, request: TuneRequest, config: DecodeConfig,
                on_step: Callable[[str], None] | None = None) -> TuneResult:
    """Tune as `run.json` asks (records.plan.TuneRequest); `config` is the run's speculative config."""
    settings = TuneSettings(widths=tuple(request.widths), max_budget=request.max_budget, max_depth=request.max_depth,
                            max_new_tokens=request.max_new_tokens, repeats=request.repeats,
                            lookup_ngrams=tuple((int(lo), int(hi)) for lo, hi in request.lookup_ngrams))
    if request.drafters:
        settings = dataclasses.replace(settings, drafters=tuple(DrafterKind(d) for d in request.drafters))
    if config.exact_layout:  # chains only
        settings = settings.exact()
    if "draft_min_prob" not in request.pinned:  # the plan chooses the gate: calibrate without one
        config = dataclasses.replace(config, draft_min_prob=0.0)
    return tune(engine, request.prompts, config, settings, budgets=request.budgets, on_step=on_step)


def kv_policy_of(info: BundleInfo) -> str:
    """The KV cache policy a bundle's graphs decode under, as a plan records it."""
    table = info.buckets
    return (table.kv_policy if table is not None else KVPolicy()).describe(info.graphs["target"].dtype)


def device_plan(result: TuneResult, *, device: str, threads: int, exact_layout: bool, created: str,
                kv_policy: str | None = None) -> DevicePlan:
    """The manifest record of a tuning result."""
    intercept, slope, residual = result.verify.linear_fit()

    return DevicePlan(
        device=device, created=created, threads=threads, exact_layout=exact_layout, choice=result.plan.choice,
        plain_step_ms=round(result.plain_step_ms, 4), verify_ms=[(n, round(ms, 4)) for n, ms in result.verify.points],
        verify_fit=CostFit(round(intercept, 4), round(slope, 4), round(residual, 4)), context=result.context,
        acceptance={c.name: c.acceptance_profile() for c in result.calibrations},
        candidates=list(result.plan.candidates),
        calibration_rounds=sum(len(c.rounds) for c in result.calibrations), tune_seconds=round(result.seconds, 2),
        confirmed_speedup=None if result.confirmed_speedup is None else round(result.confirmed_speedup, 4),
        notes=list(result.notes), kv_policy=kv_policy)
