"""Per-round and per-reply statistics, the raw material of `specdec bench` (docs/design.md §6)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Trace slice names shared with the bench trace writer (docs/design.md §6).
DRAFT = "Draft_Generate"
PRUNE = "Prune_Controller"
VERIFY = "Target_Verify"
ACCEPT = "Accept_Reject_Sample"
COMMIT = "KV_Commit"
LOOKUP = "Lookup"  # prompt lookup's host work: matching, grafting, indexing accepted tokens
PROCESS = "Logits_Process"  # logits processors (engine/processors/): masks for tree nodes and proposals
STAGES = (DRAFT, PRUNE, VERIFY, ACCEPT, COMMIT, LOOKUP, PROCESS)
SOURCES = ("model", "lookup")  # who proposed a tree node (tree.MODEL / tree.LOOKUP bits)


@dataclass
class Slice:
    stage: str
    start_ns: int
    duration_ns: int


@dataclass
class RoundStats:
    index: int
    kind: str  # "speculative" or "plain"
    tree_size: int = 1
    tree_depth: int = 0
    accepted_len: int = 1  # tokens emitted by the round (accepted drafts + the target's token)
    draft_calls: int = 0
    bytes_out: int = 0  # bytes copied out of onnxruntime during the round
    wall_ns: int = 0  # the whole round, host glue included
    # The tree as the planner replays it (planner.CalibrationRound): depths in best-first order,
    # the accepted path's best-first positions and its nodes' ranks among their siblings.
    order_depths: list[int] = field(default_factory=list)
    path_positions: list[int] = field(default_factory=list)
    path_ranks: list[int] = field(default_factory=list)
    # Per node in best-first order: its parent's best-first position (-1: the root) and its
    # Candidate.gate_logprob, so the planner can replay the round under a confidence gate.
    order_parents: list[int] = field(default_factory=list)
    order_gates: list[float] = field(default_factory=list)
    # Tree nodes (root excluded) each source proposed, and how many of them were accepted; a
    # node both sources proposed counts for both.
    proposed_model: int = 0
    proposed_lookup: int = 0
    accepted_model: int = 0
    accepted_lookup: int = 0
    slices: list[Slice] = field(default_factory=list)
    events: list[dict[str, object]] = field(default_factory=list)

    @property
    def accepted_drafts(self) -> int:
        return self.accepted_len - 1

    def stage_ns(self, stage: str) -> int:
        return sum(s.duration_ns for s in self.slices if s.stage == stage)

    @property
    def total_ns(self) -> int:
        return sum(s.duration_ns for s in self.slices)


class StageClock:
    """Times stages of one round into slices: `with clock(stats, DRAFT): ...`."""

    def __init__(self, stats: RoundStats) -> None:
        self.stats = stats

    def __call__(self, stage: str) -> _Timed:
        return _Timed(self.stats, stage)


class _Timed:
    def __init__(self, stats: RoundStats, stage: str) -> None:
        self.stats = stats
        self.stage = stage
        self.start = 0

    def __enter__(self) -> None:
        self.start = time.perf_counter_ns()

    def __exit__(self, *exc: object) -> None:
        self.stats.slices.append(Slice(self.stage, self.start, time.perf_counter_ns() - self.start))


@dataclass
class Reply:
    prompt_ids: list[int]
    output_ids: list[int]
    stop_reason: str  # "eos", "max_new_tokens", "max_context" or "refused" (engine/processors/)
    ttft_ns: int
    total_ns: int
    prefill_ns: int
    rounds: list[RoundStats]

    @property
    def speculative_rounds(self) -> list[RoundStats]:
        return [r for r in self.rounds if r.kind == "speculative"]

    @property
    def mean_accepted_len(self) -> float:
        spec = self.speculative_rounds
        return sum(r.accepted_len for r in spec) / len(spec) if spec else 0.0

    def by_source(self) -> dict[str, dict[str, int]]:
        """{"model": {"proposed": n, "accepted": a}, "lookup": {...}} over the speculative rounds."""
        spec = self.speculative_rounds
        return {
            "model": {"proposed": sum(r.proposed_model for r in spec), "accepted": sum(r.accepted_model for r in spec)},
            "lookup": {"proposed": sum(r.proposed_lookup for r in spec),
                       "accepted": sum(r.accepted_lookup for r in spec)},
        }

    @property
    def acceptance_rate(self) -> float:
        """Per-token acceptance alpha: accepted drafts / positions where a draft was tested.

        A round tests every accepted depth plus the first rejected one unless the path reached
        the tree's depth; this is the maximum-likelihood alpha of the geometric model that the
        analytic speedup formula assumes.
        """
        accepted = sum(r.accepted_drafts for r in self.speculative_rounds)
        rejected = sum(1 for r in self.speculative_rounds if r.accepted_drafts < r.tree_depth)
        tested = accepted + rejected
        return accepted / tested if tested else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "rounds": len(self.rounds),
            "speculative_rounds": len(self.speculative_rounds),
            "mean_accepted_len": round(self.mean_accepted_len, 4),
            "acceptance_rate": round(self.acceptance_rate, 4),
            "by_source": self.by_source(),
            "new_tokens": len(self.output_ids),
            "stop_reason": self.stop_reason,
            "ttft_ms": round(self.ttft_ns / 1e6, 3),
            "total_ms": round(self.total_ns / 1e6, 3),
        }
