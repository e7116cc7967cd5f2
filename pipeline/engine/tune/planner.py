"""Hardware-aware tree planning (docs/design.md §8 cost model): choose the tree that maximizes tokens/s.

Round time = draft levels + target verify of the tree's n nodes + host work; tokens per round =
1 + accepted drafts. Both are measured on the device, not assumed:

- `CostCurve`: the target's verify time c(n) for a tree of n nodes, measured at several n and
  interpolated (the curve is flat while the matmuls are memory-bound and turns linear once they
  are compute-bound, so a straight line fits it badly; the linear fit is still reported).
- `CalibrationRound`: one speculative round run with a generous tree (budget, depth). The
  drafter's best-first selection is prefix-consistent — the tree of budget n is the first n
  nodes of the tree of any larger budget, and the tree of depth D is that order restricted to
  depth <= D — and a restricted tree accepts exactly the prefix of the full tree's accepted path
  that it contains. So one calibration pass gives the expected accepted length E(n, D) for every
  smaller tree, counterfactually and without a model of the draft. Each round also records the
  time of every draft level and of the host's pruning per level, so a smaller tree's draft and
  host cost is known too.
- The confidence gate g (DecodeConfig.draft_min_prob) is one more cut: each round records every
  node's path probability under the draft's raw softmax and its parent, so the tree a gate would
  have left (the nodes at or above g whose parents it kept, the draft calls down to the deepest
  of them) is replayed too. Exact for chains (a gated node's siblings rank below it); for wider
  trees the frontier a gate would have chosen instead is not drafted, so those are estimates —
  which is what the confirmation step is for.
- `plan`: maximize E(n, D, g) * plain_step / (draft(D, g) + host(D) + E[c(size of the cut tree)])
  over the drafters (model, prompt lookup, both; lookup n-gram lengths), their candidate trees and
  the gates — a cut tree is smaller than n when the drafter proposed fewer nodes, e.g. lookup
  without a match; if nothing beats plain decoding by `min_gain` (5 %), plan plain decoding.

Pure numpy-free Python on purpose: it runs on the host (`specdec tune`) and inside the device
runner (bench tunes during its warm-up), where only the standard library is guaranteed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specdec.pipeline.records.plan import PlanChoice

MIN_GAIN = 1.05  # plan plain decoding unless speculation is predicted at least 5 % faster
# Confidence gates replayed for drafters that measured their nodes' draft probabilities. On a
# CPU where a verified row costs about a twelfth of a plain step and a draft call a tenth
# (SmolLM2-135M w8a8), a node pays from roughly 0.2 (benchmarks/RESULTS-archive.md, 2026-12-06).
GATES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)


@dataclass(frozen=True)
class CostCurve:
    """Measured milliseconds by size, interpolated piecewise-linearly (extrapolated by the last slope)."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("a cost curve needs at least one measured point")
        ordered = tuple(sorted((int(n), float(ms)) for n, ms in self.points))
        object.__setattr__(self, "points", ordered)

    def __call__(self, n: float) -> float:
        xs = [p[0] for p in self.points]
        ys = [p[1] for p in self.points]
        if len(xs) == 1:
            return ys[0]
        index = bisect.bisect_left(xs, n)
        if index < len(xs) and xs[index] == n:
            return ys[index]
        lo = min(max(index - 1, 0), len(xs) - 2)
        x0, x1, y0, y1 = xs[lo], xs[lo + 1], ys[lo], ys[lo + 1]
        return y0 + (y1 - y0) * (n - x0) / (x1 - x0)

    def linear_fit(self) -> tuple[float, float, float]:
        """(intercept ms, ms per node, worst relative residual) of a least-squares line."""
        xs = [float(p[0]) for p in self.points]
        ys = [p[1] for p in self.points]
        count = len(xs)
        mean_x, mean_y = sum(xs) / count, sum(ys) / count
        var = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
        intercept = mean_y - slope * mean_x
        worst = max(abs(intercept + slope * x - y) / y for x, y in zip(xs, ys, strict=True) if y > 0) if ys else 0.0
        return intercept, slope, worst

    def as_dict(self) -> dict[str, object]:
        intercept, slope, residual = self.linear_fit()
        return {"points": [list(p) for p in self.points], "fit_intercept_ms": round(intercept, 4),
                "fit_ms_per_node": round(slope, 4), "fit_max_residual": round(residual, 4)}


@dataclass(frozen=True)
class CalibrationRound:
    """One speculative round of a calibration pass (see the module docstring)."""

    order_depths: tuple[int, ...]  # depth of each selected non-root node, in best-first order
    path_positions: tuple[int, ...]  # best-first positions of the accepted path's nodes (depth 1, 2, ...)
    path_ranks: tuple[int, ...]  # each accepted node's rank among its siblings (0 = the draft's favourite)
    draft_ms: tuple[float, ...]  # time of each draft forward (level 0 = pending + root)
    prune_ms: tuple[float, ...]  # host pruning after each draft forward
    rest_ms: float  # the round's other host work (selection, verify glue, commit)
    order_parents: tuple[int, ...] = ()  # best-first position of each node's parent (-1: the root)
    order_gates: tuple[float, ...] = ()  # each node's log path probability under the draft (0: not measured)

    def passes(self, gate: float) -> set[int] | None:
        """Best-first positions of the nodes a confidence gate keeps (themselves and their ancestors at
        or above it); None when nothing is cut (gate 0, or the round measured no probabilities)."""
        if gate <= 0 or not len(self.order_gates) == len(self.order_parents) == len(self.order_depths):
            return None
        floor = math.log(gate)
        kept: set[int] = set()
        for position, (parent, logprob) in enumerate(zip(self.order_parents, self.order_gates, strict=True)):
            if logprob >= floor and (parent < 0 or parent in kept):
                kept.add(position)
        return kept

    def cut(self, depth: int, gate: float = 0.0) -> Cut:
        """The tree cut to `depth` levels and the confidence gate, before any budget: a budget of n
        keeps the first n - 1 of its nodes in best-first order, so one cut serves every budget."""
        allowed = self.passes(gate)
        order = [position for position, node_depth in enumerate(self.order_depths)
                 if node_depth <= depth and (allowed is None or position in allowed)]
        rank = {position: index for index, position in enumerate(order)}
        # the leading accepted nodes' ranks, each the largest so far: the path is accepted up to
        # the first node a budget left out
        path: list[int] = []
        for position in self.path_positions:
            if position not in rank:
                break
            path.append(max(rank[position], path[-1] if path else 0))
        return Cut(len(order), tuple(path))

    def draft_levels(self, depth: int, gate: float = 0.0) -> int:
        """Draft forwards the round would have run: `depth` levels, fewer where the gate left no node
        to draft from (level 0, the root's, always runs)."""
        levels = min(depth, len(self.draft_ms))
        allowed = self.passes(gate)
        if allowed is None:
            return levels
        deepest = max((self.order_depths[p] for p in allowed), default=0)
        return min(levels, 1 + deepest)

    def accepted(self, budget: int, depth: int, gate: float = 0.0) -> int:
        """Drafts accepted had the tree been cut to `budget` nodes (root included), `depth` levels and `gate`."""
        return self.cut(depth, gate).accepted(budget)

    def tree_size(self, budget: int, depth: int, gate: float = 0.0) -> int:
        """Nodes that tree would have verified: fewer than `budget` when the drafter proposed fewer
        (the draft model's early stop, prompt lookup without a match, the gate)."""
        return self.cut(depth, gate).tree_size(budget)


@dataclass(frozen=True)
class Cut:
    """A calibration round cut to a depth and a gate (CalibrationRound.cut), for any budget."""

    nodes: int  # nodes kept with no budget cut, root excluded
    path_ranks: tuple[int, ...]  # best-first rank of each leading accepted node among them (running maximum)

    def accepted(self, budget: int) -> int:
        return sum(1 for rank in self.path_ranks if rank < budget - 1)

    def tree_size(self, budget: int) -> int:
        return 1 + min(self.nodes, max(budget - 1, 0))


@dataclass(frozen=True)
class Calibration:
    """A calibration pass of one drafter configuration (width = frontier expanded per level, or
    lookup chains per round; lookup n-gram lengths where the drafter uses prompt lookup)."""

    drafter: str
    width: int
    max_budget: int
    max_depth: int
    rounds: tuple[CalibrationRound, ...]
    lookup_ngrams: tuple[int, int] | None = None  # (min, max) suffix lengths prompt lookup matched
    fixed_gate: float | None = None  # the confidence gate the user fixed (the pass ran under it); None: free

    @property
    def name(self) -> str:
        """`model/w4`, `lookup(1-3)/w2`: the key of its acceptance profile in a plan."""
        ngrams = f"({self.lookup_ngrams[0]}-{self.lookup_ngrams[1]})" if self.lookup_ngrams else ""
        return f"{self.drafter}{ngrams}/w{self.width}"

    @property
    def gates(self) -> tuple[float, ...]:
        """The confidence gates worth replaying: GATES where the rounds measured draft probabilities."""
        if self.fixed_gate is not None:
            return (self.fixed_gate,)
        measured = any(g < 0 for r in self.rounds for g in r.order_gates)
        return GATES if measured else (0.0,)

    def expected_tokens(self, budget: int, depth: int, gate: float = 0.0) -> float:
        if not self.rounds:
            return 1.0
        return 1.0 + sum(r.accepted(budget, depth, gate) for r in self.rounds) / len(self.rounds)

    def cut_costs(self, depth: int, gate: float, budgets: Sequence[int], verify: CostCurve, min_rows: int = 1
                  ) -> list[tuple[float, float]]:
        """(expected tokens a round, mean target verify ms) of the trees cut to `depth`, `gate` and each
        of `budgets`: each round is cut once for all budgets (tune weighs every budget, depth and gate)."""
        if not self.rounds:
            return [(1.0, verify(max(budget, min_rows))) for budget in budgets]
        cuts = [r.cut(depth, gate) for r in self.rounds]
        count = len(cuts)
        return [(1.0 + sum(c.accepted(budget) for c in cuts) / count,
                 sum(verify(max(c.tree_size(budget), min_rows)) for c in cuts) / count) for budget in budgets]

    def draft_and_host_ms(self, depth: int, gate: float = 0.0) -> float:
        """Mean draft + pruning time of the levels drafted (`depth`, fewer under a gate), plus the other host work."""
        if not self.rounds:
            return 0.0
        total = 0.0
        for r in self.rounds:
            levels = r.draft_levels(depth, gate)
            total += sum(r.draft_ms[:levels]) + sum(r.prune_ms[:levels]) + r.rest_ms
        return total / len(self.rounds)

    def verify_ms(self, budget: int, depth: int, verify: CostCurve, min_rows: int = 1, gate: float = 0.0) -> float:
        """Mean target verify time of the cut trees, each at the size it would have had (a call never
        has fewer than `min_rows` rows: the exact layout pads a lone root)."""
        return self.cut_costs(depth, gate, (budget,), verify, min_rows)[0][1]

    def acceptance_profile(self, max_rank: int = 8) -> dict[int, list[float]]:
        """profile[d][k]: P(the k-th ranked child at depth d is accepted | its parent was accepted).

        Estimated over the calibration rounds whose accepted path reached depth d - 1 (Sequoia's
        positional acceptance vector, per depth).
        """
        profile: dict[int, list[float]] = {}
        for depth in range(1, self.max_depth + 1):
            reached = [r for r in self.rounds if len(r.path_ranks) >= depth - 1]
            if not reached:
                break
            counts = [0] * max_rank
            for r in reached:
                if len(r.path_ranks) >= depth and r.path_ranks[depth - 1] < max_rank:
                    counts[r.path_ranks[depth - 1]] += 1
            profile[depth] = [round(c / len(reached), 4) for c in counts]
        return profile


def plain_choice(plain_step_ms: float) -> PlanChoice:
    """Plain decoding as a plan's choice: one node a round, one token, its own speed."""
    return PlanChoice("none", 1, 0, 0, 1.0, round(plain_step_ms, 4), 1.0)


@dataclass
class TreePlan:
    choice: PlanChoice
    plain_step_ms: float
    candidates: list[PlanChoice] = field(default_factory=list)  # the best few, for the report

    def as_dict(self) -> dict[str, object]:
        return {"choice": self.choice.__dict__, "plain_step_ms": round(self.plain_step_ms, 4),
                "candidates": [c.__dict__ for c in self.candidates]}


def plan_tree(calibrations: Sequence[Calibration], verify: CostCurve, plain_step_ms: float, *,
              budgets: Iterable[int] | None = None, min_gain: float = MIN_GAIN, keep: int = 8,
              min_rows: int = 1) -> TreePlan:
    """The drafter and tree maximizing predicted tokens/s; plain decoding unless it wins by `min_gain`."""
    if plain_step_ms <= 0:
        raise ValueError("the plain step time must be positive")
    choices: list[PlanChoice] = []
    for calibration in calibrations:
        sizes = sorted({b for b in (budgets or range(2, calibration.max_budget + 1))
                        if 2 <= b <= calibration.max_budget})
        for depth in range(1, calibration.max_depth + 1):
            for gate in calibration.gates:
                fixed = calibration.draft_and_host_ms(depth, gate)
                for budget, (tokens, verify_ms) in zip(sizes, calibration.cut_costs(depth, gate, sizes, verify,
                                                                                    min_rows), strict=True):
                    round_ms = fixed + verify_ms
                    speedup = tokens * plain_step_ms / round_ms
                    choices.append(PlanChoice(calibration.drafter, budget, depth, calibration.width,
                                              round(tokens, 4), round(round_ms, 4), round(speedup, 4),
                                              list(calibration.lookup_ngrams) if calibration.lookup_ngrams else None,
                                              draft_min_prob=gate))
    choices.sort(key=lambda c: (-c.predicted_speedup, c.budget, c.depth, c.draft_min_prob))
    plain = plain_choice(plain_step_ms)
    best = choices[0] if choices and choices[0].predicted_speedup >= min_gain else plain
    # the report shows the best few, and the best of every drafter so the runners-up are visible too
    # (a larger budget the drafter never filled predicts the same as the smaller one: shown once)
    shown: list[PlanChoice] = []
    for choice in choices:
        same_drafter = [c for c in shown if (c.drafter, c.lookup_ngrams) == (choice.drafter, choice.lookup_ngrams)]
        if any((c.depth, c.width, c.expected_tokens, c.round_ms) == (choice.depth, choice.width,
                                                                    choice.expected_tokens, choice.round_ms)
               for c in same_drafter):
            continue
        if len(shown) < keep or not same_drafter:
            shown.append(choice)
    return TreePlan(best, plain_step_ms, shown)
