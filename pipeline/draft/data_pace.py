"""Whether one more answer batch fits before the data deadline (feature_data.build).

A batch first reads its prompts (one pass over batch x padded width tokens: a fixed cost), then
answers a token a step. A batch whose prompts' pass ends at the deadline keeps one answer token a
row and has spent its whole prefill on them; that time would have gone to training. Long prompts
make it large: on a float32-only CPU (AVX2) SmolLM2-135M's recycled batches (requests quoting earlier
answers, up to 384 tokens) took 113 s before their first answer token, more than a quarter of an
average batch, so a rule on the average batch alone started them with too little time left
(benchmarks/RESULTS-archive.md, 2026-12-07 AVX2).

So the next batch's prefill is estimated from its own prompts, at this run's measured seconds per
padded prompt token, and the batch starts only when that prefill plus LATE_START of an average
batch's answering still fits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LATE_START = 0.25  # of an average batch's answering time, left after the prompts' pass


@dataclass
class BatchPace:
    """What this run's batches cost (shards of earlier runs included where their sidecars say)."""

    prefill_s: float = 0.0
    prompt_cells: int = 0  # batch x padded prompt width, over the batches whose prefill was timed
    answer_s: float = 0.0
    batches: int = 0

    def add(self, *, seconds: float, prefill_s: float | None, prompt_cells: int | None) -> None:
        """A finished batch: `seconds` in all, its prompts' pass `prefill_s` over `prompt_cells`
        (None for a shard written before they were recorded: counted as answering time only)."""
        self.batches += 1
        if prefill_s is None or prompt_cells is None:
            self.answer_s += seconds
            return
        self.prefill_s += prefill_s
        self.prompt_cells += prompt_cells
        self.answer_s += max(0.0, seconds - prefill_s)

    def add_record(self, record: Mapping[str, Any]) -> None:
        """A kept shard, from its sidecar record (feature_data.read_sidecar)."""
        self.add(seconds=float(record.get("seconds", 0.0)), prefill_s=record.get("prefill_s"),
                 prompt_cells=record.get("prompt_cells"))

    def prefill_estimate(self, prompts: Sequence[Sequence[int]]) -> float:
        """Seconds the pass over `prompts` should take at this run's rate (0 before any was timed)."""
        if not self.prompt_cells or not prompts:
            return 0.0
        return self.prefill_s / self.prompt_cells * prompt_cells(prompts)


def prompt_cells(prompts: Sequence[Sequence[int]]) -> int:
    """Rows x padded width: what a batch's prompts' pass computes (rows pad to the longest)."""
    return len(prompts) * max((len(p) for p in prompts), default=0)


def too_late(now: float, deadline: float, pace: BatchPace, prompts: Sequence[Sequence[int]] = ()) -> bool:
    """Whether a batch of `prompts` started at `now` would be cut too early to pay."""
    left = deadline - now
    if left <= 0:
        return True
    if not pace.batches:
        return False
    return left < pace.prefill_estimate(prompts) + LATE_START * pace.answer_s / pace.batches
